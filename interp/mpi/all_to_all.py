"""all_to_all as one rank makes it under MPI, planned once per (op, type,
team, rank) (interp/mpi/plans.py's registry): of equal blocks, and of uneven
ones (pieces of other sizes, each at its place among the others in its
receiver's result).

Where a team's members share a node, each piece goes straight from its
sender's buffer into its receiver's result where the results lie in shared
memory (interp/mpi/shared_windows.py's result slots, past 256 KiB a piece), else
through the team's window; across nodes, or below the window's size, through
MPI's Alltoall (equal blocks, the pieces packed by one copy or sent from the
buffer's own memory) or Alltoallv. Every piece is a copy: the bits never change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod

import numpy as np
from mpi4py import MPI

from interp.mpi.host_copy import copy_into, piece_into
from interp.mpi.layout import (
    PiecesWriter,
    PieceWriter,
    block_shapes,
    displacements,
    front_first,
    one_by_one,
    rows_of_runs,
    run_writers,
    sender,
    stacking,
    uneven_sender,
)
from interp.mpi.plans import Run, plan
from interp.mpi.pools import handed_out, result, scratch
from interp.mpi.shared_windows import SharedResults, SharedSegments, shared_results, shared_segments
from interp.sentinel import fill_bytes
from interp.transport import HANDED_OUT
from refir.ir import ops
from refir.ir.types import TensorType, block_size
from refir.lowering.teams import Team
from refir.world.mpi_job import wait

# Up to this many ranks an all_to_all of runs through the window sends this rank's
# own piece straight into its result, piece by piece (1M, two ranks: 1.70 -> 1.41
# of MPI's Alltoall); with four, passing over the buffer once per piece lost to
# packing it whole (1.33 -> 1.87; benchmarks/RESULTS.md). Through result slots,
# up to this many write their own piece while the round that says where the
# others' go travels; more write every piece after it, in one pass over the
# buffer (four ranks on two cores: the round hides little there, and a second
# pass over the buffer costs).
OWN_PIECE_DIRECT_RANKS = 2


@plan(ops.AllToAll)
def _all_to_all_plan(op: ops.AllToAll, src: TensorType, team: Team, rank: int) -> Run:
    """Piece k to member k; the received pieces lie side by side, concatenation
    axis first, which is the result (no concatenating copy). On one node, each
    piece goes straight from its sender's buffer into its receiver's result
    where the results lie in shared memory (interp/mpi/shared_windows.py's result
    slots), else through the window."""
    n, blocks = len(team.devices), block_shapes(src, team.devices)
    shape = blocks[rank]
    extent = shape[op.split_axis]  # the split axis's block the team shares (whole, or the outer part of a nest)
    if len(set(blocks)) > 1 or extent % n or shape[op.split_axis] % n:
        return _uneven_all_to_all_plan(op, src, team, rank)
    axis, split_axis = op.concat_axis, op.split_axis
    piece = tuple(extent // n if a == split_axis else e for a, e in enumerate(shape))
    front, back = front_first(tuple(e * n if a == axis else e for a, e in enumerate(piece)), axis)
    pieces = sender(shape, n, split_axis, axis)
    write, write_all = _equal_writers(shape, n, split_axis, axis)
    runs = _runs(shape, n, split_axis, axis)

    def run(comm: MPI.Comm, x: np.ndarray) -> np.ndarray:
        count = x.nbytes // n
        shared = shared_segments(team.devices, x.nbytes)
        if shared is None:
            whole = result(front, x.dtype)
            wait(comm.Ialltoall([pieces(x), count, MPI.BYTE], [whole, count, MPI.BYTE]), "an all_to_all")
        elif (results := shared_results(team.devices, count, core_each=False)) is not None:
            def through_window(whole: np.ndarray, flat: np.ndarray) -> np.ndarray:
                turn = shared.next_half(x.dtype)
                half = shared.half(rank, turn, x.nbytes)
                write_all(x, [(k, half[k * count:(k + 1) * count]) for k in range(n) if k != rank])
                shared.written()
                _gathered_from(shared, turn, flat, count, rank * count)
                return whole

            places = [(rank * count, (rank + 1) * count)] * n
            whole = _exchanged_in_results(shared, results, x, write, front, places, through_window, write_all)
        elif runs is not None and n <= OWN_PIECE_DIRECT_RANKS and x.flags.c_contiguous:
            # Each piece is a run of every row: this rank's own piece goes straight from its buffer into its
            # result (a quarter of the bytes two ranks move through the segments), the others' packed into its
            # segment; piece `rank` of each other member's copied out.
            whole = result(front, x.dtype)
            turn, flat = shared.next_half(x.dtype), whole.reshape(-1).view(np.uint8)
            into = shared.half(rank, turn, x.nbytes)
            write_all(x, [(k, (flat if k == rank else into)[k * count:(k + 1) * count]) for k in range(n)])
            shared.written()
            _gathered_from(shared, turn, flat, count, rank * count)
        else:  # packed straight into this rank's segment; piece `rank` of each copied out, its own first
            whole = result(front, x.dtype)
            turn, flat = shared.next_half(x.dtype), whole.reshape(-1).view(np.uint8)
            pieces(x, shared.half(rank, turn, x.nbytes).view(x.dtype))
            np.copyto(flat[rank * count:(rank + 1) * count], shared.half(rank, turn, (rank + 1) * count)[rank * count:])
            shared.written()
            _gathered_from(shared, turn, flat, count, rank * count)
        return handed_out(whole, back)

    return run


def _uneven_all_to_all_plan(op: ops.AllToAll, src: TensorType, team: Team, rank: int) -> Run:
    """An all_to_all of uneven blocks (pieces of other sizes, each at its place
    among the others in its receiver's result), as the even plan's: on one
    node, through result slots where they serve, else through the window (64
    KiB a rank and more); else MPI's v-variant from this rank's pieces packed
    one after another. Which is the same answer on every member (the team, the
    cores, sizes from the types), and where some member's slots are all held,
    every member learns it in the round and takes the window."""
    n, blocks, itemsize = len(team.devices), block_shapes(src, team.devices), src.np_dtype.itemsize
    axis, split_axis = op.concat_axis, op.split_axis
    extent = blocks[rank][split_axis]  # the split axis's block the team shares

    def piece(s: int, m: int) -> tuple[int, ...]:  # the shape of sender s's piece for member m
        return tuple(block_size(extent, n, m) if a == split_axis else e for a, e in enumerate(blocks[s]))

    sizes = [[prod(piece(s, m)) * itemsize for s in range(n)] for m in range(n)]  # member m's, from each sender
    places = [(sum(sizes[m][:rank]), sum(sizes[m][:rank + 1])) for m in range(n)]
    mine = [piece(s, rank) for s in range(n)]
    front, back = front_first(tuple(sum(p[axis] for p in mine) if a == axis else e for a, e in enumerate(mine[0])),
                              axis)
    block_of = -(-max(sum(row) for row in sizes) // n)  # slots of a result of the largest member's size
    window = max(prod(b) for b in blocks) * itemsize  # the window's barrier ends the call, as the even plan's
    sent = [sizes[m][rank] for m in range(n)]
    sent_at, got_at = displacements(sent), displacements(sizes[rank])
    theirs_at = [sum(sizes[m][s] for m in range(rank)) for s in range(n)]  # this rank's piece in sender s's pieces
    write, pack = uneven_sender(blocks[rank], n, split_axis, axis, sent)
    write, write_all = run_writers(blocks[rank], n, split_axis, axis, write)

    def run(comm: MPI.Comm, x: np.ndarray) -> np.ndarray:
        shared = shared_segments(team.devices, window)
        if shared is not None:
            def through_window(whole: np.ndarray, flat: np.ndarray, own_in_place: bool = True) -> np.ndarray:
                """The others' pieces packed into this rank's window half, this rank's out of theirs (its own
                piece in place already, or packed with the others where there are more than two members and
                copied out of its half)."""
                turn = shared.next_half(x.dtype)
                half = shared.half(rank, turn, x.nbytes)
                if own_in_place:
                    write_all(x, [(k, half[sent_at[k]:sent_at[k] + sent[k]]) for k in range(n) if k != rank])
                else:
                    pack(x, half)
                    own = sent[rank]
                    np.copyto(flat[got_at[rank]:got_at[rank] + own], half[sent_at[rank]:sent_at[rank] + own])
                shared.written()
                for step in range(1, n):  # each rank starts with the member after it, as _gathered_from
                    s = (rank + step) % n
                    at, size = theirs_at[s], sizes[rank][s]
                    np.copyto(flat[got_at[s]:got_at[s] + size], shared.half(s, turn, at + size)[at:])
                return whole

            results = shared_results(team.devices, block_of, core_each=False)
            if results is not None:
                whole = _exchanged_in_results(shared, results, x, write, front, places, through_window, write_all)
            else:
                whole = result(front, x.dtype)
                flat = whole.reshape(-1).view(np.uint8)
                direct = n <= OWN_PIECE_DIRECT_RANKS
                if direct:
                    write(x, rank, flat[got_at[rank]:got_at[rank] + sent[rank]])
                through_window(whole, flat, direct)
            return handed_out(whole, back)
        whole = result(front, x.dtype)
        send = scratch("send", (x.nbytes,), np.uint8)
        pack(x, send)
        wait(comm.Ialltoallv([send, sent, sent_at, MPI.BYTE],
                             [whole.reshape(-1).view(np.uint8), sizes[rank], got_at, MPI.BYTE]), "an all_to_all")
        return handed_out(whole, back)

    return run


def _exchanged_in_results(shared: SharedSegments, results: SharedResults, x: np.ndarray, write: PieceWriter,
                          front: tuple[int, ...], places: Sequence[tuple[int, int]],
                          held: Callable[[np.ndarray, np.ndarray], np.ndarray | None],
                          write_all: PiecesWriter) -> np.ndarray | None:
    """An all_to_all whose pieces go straight into their receivers' results (of
    shape `front`, concatenation axis first; this rank's piece for member k
    at bytes places[k] of k's): this rank takes a free result slot and says
    which in a round; then it writes each member's piece into that member's
    slot (`write_all`, in one pass over the buffer where it can), and one
    barrier ends the call (nobody touches a result after it; a slot is offered
    again only once its holders dropped it). Up to OWN_PIECE_DIRECT_RANKS
    members, this rank writes its own piece (`write`) while the round travels,
    the others' after it. Where some member's slots are all held, every member
    learns it from the round and returns `held(whole, bytes of whole)` instead
    (its result the slot it took, its own piece in place), which moves the
    others' pieces another way."""
    rank, dtype = shared.comm.rank, x.dtype
    slot = results.free_slot()
    if slot is not None:  # the sentinel before the round: the others write into the slot once it is over
        fill_bytes(results.roots[slot][:prod(front) * dtype.itemsize], dtype)
    offered = results.offer(slot)
    if slot is None:
        whole = result(front, dtype)
    else:
        whole = results.array(slot, front, dtype, prod(front) * dtype.itemsize)
        HANDED_OUT[id(whole)] = whole  # spmd keeps it as a buffer of its own: nothing else refers to the slot
    flat, n = whole.reshape(-1).view(np.uint8), shared.comm.size
    own = (rank, flat[slice(*places[rank])])
    own_first = n <= OWN_PIECE_DIRECT_RANKS
    if own_first:
        write(x, *own)
    where = results.offered(offered, "every member's result slot")
    if where.min() < 0:
        if not own_first:
            write(x, *own)
        return held(whole, flat)
    # each rank starts (each row, in one pass) with the member after it: the ranks write different slots at once
    others = [(m, results.peer(m, int(where[m]))[slice(*places[m])]) for m in ((rank + s) % n for s in range(1, n))]
    write_all(x, others if own_first else [own, *others])
    shared.written()
    return whole


def _gathered_from(shared: SharedSegments, turn: int, out: np.ndarray, count: int, offset: int) -> None:
    """Bytes [offset, offset + count) of every other member's half `turn`, into
    `out` at that member's place (after `shared.written()`; this rank's own part
    is in place before it: copied while the others may still be writing, and
    one copy fewer out of shared memory). Each rank starts with the member after
    it, so that the ranks read different segments at once. Two ranks, 4 MiB
    each (benchmarks/RESULTS.md): allgather 1.14 -> 1.07 ms, all_to_all 0.78 ->
    0.55 ms against every part copied out in rank order after the barrier."""
    me, size = shared.comm.rank, shared.comm.size
    for step in range(1, size):
        member = (me + step) % size
        np.copyto(out[member * count:(member + 1) * count], shared.half(member, turn, offset + count)[offset:])


def _equal_writers(shape: tuple[int, ...], n: int, split_axis: int, axis: int) -> tuple[PieceWriter, PiecesWriter]:
    """What writes one of n equal pieces of a buffer of `shape` (_piece_writer),
    and several: up to OWN_PIECE_DIRECT_RANKS one by one (runs of 128 bytes
    and more move about a sixth faster through piece_into's 8-byte words, in
    cache), past it in one pass (run_writers: the buffer read once)."""
    write = _piece_writer(shape, n, split_axis, axis)
    if n > OWN_PIECE_DIRECT_RANKS:
        return write, run_writers(shape, n, split_axis, axis, write)[1]
    return write, one_by_one(write)


def _piece_writer(shape: tuple[int, ...], n: int, split_axis: int, axis: int) -> PieceWriter:
    """What writes piece k of a buffer of `shape` (cut in n along `split_axis`),
    in C order with `axis` first, into the bytes it is given: straight from the
    buffer, through a view of it (no packing copy): by runs where the buffer is
    dense and each piece is a run of every row, else by one copy of the
    piece's view (tiled where it transposes, interp/mpi/host_copy.py)."""
    runs = _runs(shape, n, split_axis, axis)
    cut, order, stacked = stacking(shape, n, split_axis, axis)

    def write(x: np.ndarray, k: int, into: np.ndarray) -> None:
        if runs is not None and x.flags.c_contiguous:
            piece_into(into.view(x.dtype).reshape(runs), x.reshape(runs[0], n, runs[1]), k)
        else:
            copy_into(into.view(x.dtype).reshape(stacked[1:]), x.reshape(cut).transpose(order)[k])

    return write


def _runs(shape: tuple[int, ...], n: int, split_axis: int, axis: int) -> tuple[int, int] | None:
    """(rows, run) where a C-contiguous buffer of `shape`, seen as (rows, n, run),
    holds piece k of its split as [:, k] and the piece's C order with `axis`
    first is that view's own order (the axes before `axis` have one element);
    else None."""
    longest = shape[split_axis] // n
    if not rows_of_runs(shape, split_axis, axis, longest):
        return None
    return prod(shape[:split_axis]), longest * prod(shape[split_axis + 1:])
