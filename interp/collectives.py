"""What every communication means, for one team, on whole local blocks.

`exchange` is the spec: from the senders' buffers (team order) it computes what
each receiver gets. The in-process transport calls it directly; the MPI and
NCCL transports must give the same bits. The rules touch blocks only through
`Arrays` (concatenate, split, fold), so the GPU backend runs this same spec on
device buffers. Where the receive-buffer sentinel is armed (interp/sentinel.py)
the buffers they make are filled with it before they are written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from interp import sentinel
from interp.impls import fold
from refir.ir import ops
from refir.ir.blocks import cut_runs, gathered_order, gathered_split
from refir.ir.tables import registrar
from refir.ir.types import TensorType, block, block_number
from refir.lowering.run_exchange import cut_by
from refir.lowering.teams import Team

Blocks = dict[int, np.ndarray]
Rule = Callable[..., Blocks]
EXCHANGES: dict[type, Rule] = {}


rule = registrar(EXCHANGES)


def block_index(t: TensorType, device: int, axis: int) -> int:
    """Which block of `axis` the device holds under type `t` (a scatter's result
    is on a 1-D mesh: its coordinate)."""
    return block_number(t.mesh, t.axes[axis], device)


def split(x: np.ndarray, n: int, axis: int) -> list[np.ndarray]:
    """x cut into n blocks along `axis` by the sharding rule (refir.ir.types.block):
    the last ones may be shorter or empty (np.array_split would spread them)."""
    extent = x.shape[axis]
    return [x[(slice(None),) * axis + (slice(*block(extent, n, k)),)] for k in range(n)]


class Arrays(Protocol):
    """The block operations the rules use."""

    def concatenate(self, xs: list[Any], axis: int) -> Any: ...
    def split(self, x: Any, n: int, axis: int) -> list[Any]: ...
    def fold(self, kind: str, parts: list[Any]) -> Any: ...


class NumpyArrays:
    def concatenate(self, xs: list[np.ndarray], axis: int) -> np.ndarray:
        if not sentinel.armed():
            return np.concatenate(xs, axis=axis)
        shape = list(xs[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        return np.concatenate(xs, axis=axis, out=sentinel.empty(tuple(shape), xs[0].dtype))

    def split(self, x: np.ndarray, n: int, axis: int) -> list[np.ndarray]:
        return split(x, n, axis)

    def fold(self, kind: str, parts: list[np.ndarray]) -> np.ndarray:
        return fold(kind, parts, sentinel.fill(np.empty_like(parts[0])) if sentinel.armed() else None)


NUMPY = NumpyArrays()


@rule(ops.Allgather, ops.Gather)
def _gather(op: ops.Allgather | ops.Gather, team: Team, x: Blocks, src: TensorType, dst: TensorType,
            xp: Arrays) -> Blocks:
    """Every receiver gets the senders' blocks joined (a gather's team has one receiver);
    over an interleaved mesh axis, the senders' runs each at its place (§3.4)."""
    split = gathered_split(src.axes[op.axis]) if isinstance(op, ops.Allgather) else 1
    if split == 1:
        whole = xp.concatenate([x[s] for s in team.senders], op.axis)
    else:
        whole = interleaved_join([x[s] for s in team.senders], split, op.axis, xp)
    return {r: whole for r in team.receivers}


def interleaved_join(blocks: list[Any], split: int, axis: int, xp: Arrays) -> Any:
    """The members' buffers (team order) of an axis cut with split factor `split`,
    gathered: their pieces in the order of the list they were cut from
    (blocks.gathered_order); every transport's allgather ends here."""
    sizes = [b.shape[axis] for b in blocks]
    lead = (slice(None),) * axis
    return xp.concatenate([blocks[k][(*lead, slice(start, stop))]
                           for k, start, stop in gathered_order(sizes, split)] or [blocks[0]], axis)


@rule(ops.Scatter)
def _scatter(op: ops.Scatter, team: Team, x: Blocks, src: TensorType, dst: TensorType, xp: Arrays) -> Blocks:
    parts = xp.split(x[op.root], len(team.receivers), op.axis)
    return {r: parts[block_index(dst, r, op.axis)] for r in team.receivers}


@rule(ops.Broadcast)
def _broadcast(op: ops.Broadcast, team: Team, x: Blocks, src: TensorType, dst: TensorType, xp: Arrays) -> Blocks:
    return {r: x[op.root] for r in team.receivers}


@rule(ops.SendRecv)
def _send_recv(op: ops.SendRecv, team: Team, x: Blocks, src: TensorType, dst: TensorType, xp: Arrays) -> Blocks:
    return {team.receivers[0]: x[team.senders[0]]}


@rule(ops.AllToAll)
def _all_to_all(op: ops.AllToAll, team: Team, x: Blocks, src: TensorType, dst: TensorType, xp: Arrays) -> Blocks:
    """Receiver r gets its part (dst's) of the senders' blocks joined along the
    concat axis (src's parts put together: in team order, or where k cuts the
    axis with a split factor, each member's runs at their places, §3.4): every
    other axis is the team's alike but the split one, which every sender holds
    whole (or, the same axis, the joined list). So the senders' blocks joined
    once and the whole cut once give every receiver exactly its pieces: a team
    of n devices costs one concatenation and n views, not n * n pieces (issue
    30: teams of thousands)."""
    k = op.mesh_axis
    blocks = [x[s] for s in team.senders]
    joined = cut_by(src, op.concat_axis, k) or 1
    whole = (interleaved_join(blocks, joined, op.concat_axis, xp) if joined > 1
             else xp.concatenate(blocks, op.concat_axis))
    return _cut(whole, team, cut_by(dst, op.split_axis, k) or 1, op.split_axis, xp)


def _cut(whole: Any, team: Team, split: int, axis: int, xp: Arrays) -> Blocks:
    """Each receiver's part of `whole` along `axis`, cut over the team with
    split factor `split` (§3.4; 1: §3.1's blocks, views)."""
    n = len(team.devices)
    if split == 1:
        parts = xp.split(whole, n, axis)
        return {r: parts[team.index(r)] for r in team.receivers}
    lead = (slice(None),) * axis
    out = {}
    for r in team.receivers:
        runs = cut_runs(whole.shape[axis], n, split, team.index(r)) or ((0, 0),)
        pieces = [whole[(*lead, slice(lo, hi))] for lo, hi in runs]
        out[r] = pieces[0] if len(pieces) == 1 else xp.concatenate(pieces, axis)
    return out


@rule(ops.Allreduce)
def _allreduce(op: ops.Allreduce, team: Team, x: Blocks, src: TensorType, dst: TensorType, xp: Arrays) -> Blocks:
    total = xp.fold(op.kind, [x[s] for s in team.senders])
    return {r: total for r in team.receivers}


@rule(ops.Reduce)
def _reduce(op: ops.Reduce, team: Team, x: Blocks, src: TensorType, dst: TensorType, xp: Arrays) -> Blocks:
    total = xp.fold(op.kind, [x[s] for s in team.senders])
    return {r: total for r in team.receivers}


@rule(ops.ReduceScatter)
def _reduce_scatter(op: ops.ReduceScatter, team: Team, x: Blocks, src: TensorType,
                    dst: TensorType, xp: Arrays) -> Blocks:
    """The fold, each receiver's part of it (runs where dst's split factor on
    the mesh axis is not 1, §3.4)."""
    total = xp.fold(op.kind, [x[s] for s in team.senders])
    return _cut(total, team, cut_by(dst, op.axis, op.mesh_axis) or 1, op.axis, xp)


def exchange(op: ops.Communication, team: Team, x: Blocks, src: TensorType, dst: TensorType,
             xp: Arrays = NUMPY) -> Blocks:
    return EXCHANGES[type(op)](op, team, x, src, dst, xp)
