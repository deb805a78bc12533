"""Mutants of uneven sharding (spec §3.1): the bug classes of issue 13, each
killed on the `uneven_*` corpus programs: padding that leaks into a
replicated result, a short block read at the wrong offset, an empty block
that contributes zeros, pieces cut as np.array_split does, a symbol guessed
from a local block.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any
from unittest import mock

import numpy as np

import interp.collectives
import interp.impls
import interp.spmd
from conformance.mutants.patching import mpi_module, mpi_rules, sharded_symbols_from_blocks
from conformance.mutants.registry import mutant
from refir.ir import ops
from refir.ir.types import TensorType, block_number, block_size, local_shape, parts_of
from refir.lowering.lower import Step
from refir.lowering.teams import Team


def _padded(x: np.ndarray, axis: int, extent: int) -> np.ndarray:
    """x with zeros appended along `axis` up to `extent`."""
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, extent - x.shape[axis])
    return np.pad(x, pad)


@mutant("an uneven allgather pads short blocks at the front, so padding leaks into the replicated result "
        "and the tail is lost", by="values")
def allgather_front_padding() -> Iterator[None]:
    def gathered(blocks: list[np.ndarray], axis: int, extent: int) -> np.ndarray:
        c = block_size(extent, len(blocks), 0)
        slots = [np.flip(_padded(np.flip(b, axis), axis, c), axis) for b in blocks]  # zeros, then the block
        return np.concatenate(slots, axis=axis)[(slice(None),) * axis + (slice(0, extent),)]

    yield from _allgathered_by(gathered)


@mutant("an uneven allgather unpads its slots with np.array_split's sizes (5 over 4: 2, 1, 1, 1), not the "
        "blocks' (2, 2, 1, 0)", by="values")
def allgather_array_split() -> Iterator[None]:
    def gathered(blocks: list[np.ndarray], axis: int, extent: int) -> np.ndarray:
        n, c = len(blocks), block_size(extent, len(blocks), 0)
        sizes = [extent // n + (k < extent % n) for k in range(n)]
        slots = [_padded(b, axis, c)[(slice(None),) * axis + (slice(0, s),)] for b, s in zip(blocks, sizes)]
        return np.concatenate(slots, axis=axis)

    yield from _allgathered_by(gathered)


def _own_size_offsets(x: np.ndarray, n: int, axis: int) -> list[np.ndarray]:
    """Blocks of the right sizes at the wrong places: block k starts at k times its
    own size, so a short last block reads from the middle of the axis."""
    out = []
    for k in range(n):
        size = block_size(x.shape[axis], n, k)
        out.append(x[(slice(None),) * axis + (slice(k * size, (k + 1) * size),)])
    return out


# Under mpiexec its wrong cuts fail some ranks' local steps (shard_c1) while a peer waits in a
# nest's all_to_all (nested_2d_uneven): refir.world.rank_failures ends that wait at once.
@mutant("a short block's offset is its device index times its own size, not times ceil(E/n)", by="values")
def block_offset_from_own_size() -> Iterator[None]:
    def slice_block(step: Step, device: int, x: np.ndarray, src: TensorType) -> np.ndarray:
        index = []
        for i, a in enumerate(step.type.axes):
            if a.shard and not src.axes[i].shard:
                k = block_number(step.type.mesh, a, device)
                size = block_size(x.shape[i], parts_of(step.type.mesh, a), k)
                index.append(slice(k * size, (k + 1) * size))
            else:
                index.append(slice(None))
        return x[tuple(index)]

    mpi = mpi_module()
    with mock.patch.object(interp.spmd, "slice_block", slice_block), \
            mock.patch.object(interp.collectives, "split", _own_size_offsets), \
            (mock.patch.object(mpi, "split", _own_size_offsets) if mpi else ExitStack()):
        yield


@mutant("a device whose block is empty contributes zeros to a reduction, not the identity", by="values")
def empty_block_partial_zero() -> Iterator[None]:
    reduction = interp.impls.IMPLS[ops.Reduction]

    def impl(op: ops.Reduction, x: np.ndarray) -> np.ndarray:
        out = reduction(op, x)
        if any(x.shape[d] == 0 for d in op.dims):
            return np.zeros_like(out)
        return out

    with mock.patch.dict(interp.impls.IMPLS, {ops.Reduction: impl}):
        yield


@mutant("an uneven all_to_all cuts its pieces as np.array_split does (the remainder spread over the first)",
        by="strides")
def all_to_all_array_split() -> Iterator[None]:
    def pieces(x: np.ndarray, n: int, axis: int) -> list[np.ndarray]:
        return np.array_split(x, n, axis=axis)

    def local(op: Any, team: Team, x: dict, src: TensorType, dst: TensorType, xp: Any) -> Any:
        cut = {s: pieces(x[s], len(team.devices), op.split_axis) for s in team.senders}
        return {r: np.concatenate([cut[s][team.index(r)] for s in team.senders], op.concat_axis)
                for r in team.receivers}

    def remote(t: Any, op: Any, team: Team, x: np.ndarray, src: TensorType, dst: TensorType) -> np.ndarray:
        # Pieces travel as Python objects, so the wrong sizes cannot break MPI's
        # protocol (a hang); they show in the result's shape. Every member's pieces
        # go to every member through a bounded wait, which also hears of a rank that
        # failed in the run (refir.world.rank_failures), as mpi4py's blocking
        # alltoall would not: a member that refused a wrong-shaped block stalls nobody.
        from refir.world.mpi_job import allgather_obj

        comm = t.team_comm(team.devices)
        every = allgather_obj(comm, pieces(x, comm.size, op.split_axis), "an all_to_all's pieces")
        return np.concatenate([p[comm.rank] for p in every], axis=op.concat_axis)

    mpi = mpi_rules()
    with mock.patch.dict(interp.collectives.EXCHANGES, {ops.AllToAll: local}), \
            mock.patch.dict(mpi, {ops.AllToAll: remote} if mpi else {}):
        yield


@mutant("a segment recovers a sharded symbol from its local block as local size x mesh size", by="values")
def extent_from_local_block() -> Iterator[None]:
    with sharded_symbols_from_blocks(lambda t, axis, n: n * parts_of(t.mesh, axis)):
        yield

def _allgathered_by(gathered: Any) -> Iterator[None]:
    """Every allgather, in one process and over MPI, joined by `gathered(blocks, axis, extent)`;
    an interleaved one (§3.4, not these mutants' bug) is left to the true rule, as its
    blocks are no contiguous cuts of the extent (a wrong join would fail some ranks only)."""
    true_local, mpi = interp.collectives.EXCHANGES[ops.Allgather], mpi_rules()
    true_remote = mpi.get(ops.Allgather)

    def local(op: Any, team: Team, x: dict, src: TensorType, dst: TensorType, xp: Any) -> Any:
        if src.interleaved():
            return true_local(op, team, x, src, dst, xp)
        whole = gathered([x[s] for s in team.senders], op.axis, dst.axes[op.axis].extent)
        return {r: whole for r in team.receivers}

    def remote(t: Any, op: Any, team: Team, x: np.ndarray, src: TensorType, dst: TensorType) -> np.ndarray:
        if src.interleaved():
            return true_remote(t, op, team, x, src, dst)
        shapes = [local_shape(src, {}, d) for d in team.devices]
        return gathered(t.allgather(t.team_comm(team.devices), x, op.axis, shapes), op.axis, dst.axes[op.axis].extent)

    with mock.patch.dict(interp.collectives.EXCHANGES, {ops.Allgather: local}), \
            mock.patch.dict(mpi, {ops.Allgather: remote} if mpi else {}):
        yield
