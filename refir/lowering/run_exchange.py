"""An all_to_all or a reduce_scatter whose blocks are runs (docs/spec.md §3.4,
§7): the team's mesh axis k cuts an axis with a split factor on either side, or
(all_to_all) changes the split factor of the one axis it cuts. The team shares
one list on each axis it acts on (the part the outer mesh axes leave); each
member's part of it is `blocks.held_runs`, and what one member sends another is
`blocks.shared_moves` of the two: along the pack axis (all_to_all's split axis,
reduce_scatter's axis) which of the sender's positions go, along all_to_all's
concat axis where they land. The MPI and NCCL-like transports pack and place by
these; interp.collectives states the same exchange as one join and one cut.
"""

from __future__ import annotations

from functools import lru_cache

from refir.ir import ops
from refir.ir.blocks import Move, entries_of, held_runs, shared_moves
from refir.ir.types import TensorType, local_shape
from refir.lowering.teams import Team

RunOp = ops.AllToAll | ops.ReduceScatter


def cut_by(t: TensorType, axis: int, k: str) -> int | None:
    """The split factor with which mesh axis k, innermost, cuts tensor axis
    `axis` of t (1: contiguous blocks); None where k does not cut it."""
    entries = entries_of(t.axes[axis])
    return entries[-1][1] if entries and entries[-1][0] == k else None


def pack_axis(op: RunOp) -> int:
    return op.split_axis if isinstance(op, ops.AllToAll) else op.axis


def of_runs(op: ops.Communication, src: TensorType, dst: TensorType) -> bool:
    """Whether the op's blocks are runs rather than §3.1's blocks."""
    match op:
        case ops.AllToAll(mesh_axis=k, split_axis=j, concat_axis=i):
            return i == j or (cut_by(src, i, k) or 1) > 1 or (cut_by(dst, j, k) or 1) > 1
        case ops.ReduceScatter(mesh_axis=k, axis=j):
            return (cut_by(dst, j, k) or 1) > 1
    return False


@lru_cache(maxsize=1024)  # asked per pair on every rank: worked out once per (op, types, team)
def _shared(op: RunOp, src: TensorType, dst: TensorType, team: Team) -> tuple[int, int]:
    """The lengths of the lists the team shares on the pack and (all_to_all) concat
    axes: the sum of the members' parts where k cuts the axis (dst's on the pack
    axis, src's on the concat axis)."""
    j = pack_axis(op)
    packed = sum(local_shape(dst, {}, d)[j] for d in team.devices)
    if not isinstance(op, ops.AllToAll):
        return packed, 0
    return packed, sum(local_shape(src, {}, d)[op.concat_axis] for d in team.devices)


def pack_moves(op: RunOp, src: TensorType, dst: TensorType, team: Team, s: int, r: int) -> tuple[Move, ...]:
    """Along the pack axis: which positions of sender s's buffer go to r, and where
    in r's buffer (all_to_all across axes: every position of r's buffer) they land."""
    j, n = pack_axis(op), len(team.devices)
    length = _shared(op, src, dst, team)[0]
    return shared_moves(held_runs(length, n, cut_by(src, j, op.mesh_axis), team.index(s)),
                        held_runs(length, n, cut_by(dst, j, op.mesh_axis), team.index(r)))


def place_moves(op: ops.AllToAll, src: TensorType, dst: TensorType, team: Team, s: int, r: int) -> tuple[Move, ...]:
    """Along all_to_all's concat axis: where each run of the piece s sends r (its
    positions in the piece: the moves' lengths one after another) lands in r's buffer."""
    i, n = op.concat_axis, len(team.devices)
    if i == op.split_axis:
        return pack_moves(op, src, dst, team, s, r)
    length = _shared(op, src, dst, team)[1]
    return shared_moves(held_runs(length, n, cut_by(src, i, op.mesh_axis), team.index(s)),
                        held_runs(length, n, cut_by(dst, i, op.mesh_axis), team.index(r)))


def piece_shape(op: RunOp, src: TensorType, dst: TensorType, team: Team, s: int, r: int) -> tuple[int, ...]:
    """The shape of what s sends r: s's block, cut to the moved runs on the pack axis."""
    j = pack_axis(op)
    shape = list(local_shape(src, {}, s))
    shape[j] = sum(m[2] for m in pack_moves(op, src, dst, team, s, r))
    return tuple(shape)
