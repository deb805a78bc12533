"""A mutant of the MPI transport that only the receive-buffer sentinel shows.

`mpi_allgather_own_block_kept` keeps each allgather's receive buffer from call
to call and, receiving in place (MPI_IN_PLACE), puts this rank's own block
there on the first call only, as if it stayed: every later call leaves that
piece of the receive buffer unwritten. Without the sentinel
(interp/sentinel.py) the piece holds yesterday's bytes, the right ones
whenever the call repeats with the same data, as conform's segment-by-segment
run repeats the whole run: the bug passes every check. With the sentinel, the
transport fills the kept buffer before each call (as it fills every buffer it
receives into), and the segment-by-segment run fails. With a rank per process
only; in one process there is nothing to patch (the mutant table runs it under
mpiexec, conformance/mpi_batch.py; the default run's MPI batch meets it in a
backend that puts it in place, tests/planted_mpi.py).

Importing this module registers it in the table (conformance/mutants/registry.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from math import prod
from typing import Any
from unittest import mock

import numpy as np

from conformance.mutants.registry import mutant
from refir.ir import ops
from refir.ir.types import TensorType, local_shape
from refir.lowering.teams import Team
from refir.world.ranks import launched_by_mpi

# The buffers the mutant keeps, by the op's id (the op is kept too, so that its id stays its): as a
# transport's would, they outlive the calls (a backend may put the mutant in place for each call).
_KEPT: dict[int, tuple[object, np.ndarray]] = {}


@mutant("the MPI allgather keeps its receive buffer between calls and puts this rank's own block there on the "
        "first call only (later calls leave that piece unwritten)", by="isolation", transport="mpi",
        needs=(ops.Allgather,))
def mpi_allgather_own_block_kept() -> Iterator[None]:
    if not launched_by_mpi():
        yield
        return
    from mpi4py import MPI

    import interp.mpi.transport as mpi
    from interp.mpi.layout import displacements
    from interp.sentinel import fill_bytes
    from refir.world.mpi_job import wait

    def allgather(t: Any, op: ops.Allgather, team: Team, x: np.ndarray, src: TensorType,
                  dst: TensorType) -> np.ndarray:
        comm = t.team_comm(team.devices)
        shapes = [local_shape(src, {}, d) for d in team.devices]
        counts = [prod(s) * x.dtype.itemsize for s in shapes]
        first = id(op) not in _KEPT
        if first:
            _KEPT[id(op)] = (op, np.empty(sum(counts), np.uint8))
        recv = fill_bytes(_KEPT[id(op)][1], x.dtype)  # the transport's rule: the sentinel before every receive
        if first:
            start = sum(counts[:comm.rank])
            mpi.pack_into(recv[start:start + counts[comm.rank]], x, op.axis)
        wait(comm.Iallgatherv(MPI.IN_PLACE, [recv, counts, displacements(counts), MPI.BYTE]), "an allgather")
        blocks = [mpi.from_bytes(recv[o:o + c], s, x.dtype, op.axis)
                  for o, c, s in zip(displacements(counts), counts, shapes)]
        return np.concatenate(blocks, axis=op.axis)

    with mock.patch.dict(mpi.MPI_RULES, {ops.Allgather: allgather}):
        yield
