"""What every communication means, for one team, on whole local blocks.

`exchange` is the spec: from the senders' buffers (team order) it computes what
each receiver gets. The in-process transport calls it directly; the MPI and
NCCL transports must give the same bits.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from interp.impls import fold
from refir import ops
from refir.teams import Team
from refir.types import TensorType

Blocks = dict[int, np.ndarray]
Rule = Callable[..., Blocks]
EXCHANGES: dict[type, Rule] = {}


def rule(cls: type) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        EXCHANGES[cls] = fn
        return fn

    return register


def block_index(t: TensorType, device: int, axis: int) -> int:
    """Which block of `axis` the device holds under type `t`."""
    return t.mesh.coord(device, t.axes[axis].shard)


def split(x: np.ndarray, n: int, axis: int) -> list[np.ndarray]:
    return np.split(x, n, axis=axis)


@rule(ops.Allgather)
def _allgather(op: ops.Allgather, team: Team, x: Blocks, src: TensorType, dst: TensorType) -> Blocks:
    whole = np.concatenate([x[s] for s in team.senders], axis=op.axis)
    return {r: whole for r in team.receivers}


@rule(ops.Gather)
def _gather(op: ops.Gather, team: Team, x: Blocks, src: TensorType, dst: TensorType) -> Blocks:
    whole = np.concatenate([x[s] for s in team.senders], axis=op.axis)
    return {r: whole for r in team.receivers}


@rule(ops.Scatter)
def _scatter(op: ops.Scatter, team: Team, x: Blocks, src: TensorType, dst: TensorType) -> Blocks:
    parts = split(x[op.root], len(team.receivers), op.axis)
    return {r: parts[block_index(dst, r, op.axis)] for r in team.receivers}


@rule(ops.Broadcast)
def _broadcast(op: ops.Broadcast, team: Team, x: Blocks, src: TensorType, dst: TensorType) -> Blocks:
    return {r: x[op.root] for r in team.receivers}


@rule(ops.SendRecv)
def _send_recv(op: ops.SendRecv, team: Team, x: Blocks, src: TensorType, dst: TensorType) -> Blocks:
    return {team.receivers[0]: x[team.senders[0]]}


@rule(ops.AllToAll)
def _all_to_all(op: ops.AllToAll, team: Team, x: Blocks, src: TensorType, dst: TensorType) -> Blocks:
    n = len(team.devices)
    pieces = {s: split(x[s], n, op.split_axis) for s in team.senders}
    return {
        r: np.concatenate([pieces[s][team.index(r)] for s in team.senders], axis=op.concat_axis)
        for r in team.receivers
    }


@rule(ops.Allreduce)
def _allreduce(op: ops.Allreduce, team: Team, x: Blocks, src: TensorType, dst: TensorType) -> Blocks:
    total = fold(op.kind, [x[s] for s in team.senders])
    return {r: total for r in team.receivers}


@rule(ops.Reduce)
def _reduce(op: ops.Reduce, team: Team, x: Blocks, src: TensorType, dst: TensorType) -> Blocks:
    total = fold(op.kind, [x[s] for s in team.senders])
    return {r: total for r in team.receivers}


@rule(ops.ReduceScatter)
def _reduce_scatter(op: ops.ReduceScatter, team: Team, x: Blocks, src: TensorType,
                    dst: TensorType) -> Blocks:
    parts = split(fold(op.kind, [x[s] for s in team.senders]), len(team.devices), op.axis)
    return {r: parts[team.index(r)] for r in team.receivers}


def exchange(op: ops.Communication, team: Team, x: Blocks, src: TensorType, dst: TensorType) -> Blocks:
    return EXCHANGES[type(op)](op, team, x, src, dst)
