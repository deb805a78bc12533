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
from refir.ir.blocks import gathered_order, gathered_split
from refir.ir.tables import registrar
from refir.ir.types import TensorType, block, block_number
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
    """Receiver r gets piece r of every sender's block, joined in team order. The
    pieces are cut along the split axis, which the senders' blocks share (every
    other axis is the team's alike but the concatenated one), so the senders'
    blocks joined once and the whole cut once give every receiver exactly its
    joined pieces: a team of n devices costs one concatenation and n views,
    not n * n pieces (issue 30: teams of thousands)."""
    n = len(team.devices)
    if op.split_axis != op.concat_axis:
        whole = xp.concatenate([x[s] for s in team.senders], op.concat_axis)
        parts = xp.split(whole, n, op.split_axis)
        return {r: parts[team.index(r)] for r in team.receivers}
    pieces = {s: xp.split(x[s], n, op.split_axis) for s in team.senders}
    return {
        r: xp.concatenate([pieces[s][team.index(r)] for s in team.senders], op.concat_axis)
        for r in team.receivers
    }


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
    parts = xp.split(xp.fold(op.kind, [x[s] for s in team.senders]), len(team.devices), op.axis)
    return {r: parts[team.index(r)] for r in team.receivers}


def exchange(op: ops.Communication, team: Team, x: Blocks, src: TensorType, dst: TensorType,
             xp: Arrays = NUMPY) -> Blocks:
    return EXCHANGES[type(op)](op, team, x, src, dst, xp)
