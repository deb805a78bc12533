"""Mutants of the bug classes a plain in-process run on small 1-D meshes misses.

- a collective that picks a device's part by its place in the whole mesh, not
  in its team (wrong only along a non-last axis of a 2-D or 3-D mesh whose ids
  are out of order);
- narrowing integer casts that saturate instead of wrapping;
- a GPU tree reduction that skips its last combining level (wrong only once a
  reduced extent fills a thread block: THREADS, 32 under the CUDA simulator);
- two bugs of the MPI transport alone (a broadcast root taken as a world rank
  instead of a team position; blocks packed row-major whatever their axis):
  they show only with a rank per process, so the mutant table launches a small
  batch under mpiexec for them (conformance/mpi_batch.py).

Importing this module registers them in the table (conformance/mutants/registry.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import numpy as np

import interp.collectives
import interp.impls
from conformance.mutants.patching import fresh_kernels
from conformance.mutants.registry import mutant
from refir.ir import ops
from refir.ir.types import DTYPES
from refir.lowering.teams import Team
from refir.world.ranks import launched_by_mpi


@dataclass(frozen=True)
class _MeshPlaced(Team):
    """A team that answers "which part is yours" with the device's place in the
    whole mesh (modulo the team size) instead of its place in the team."""

    mesh_devices: tuple[int, ...] = ()

    def index(self, device: int) -> int:
        return self.mesh_devices.index(device) % len(self.devices)


def _mesh_placed(rule: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(op: Any, team: Team, x: dict, src: Any, dst: Any, *rest: Any) -> Any:
        placed = _MeshPlaced(team.devices, team.senders, team.receivers, src.mesh.devices)
        return rule(op, placed, x, src, dst, *rest)

    return wrapped


@mutant("reduce_scatter and all_to_all hand a device the part of its mesh position, not its team position",
        by="values", transport="in-process", needs=(ops.ReduceScatter, ops.AllToAll))
def team_part_by_mesh_position() -> Iterator[None]:
    rules = interp.collectives.EXCHANGES
    with mock.patch.dict(rules, {c: _mesh_placed(rules[c]) for c in (ops.ReduceScatter, ops.AllToAll)}):
        yield


@mutant("a narrowing integer cast saturates at the target's range instead of wrapping", by="values",
        needs=(ops.Cast,))
def integer_cast_saturates() -> Iterator[None]:
    cast = interp.impls.IMPLS[ops.Cast]

    def impl(op: ops.Cast, x: np.ndarray) -> np.ndarray:
        to = DTYPES[op.dtype]
        if x.dtype.kind in "iu" and to.kind in "iu":
            info = np.iinfo(to)
            return np.clip(x.astype(np.int64) if x.dtype != np.uint64 else x, info.min, info.max).astype(to)
        return cast(op, x)

    with mock.patch.dict(interp.impls.IMPLS, {ops.Cast: impl}):
        yield


@mutant("the GPU block reduction's shared-memory tree skips its last level (partial[1] is never folded)",
        by="values", backend="gpu", needs=(ops.Reduction,))
def gpu_tree_skips_last_level() -> Iterator[None]:
    import gpu_backend.kernels.reduce_kernels as reduce_kernels

    tree = reduce_kernels._tree
    # every kernel that folds through the tree, built again with the wrong one
    built = (reduce_kernels.per_block_kernel, reduce_kernels.plane_kernel, reduce_kernels.total_kernel)
    with fresh_kernels(*built), mock.patch.object(reduce_kernels, "_tree", lambda kind: tree(kind, last=2)):
        yield


def _mpi_transport() -> Any:
    """interp.mpi.transport under an MPI launch, else None: in one process these
    mutants have nothing to patch (the mutant table runs them under mpiexec)."""
    if not launched_by_mpi():
        return None
    import interp.mpi.transport

    return interp.mpi.transport


@mutant("the MPI broadcast takes its root's world rank as the root's position in the team", by="values",
        transport="mpi", needs=(ops.Broadcast,))
def mpi_broadcast_root_world_rank() -> Iterator[None]:
    mpi = _mpi_transport()
    if mpi is None:
        yield
        return

    def broadcast(t: Any, op: ops.Broadcast, team: Team, x: Any, src: Any, dst: Any) -> Any:
        comm = t.team_comm(team.devices)
        shape = t.shape_from(comm, 0, x, src.rank)
        nbytes = int(np.prod(shape)) * src.np_dtype.itemsize
        buf = mpi.to_bytes(x) if x is not None else np.zeros(nbytes, np.uint8)
        if buf.size != nbytes:  # the wrong root's buffer must have the right size to travel
            buf = np.zeros(nbytes, np.uint8)
        mpi.wait(comm.Ibcast(buf, root=op.root % comm.size), "a broadcast")
        return mpi.from_bytes(buf, shape, src.np_dtype)

    with mock.patch.dict(mpi.MPI_RULES, {ops.Broadcast: broadcast}):
        yield


@mutant("the MPI transport packs every block row-major, not with its gathered axis first", by="values",
        transport="mpi", needs=(ops.Allgather, ops.Scatter))
def mpi_packs_row_major() -> Iterator[None]:
    mpi = _mpi_transport()
    if mpi is None:
        yield
        return
    to_bytes = mpi.to_bytes
    with mock.patch.object(mpi, "to_bytes", lambda x, axis=0: to_bytes(x, 0)):
        yield
