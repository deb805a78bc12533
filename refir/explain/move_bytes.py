"""How many bytes each device sends and receives in one communication's team
(refir.explain.placement's CommFacts counts them here): linear in the team
where a sender's whole block (or the receiver's) moves, one vectorised pass over
the pairs where all_to_all's and reduce_scatter's pieces are intersections of
ranges, and the runs both blocks hold where a type is interleaved (§3.4).
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import TYPE_CHECKING

import numpy as np

from refir.ir import ops
from refir.ir.blocks import Runs, runs_length, runs_overlap
from refir.ir.types import TensorType
from refir.lowering.teams import Team

if TYPE_CHECKING:
    from refir.explain.placement import Block, Placement


def block_bytes(b: Block, t: TensorType) -> int:
    """A whole block's bytes (an interleaved block's runs, not their hull)."""
    return prod(b.local_shape) * t.np_dtype.itemsize


def pair_count(op: ops.Communication, team: Team) -> int:
    if isinstance(op, (ops.Scatter, ops.Broadcast)):
        return sum(r != op.root for r in team.receivers)
    both = len(set(team.senders) & set(team.receivers))
    return len(team.senders) * len(team.receivers) - both


def team_totals(op: ops.Communication, team: Team, src: Placement, dst: Placement,
                 totals: dict[int, list[int]]) -> None:
    """Add each member's bytes sent and received in `team` to `totals`, in time
    linear in the team where a sender's whole block (or the receiver's) moves, and
    by one vectorised pass over the pairs where pieces are intersections."""
    item = src.type.np_dtype.itemsize

    def add(d: int, sent: int, received: int) -> None:
        entry = totals.setdefault(d, [0, 0])
        entry[0] += sent
        entry[1] += received

    for d in team.devices:
        add(d, 0, 0)
    match op:
        case ops.Scatter(root=root):
            for r in team.receivers:
                if r != root:
                    n = block_bytes(dst.block(r), src.type)
                    add(root, n, 0)
                    add(r, 0, n)
        case ops.Broadcast(root=root):
            n = block_bytes(src.block(root), src.type)
            for r in team.receivers:
                if r != root:
                    add(root, n, 0)
                    add(r, 0, n)
        case ops.AllToAll() if of_runs(src, dst):  # §3.4: pieces are the runs both hold, not hulls
            # The team's blocks cut one region on both sides (the team's mesh axis is all that
            # differs), so a member sends its old block but what it keeps, and receives its new
            # one but what it kept: linear in the team (issue 30), as the moves one by one sum.
            for d in team.devices:
                own = piece_bytes(src.block(d), dst.block(d), src.type)
                add(d, block_bytes(src.block(d), src.type) - own, block_bytes(dst.block(d), dst.type) - own)
        case ops.ReduceScatter() if of_runs(src, dst):  # every sender's term of each other's runs
            parts = {r: block_bytes(dst.block(r), dst.type) for r in team.receivers}
            everything, senders = sum(parts.values()), set(team.senders)
            for s in team.senders:
                add(s, everything - parts.get(s, 0), 0)
            for r, n in parts.items():
                add(r, 0, n * (len(senders) - (r in senders)))
        case ops.AllToAll() | ops.ReduceScatter():
            rank = src.type.rank
            s_ranges = np.array([src.block(s).ranges for s in team.senders], dtype=np.int64).reshape(
                len(team.senders), rank, 2)
            r_ranges = np.array([dst.block(r).ranges for r in team.receivers], dtype=np.int64).reshape(
                len(team.receivers), rank, 2)
            if _separable_totals(team, s_ranges, r_ranges, item, add):
                return
            s_ids, r_ids = np.array(team.senders), np.array(team.receivers)
            chunk = max(1, (1 << 22) // max(1, len(team.receivers) * max(1, s_ranges.shape[1])))
            received = np.zeros(len(team.receivers), dtype=np.int64)
            for lo in range(0, len(team.senders), chunk):
                s = s_ranges[lo:lo + chunk, None]  # senders x 1 x axes x 2
                r = r_ranges[None]
                overlap = np.minimum(s[..., 1], r[..., 1]) - np.maximum(s[..., 0], r[..., 0])
                pieces = np.clip(overlap, 0, None).prod(axis=-1) * item
                pieces[s_ids[lo:lo + chunk, None] == r_ids[None, :]] = 0  # a device keeps its own piece
                for d, n in zip(team.senders[lo:lo + chunk], pieces.sum(axis=1).tolist()):
                    add(d, n, 0)
                received += pieces.sum(axis=0)
            for d, n in zip(team.receivers, received.tolist()):
                add(d, 0, n)
        case _:  # each sender's whole block (a partial term where the source is partial) to every other receiver
            blocks = {s: block_bytes(src.block(s), src.type) for s in team.senders}
            receivers = set(team.receivers)
            for s, n in blocks.items():
                add(s, n * (len(team.receivers) - (s in receivers)), 0)
            everything = sum(blocks.values())
            for r in team.receivers:
                add(r, 0, everything - blocks.get(r, 0))


def of_runs(src: Placement, dst: Placement) -> bool:
    return src.type.interleaved() or dst.type.interleaved()


def shared(s: Block, r: Block) -> list[Runs]:
    """Each axis's global runs both blocks hold (an interleaved axis's runs, §3.4)."""
    return [runs_overlap(a, b) for a, b in zip(s.axis_runs, r.axis_runs)]


def piece_bytes(s: Block, r: Block, t: TensorType) -> int:
    """The bytes both blocks hold (an interleaved axis's runs, not their hull)."""
    return prod(runs_length(x) for x in shared(s, r)) * t.np_dtype.itemsize


def _overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elements in common of ranges `a` and `b` (... x 2 arrays of start, stop)."""
    return np.clip(np.minimum(a[..., 1], b[..., 1]) - np.maximum(a[..., 0], b[..., 0]), 0, None)


def _separable_totals(team: Team, s_ranges: np.ndarray, r_ranges: np.ndarray, item: int,
                      add: Callable[[int, int, int], None]) -> bool:
    """The pieces of an all_to_all or reduce_scatter in time linear in the team,
    where no tensor axis has ranges that vary among both the senders and the
    receivers (as in a team along one mesh axis): then a piece is F[s] * G[r],
    F the overlap on the axes the senders vary on (and the fixed ones), G on the
    axes the receivers vary on, and a device's bytes are sums of F and G less its
    own piece. False (nothing added) where both vary on an axis."""
    s_var = (s_ranges != s_ranges[:1]).any(axis=(0, 2))
    r_var = (r_ranges != r_ranges[:1]).any(axis=(0, 2))
    if (s_var & r_var).any():
        return False
    f = _overlap(s_ranges[:, ~r_var], r_ranges[0, ~r_var]).prod(axis=-1)  # per sender
    g = _overlap(s_ranges[0, r_var], r_ranges[:, r_var]).prod(axis=-1)  # per receiver
    f_of, g_of = dict(zip(team.senders, f.tolist())), dict(zip(team.receivers, g.tolist()))
    g_all, f_all = int(g.sum()), int(f.sum())
    for d, fs in f_of.items():  # a device keeps its own piece
        add(d, item * fs * (g_all - g_of.get(d, 0)), 0)
    for d, gr in g_of.items():
        add(d, 0, item * gr * (f_all - f_of.get(d, 0)))
    return True


