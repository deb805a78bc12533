"""An all_to_all or reduce_scatter whose blocks are runs (docs/spec.md §3.4,
§7) on one rank per process: each piece packed by its runs
(refir.lowering.run_exchange's moves) into a dense device buffer by copy
kernels, sent point to point over the wire (NCCL, or MPI under the simulator),
then each received piece copied to its runs in the result (all_to_all) or the
pieces folded in team order (reduce_scatter). Sizes come from the types, the
same on every rank, so both sides skip the empty pieces alike.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.kernels.elementwise import copy_into
from gpu_backend.transports.device_arrays import DeviceArrays, received
from refir.ir import ops
from refir.ir.types import TensorType, local_shape
from refir.lowering.run_exchange import RunOp, pack_axis, pack_moves, piece_shape, place_moves
from refir.lowering.teams import Team

if TYPE_CHECKING:
    from gpu_backend.transports.rank_transport import RankTransport


def exchanged(t: RankTransport, op: RunOp, team: Team, x: DeviceBuffer, src: TensorType,
              dst: TensorType) -> DeviceBuffer:
    """This rank's result of `op` in `team` (it both sends and receives)."""
    me, axis, dtype = t.rank, pack_axis(op), src.np_dtype
    row = tuple(range(len(x.shape)))
    pieces: dict[int, DeviceBuffer] = {}
    sends = []
    for r in team.devices:
        shape = piece_shape(op, src, dst, team, me, r)
        piece = received(shape, dtype, row)
        if prod(shape):
            pos = 0
            for start, _, length in pack_moves(op, src, dst, team, me, r):
                copy_into(piece.take(axis, pos, pos + length), x.take(axis, start, start + length))
                pos += length
        if r == me:
            pieces[me] = piece
        elif prod(shape):
            sends.append((r, piece))
    recvs = []
    for s in team.devices:
        if s != me:
            shape = piece_shape(op, src, dst, team, s, me)
            pieces[s] = received(shape, dtype, row)
            if prod(shape):
                recvs.append((s, pieces[s]))
    t.wire.p2p(sends, recvs)
    parts = [pieces[s] for s in team.devices]
    if isinstance(op, ops.ReduceScatter):
        return DeviceArrays(dst.order).fold(op.kind, parts)
    out = received(local_shape(dst, {}, me), dtype, dst.order)
    cat = op.concat_axis
    for s, part in zip(team.devices, parts):
        if not part.size:
            continue
        pos = 0
        for _, start, length in place_moves(op, src, dst, team, s, me):  # the piece's runs, each to its place
            copy_into(out.take(cat, start, start + length), part.take(cat, pos, pos + length))
            pos += length
    return out
