"""A backend of the user's, for tests/test_default_mpi.py: refir's spmd backend
with one built-in mutant in place around every call ($PLANTED_MUTANT, by
default the MPI allgather that writes its own block on its first call only), so that `conform
--backend planted_mpi:backend` runs a planted bug wherever the backend runs,
in the MPI batch's ranks too; and backends that stall, die, or hand MPI blocks of
the wrong size on one rank (tests/test_mpi_wrong_sizes.py)."""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from unittest import mock

import numpy as np

from conformance.mutants import MUTANTS
from interp.backend import run_spmd
from refir.lowering.lower import Lowered
from refir.world.backend_types import Shards
from refir.world.ranks import World, launched_by_mpi


def backend(lowered: Lowered, inputs: Shards, bindings: dict[str, int], world: World) -> Shards:
    name = os.environ.get("PLANTED_MUTANT", "mpi_allgather_own_block_kept")
    (planted,) = [m for m in MUTANTS if m.name == name]
    with planted.inject():
        return run_spmd(lowered, inputs, bindings, world)


def stalls(lowered: Lowered, inputs: Shards, bindings: dict[str, int], world: World) -> Shards:
    """spmd, but under MPI every rank sleeps past the batch's limit first (a hung job)."""
    if launched_by_mpi():
        time.sleep(float(os.environ.get("PLANTED_STALL_S", "120")))
    return run_spmd(lowered, inputs, bindings, world)


def dies(lowered: Lowered, inputs: Shards, bindings: dict[str, int], world: World) -> Shards:
    """spmd, but under MPI rank 0's process ends at once (a crashed job)."""
    if launched_by_mpi() and world.rank == 0:
        os._exit(3)
    return run_spmd(lowered, inputs, bindings, world)


def wrong_block(lowered: Lowered, inputs: Shards, bindings: dict[str, int], world: World) -> Shards:
    """spmd, but under MPI rank 1 hands every communication a block one row
    longer than its type gives (a local step's bug that slipped by): the
    transport must refuse to send it."""
    from interp.mpi.transport import MpiTransport

    communicate = MpiTransport.communicate

    def longer(self, op, src, dst, buffers):  # noqa: ANN001, ANN202 - the method's own signature
        x = buffers[self.rank]
        return communicate(self, op, src, dst, {self.rank: np.concatenate([x, x[:1]])})

    with mock.patch.object(MpiTransport, "communicate", longer) if world.rank == 1 else nullcontext():
        return run_spmd(lowered, inputs, bindings, world)


def wrong_message(lowered: Lowered, inputs: Shards, bindings: dict[str, int], world: World) -> Shards:
    """spmd, but under MPI rank 0 sends its point-to-point blocks PLANTED_BYTES
    bytes longer (a positive number) or shorter (a negative one) than their
    header says, past the sender's own check: the receiver must refuse them."""
    import interp.mpi.transport as transport

    extra = int(os.environ.get("PLANTED_BYTES", "4"))
    to_bytes = transport.to_bytes

    def resized(x, axis=0):  # noqa: ANN001, ANN202 - to_bytes's own signature
        out = to_bytes(x, axis)
        return out[:extra] if extra < 0 else np.concatenate([out, np.zeros(extra, np.uint8)])

    with mock.patch.object(transport, "to_bytes", resized) if world.rank == 0 else nullcontext():
        return run_spmd(lowered, inputs, bindings, world)
