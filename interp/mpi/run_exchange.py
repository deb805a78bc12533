"""An all_to_all or reduce_scatter whose blocks are runs (docs/spec.md §3.4,
§7) as one rank makes it under MPI: planned once from the types
(refir.lowering.run_exchange's moves, the same on every rank), each piece
packed by its runs into one send buffer, one Ialltoallv of bytes, then each
received piece put at its runs (all_to_all) or the pieces folded in team order
(reduce_scatter). A buffer of any strides packs alike: pieces are copies of
logical runs, never raw memory.
"""

from __future__ import annotations

from math import prod

import numpy as np
from mpi4py import MPI

from interp import sentinel
from interp.impls import fold
from interp.mpi.layout import displacements
from interp.mpi.plans import Run
from refir.ir import ops
from refir.ir.types import TensorType, local_shape
from refir.lowering.run_exchange import RunOp, pack_axis, pack_moves, piece_shape, place_moves
from refir.lowering.teams import Team
from refir.world.mpi_job import wait


def runs_plan(op: RunOp, src: TensorType, dst: TensorType, team: Team, rank: int) -> Run:
    """World rank `rank`'s call, a member of `team` that sends and receives."""
    item, dtype, axis = src.np_dtype.itemsize, src.np_dtype, pack_axis(op)
    sends = [(pack_moves(op, src, dst, team, rank, r), piece_shape(op, src, dst, team, rank, r))
             for r in team.devices]
    gets = [piece_shape(op, src, dst, team, s, rank) for s in team.devices]
    places = [place_moves(op, src, dst, team, s, rank) for s in team.devices] if isinstance(op, ops.AllToAll) else []
    send_counts = [prod(shape) * item for _, shape in sends]
    recv_counts = [prod(shape) * item for shape in gets]
    send_at, recv_at = displacements(send_counts), displacements(recv_counts)
    shape = local_shape(dst, {}, rank)
    lead = (slice(None),) * axis

    def run(comm: MPI.Comm, x: np.ndarray) -> np.ndarray:
        send = np.empty(sum(send_counts), np.uint8)
        for (moves, piece), at, count in zip(sends, send_at, send_counts):
            room, pos = send[at:at + count].view(dtype).reshape(piece), 0
            for start, _, length in moves:
                room[(*lead, slice(pos, pos + length))] = x[(*lead, slice(start, start + length))]
                pos += length
        recv = sentinel.empty_bytes(sum(recv_counts), dtype)
        wait(comm.Ialltoallv([send, (send_counts, send_at), MPI.BYTE], [recv, (recv_counts, recv_at), MPI.BYTE]),
             f"an {ops.op_name(op)} of runs")
        pieces = [recv[at:at + count].view(dtype).reshape(piece)
                  for at, count, piece in zip(recv_at, recv_counts, gets)]
        out = sentinel.empty(shape, dtype)
        if isinstance(op, ops.ReduceScatter):
            return fold(op.kind, pieces, out)
        cat = (slice(None),) * op.concat_axis
        for piece, moves in zip(pieces, places):
            pos = 0
            for _, start, length in moves:  # the piece's runs one after another, each to its place
                out[(*cat, slice(start, start + length))] = piece[(*cat, slice(pos, pos + length))]
                pos += length
        return out

    return run
