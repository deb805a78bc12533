"""allgather, allreduce, reduce_scatter and all_to_all, of equal or uneven
blocks (the sharding rule's: the last ones shorter or empty), as one rank
makes them under MPI, planned once per (op, type, team, rank).

What a call needs beyond its buffer (shapes, byte counts, where this rank's
piece goes, whether the pieces already lie in order and the view that packs
them) follows from the op, the type and the team: a plan works it out once, and
a call is then a few numpy and MPI calls. At 1K elements the Python around the
MPI call was most of a call's time, and four ranks sharing two cores pay for
it about twice over (benchmarks/RESULTS.md, "third pass"). Results are arrays
of their own (`result`: kept ones nobody holds any more, past 64 KiB; an
allgather's or all_to_all's may be a result slot in shared memory,
interp/mpi/shared_windows.py), in C order where the result's axes keep their order, so
that spmd's NumpyTransport need not copy them again. all_to_all's plans are
in interp/mpi/all_to_all.py (registered here when interp/mpi/transport.py
imports it).
Reductions fold in team order (interp.impls.fold, the in-process transport's
fold), never MPI's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from math import prod

import numpy as np
from mpi4py import MPI

from interp.impls import fold
from interp.mpi.host_copy import copy_into, pieces_into
from interp.mpi.row_runs import runs_into, runs_scattered
from interp.mpi.shared_windows import (
    SHARED_MIN_BYTES,
    SharedResults,
    SharedSegments,
    first_unheld,
    shared_results,
    shared_segments,
)
from interp.sentinel import fill
from interp.transport import HANDED_OUT
from refir.ir import ops
from refir.ir.program_cache import by_identity
from refir.ir.tables import registrar
from refir.ir.types import TensorType, axis_first, block, block_size, local_shape
from refir.lowering.teams import Team
from refir.world.mpi_job import barrier, wait


def moved_first(x: np.ndarray, axis: int) -> np.ndarray:
    """x with `axis` moved to the front, as np.moveaxis (a view; a few µs
    cheaper, which counts on every call of a small collective)."""
    if axis == 0 or x.ndim < 2:  # nothing to move (a 0-d buffer has no axis)
        return x
    return x.transpose(axis_first(x.ndim, axis))


def displacements(counts: Sequence[int]) -> list[int]:
    return [sum(counts[:i]) for i in range(len(counts))]


@by_identity  # asked at every call of a collective: types are frozen, and hashing one walks it all
def block_shapes(t: TensorType, devices: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Each device's block shape under a resolved (symbol-free) type."""
    return tuple(local_shape(t, {}, d) for d in devices)


# Buffers a call uses only while it runs (packed pieces to send, partials
# received to fold) are kept between calls, one per role, from this size up to
# the largest: a fresh 4 MiB send buffer each call made a 1M all_to_all's MPI
# part about 15% slower (four ranks on two cores; pages faulted anew or cold
# in the TLB), where results, which callers keep, must be fresh arrays.
SCRATCH_MIN_BYTES, SCRATCH_MAX_BYTES = 1 << 16, 1 << 26
_SCRATCH: dict[str, np.ndarray] = {}


def scratch(role: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialized C-contiguous array for `role` within one call: the
    buffer kept for the role where the size is in range (the next call with that
    role overwrites it: a call's MPI requests are complete when it returns, and
    one rank makes one call at a time), else a fresh one."""
    nbytes = prod(shape) * np.dtype(dtype).itemsize
    if not SCRATCH_MIN_BYTES <= nbytes <= SCRATCH_MAX_BYTES:
        out = np.empty(shape, dtype)
    else:
        kept = _SCRATCH.get(role)
        if kept is None or kept.nbytes < nbytes:
            kept = _SCRATCH[role] = np.empty(nbytes, np.uint8)
        out = kept[:nbytes].view(dtype).reshape(shape)
    return fill(out) if role == "received" else out  # what MPI writes: the sentinel first (interp/sentinel.py)


# Results go to the caller, who keeps them: each must be an array no later call
# writes into while anyone holds it. A fresh large array each call cost a 1M
# allgather about a fifth of its time (16 MiB faulted and zeroed by the kernel).
# So results from RESULT_MIN_BYTES up are kept here too, and one is handed out
# again only once nothing but this pool refers to it: no variable, container,
# view (a view refers to its base) or exported buffer (memoryview, mpi4py) of
# it is left, so no holder can see it change. Two per shape and dtype, at
# most RESULTS_MAX_BYTES in all (past that the pool forgets what it kept).
RESULT_MIN_BYTES, RESULTS_MAX_BYTES = 1 << 16, 1 << 28
_RESULTS: dict[tuple[tuple[int, ...], np.dtype], list[np.ndarray]] = {}


def result(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialized C-contiguous array that owns its memory, for a result:
    a kept one nobody holds any more where the size is in range, else a new one
    (either filled with the sentinel where it is armed, interp/sentinel.py)."""
    nbytes = prod(shape) * np.dtype(dtype).itemsize
    if nbytes < RESULT_MIN_BYTES:
        return fill(np.empty(shape, dtype))
    kept = _RESULTS.setdefault((shape, np.dtype(dtype)), [])
    if (unheld := first_unheld(kept)) is not None:
        return fill(kept[unheld])
    out = np.empty(shape, dtype)
    if len(kept) < 2:
        if sum(a.nbytes for k in _RESULTS.values() for a in k) + nbytes > RESULTS_MAX_BYTES:
            _RESULTS.clear()
            kept = _RESULTS[(shape, np.dtype(dtype))] = []
        kept.append(out)
    return fill(out)


Run = Callable[[MPI.Comm, np.ndarray], np.ndarray]  # (the team's communicator, this rank's buffer) -> result
PLANS: dict[type, Callable[..., Run | None]] = {}
plan = registrar(PLANS)


@by_identity  # types, ops and teams are frozen and asked again and again: a plan per collective, not per call
def planned(op: ops.Communication, src: TensorType, team: Team, rank: int) -> Run | None:
    """This world rank's call of `op` in `team`, or None where it is not planned."""
    make = PLANS.get(type(op))
    return None if make is None or rank not in team.devices else make(op, src, team, team.index(rank))


@plan(ops.Allgather)
def _allgather_plan(op: ops.Allgather, src: TensorType, team: Team, rank: int) -> Run:
    """Every member's block at its place in every member's result, concatenation
    axis first; blocks equal or uneven (the last ones shorter or empty), at
    places worked out once from the types."""
    shapes = block_shapes(src, team.devices)
    axis, itemsize = op.axis, src.np_dtype.itemsize
    lengths = [s[axis] for s in shapes]
    front, back = _front_first((*shapes[0][:axis], sum(lengths), *shapes[0][axis + 1:]), axis)
    mine = slice(sum(lengths[:rank]), sum(lengths[:rank + 1]))
    counts = [prod(s) * itemsize for s in shapes]
    at = displacements(counts)
    places = [(lo, lo + c) for lo, c in zip(at, counts)]
    even, largest = len(set(counts)) == 1, max(counts)  # the same answers on every member: from the types

    def run(comm: MPI.Comm, x: np.ndarray) -> np.ndarray:
        count = x.nbytes
        sent = moved_first(x, axis)
        shared = shared_segments(team.devices, largest)
        if shared is not None and (results := shared_results(team.devices, largest)) is not None:
            whole = _gathered_in_results(shared, results, sent, front, mine, places)
            return _handed_out(whole, back)
        whole = result(front, x.dtype)
        if shared is not None:
            # laid out straight into this rank's segment and its own place in the result (transposed into both
            # from one read where it is strided), the others' copied out after the barrier
            turn, flat = shared.next_half(x.dtype), whole.reshape(-1).view(np.uint8)
            copy_into(shared.half(rank, turn, count).view(x.dtype).reshape(sent.shape), sent, whole[mine])
            shared.written()
            _gathered_blocks(shared, turn, flat, places)
        elif even and sent.flags.c_contiguous:  # already in order: sent from its own memory
            wait(comm.Iallgather([sent, count, MPI.BYTE], [whole, count, MPI.BYTE]), "an allgather")
        else:  # laid out by one copy in its own place (as MPI would copy it there), the others' come in place
            copy_into(whole[mine], sent)
            if even:
                wait(comm.Iallgather(MPI.IN_PLACE, [whole, count, MPI.BYTE]), "an allgather")
            else:
                wait(comm.Iallgatherv(MPI.IN_PLACE, [whole, counts, at, MPI.BYTE]), "an allgather")
        return _handed_out(whole, back)

    return run


# Above this many bytes an allreduce moves slices rather than whole partials.
SLICED_ALLREDUCE_BYTES = 1 << 16


@plan(ops.Allreduce)
def _allreduce_plan(op: ops.Allreduce, src: TensorType, team: Team, rank: int) -> Run:
    """Small: every partial to every member, each folds the whole. Large: member
    k gathers slice k of every partial, folds it, and the folded slices are
    gathered (as a ring allreduce moves its bytes, and a fold of 1/n each).
    The fold is elementwise and in team order either way: the same bits."""
    n, kind = len(team.devices), op.kind

    def run(comm: MPI.Comm, x: np.ndarray) -> np.ndarray:
        sent = x if x.flags.c_contiguous else np.ascontiguousarray(x)
        if x.nbytes >= SLICED_ALLREDUCE_BYTES and n > 1:
            return _sliced_allreduce(comm, sent, kind)
        every = fill(np.empty((n, x.size), x.dtype))
        wait(comm.Iallgather([sent, x.nbytes, MPI.BYTE], [every, x.nbytes, MPI.BYTE]), "an allreduce")
        out = result(x.shape, x.dtype)
        fold(kind, every, out.reshape(-1))
        return out

    return run


def _sliced_allreduce(comm: MPI.Comm, x: np.ndarray, kind: str) -> np.ndarray:
    """The large allreduce of a C-contiguous partial (see _allreduce_plan), by
    MPI's plain all-to-all and allgather of equal slices, which move them
    faster here than the v-variants (1M: Allgatherv 2.2-2.8x Allgather's
    time, benchmarks/HISTORY.md, `uneven`): where the size is not a multiple
    of the team's, the last few elements (fewer than the members) go to
    every member, which folds them itself, in the same team order."""
    flat, n, itemsize = x.reshape(-1), comm.size, x.itemsize
    q, r = divmod(flat.size, n)
    count, body = q * itemsize, n * q
    whole = result(x.shape, x.dtype)
    out = whole.reshape(-1)
    if r:  # started first, travelling while the slices do
        tails = fill(np.empty((n, r), x.dtype))
        tail = comm.Iallgather([flat[body:], r * itemsize, MPI.BYTE], [tails, r * itemsize, MPI.BYTE])
    mine = scratch("received", (n, q), x.dtype)  # slice `rank` of every partial
    wait(comm.Ialltoall([flat[:body], count, MPI.BYTE], [mine, count, MPI.BYTE]), "an allreduce")
    folded = fold(kind, mine, scratch("folded", (q,), x.dtype))
    gathered = comm.Iallgather([folded, count, MPI.BYTE], [out[:body], count, MPI.BYTE])
    if r:
        wait(tail, "an allreduce")
        fold(kind, tails, out[body:])
    wait(gathered, "an allreduce")
    return whole


# Where every member has a core, a reduce_scatter takes the window from smaller
# partials than the other collectives (shared_windows.SHARED_MIN_BYTES): it copies
# nothing out, where MPI's all-to-all is followed by a fold over its received
# copy (two ranks: 4096 even elements 1.96 -> 1.30 of MPI's
# Reduce_scatter_block, 16383 uneven ones 1.75 -> 0.92). Four ranks on two
# cores lost there (1.17 -> 1.67 at 4096: the barrier waits for ranks off
# their core; benchmarks/RESULTS.md).
REDUCE_SCATTER_WINDOW_MIN_BYTES = 1 << 14


@plan(ops.ReduceScatter)
def _reduce_scatter_plan(op: ops.ReduceScatter, src: TensorType, team: Team, rank: int) -> Run:
    """Piece k of every partial to member k, which folds them in team order.
    Pieces equal or uneven (the last shorter or empty), at places worked out
    once: on one node (64 KiB a partial and more; 16 KiB where every member
    has a core) through the team's window,
    folded straight out of the others' halves (two ranks, 1M: 0.5 of MPI's
    Reduce_scatter_block, against 0.9 through MPI's Alltoall); else equal
    pieces through MPI's Alltoall, uneven ones through its Alltoallv, from the
    partial's own memory where they lie in order there, else packed."""
    n, shape, kind = len(team.devices), block_shapes(src, team.devices)[rank], op.kind
    extent, itemsize = shape[op.axis], src.np_dtype.itemsize
    mine = tuple(block_size(extent, n, rank) if a == op.axis else e for a, e in enumerate(shape))
    even = extent % n == 0
    pieces = _sender(shape, n, op.axis, 0) if even else None
    row = prod(e for a, e in enumerate(shape) if a != op.axis) * itemsize
    sent = [block_size(extent, n, k) * row for k in range(n)]
    sent_at, got = displacements(sent), [prod(mine) * itemsize] * n
    got_at, nbytes = displacements(got), prod(shape) * itemsize
    in_order = all(e <= 1 for e in shape[:op.axis])  # a dense partial holds its pieces one after another
    write, pack = _uneven_sender(shape, n, op.axis, 0, sent)
    # pieces cut along an inner axis are runs of every row: written in one pass (interp/mpi/row_runs.py)
    write_others = _run_writers(shape, n, op.axis, 0, write)[1] if prod(shape[:op.axis]) > 1 else _one_by_one(write)
    own = tuple(slice(*block(extent, n, rank)) if a == op.axis else slice(None) for a in range(len(shape)))
    theirs = slice(sent_at[rank], sent_at[rank] + got[rank])  # this rank's piece among each member's
    window = max(nbytes, SHARED_MIN_BYTES) if nbytes >= REDUCE_SCATTER_WINDOW_MIN_BYTES else 0
    # one answer on every member: only where the window exists, so on one node
    takes_window = nbytes >= SHARED_MIN_BYTES or n <= (os.cpu_count() or 1)

    def run(comm: MPI.Comm, x: np.ndarray) -> np.ndarray:
        shared = shared_segments(team.devices, window) if window else None
        if shared is not None and takes_window:
            # The others' pieces written into this rank's window half at their places; after the barrier this
            # rank folds its piece straight out of the others' halves and its own buffer (no copy out)
            turn = shared.next_half(x.dtype)
            half = shared.half(rank, turn, nbytes)
            write_others(x, [(k, half[sent_at[k]:sent_at[k] + sent[k]]) for k in range(n) if k != rank])
            shared.written()
            parts = [x[own] if m == rank else shared.half(m, turn, nbytes)[theirs].view(x.dtype).reshape(mine)
                     for m in range(n)]
            return fold(kind, parts, result(mine, x.dtype))
        received = scratch("received", (n, *mine), x.dtype)
        if even:
            count = x.nbytes // n
            wait(comm.Ialltoall([pieces(x), count, MPI.BYTE], [received, count, MPI.BYTE]), "a reduce_scatter")
            return fold(kind, received, result(mine, x.dtype))
        if in_order and x.flags.c_contiguous:
            send = x.reshape(-1).view(np.uint8)
        else:
            send = scratch("send", (x.nbytes,), np.uint8)
            pack(x, send)
        wait(comm.Ialltoallv([send, sent, sent_at, MPI.BYTE], [received, got, got_at, MPI.BYTE]),
             "a reduce_scatter")
        return fold(kind, received, result(mine, x.dtype))

    return run


def _handed_out(whole: np.ndarray, back: tuple[int, ...] | None) -> np.ndarray:
    """The result of a plan whose front-first array is `whole`, its axes moved
    back; where `whole` lies in a result slot, spmd is to keep the very array
    returned as a buffer of its own."""
    if back is None:
        return whole
    out = whole.transpose(back)
    if HANDED_OUT.get(id(whole)) is whole:
        HANDED_OUT[id(out)] = out
    return out


def _gathered_in_results(shared: SharedSegments, results: SharedResults, sent: np.ndarray, front: tuple[int, ...],
                         mine: slice, places: Sequence[tuple[int, int]]) -> np.ndarray:
    """An allgather whose blocks are read out of their owners' results: this
    rank lays its block out in its own place (`mine` along the front axis;
    member m's block at bytes places[m]) in a result slot (transposed there
    where it is strided), and every member copies the others' blocks from
    theirs. Where all of this rank's slots are held, its result is a kept array
    of its own and its block goes into its window half as well (where each
    block is, every member learns in the round after the writes). A second
    barrier keeps every member's result unchanged until all have read it."""
    rank, size = shared.comm.rank, shared.comm.size
    count, turn = sent.nbytes, shared.next_half(sent.dtype)
    slot = results.free_slot()
    if slot is None:
        whole = result(front, sent.dtype)
        copy_into(shared.half(rank, turn, count).view(sent.dtype).reshape(sent.shape), sent, whole[mine])
    else:
        whole = results.array(slot, front, sent.dtype, places[-1][1])
        HANDED_OUT[id(whole)] = whole  # spmd keeps it as a buffer of its own: nothing else refers to the slot
        copy_into(fill(whole)[mine], sent)
    where = results.written(slot, shared)
    flat = whole.reshape(-1).view(np.uint8)
    for step in range(1, size):
        member = (rank + step) % size
        lo, hi = places[member]
        theirs = shared.half(member, turn, hi - lo) if where[member] < 0 else \
            results.peer(member, int(where[member]))[lo:hi]
        np.copyto(flat[lo:hi], theirs)
    if where.max() >= 0:
        barrier(shared.comm)
    return whole


def _gathered_blocks(shared: SharedSegments, turn: int, out: np.ndarray, places: Sequence[tuple[int, int]]) -> None:
    """Every other member's block, the first bytes of its half `turn`, into
    `out` at bytes places[member] (after `shared.written()`), each rank
    starting with the member after it, as _gathered_from."""
    me, size = shared.comm.rank, shared.comm.size
    for step in range(1, size):
        member = (me + step) % size
        lo, hi = places[member]
        np.copyto(out[lo:hi], shared.half(member, turn, hi - lo))


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


def _front_first(shape: tuple[int, ...], axis: int) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """The shape with `axis` moved to the front, and the transpose that moves it
    back (None where nothing moves)."""
    if axis == 0:
        return shape, None
    return (shape[axis], *shape[:axis], *shape[axis + 1:]), (*range(1, axis + 1), 0, *range(axis + 1, len(shape)))


def _stacking(shape: tuple[int, ...], n: int, split_axis: int,
              axis: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """How a buffer of `shape` shows its n equal pieces along `split_axis` as one
    view, the piece index first and then each piece's axes with `axis` first:
    the shape it is cut to (one axis split: a view of any buffer), the
    transpose of that, and the view's shape."""
    cut = (*shape[:split_axis], n, shape[split_axis] // n, *shape[split_axis + 1:])
    piece_axes = [a + (a >= split_axis) for a in range(len(shape))]  # where the buffer's axes are in `cut`
    order = (split_axis, *(piece_axes[a] for a in axis_first(len(shape), axis)))
    return cut, order, tuple(cut[a] for a in order)


def _rows_of_runs(shape: tuple[int, ...], split_axis: int, axis: int, longest: int) -> bool:
    """Whether each piece of a buffer of `shape` cut along `split_axis` (at most
    `longest` long there), in C order with `axis` first, is a run of every row
    of the dense buffer: the axes before `axis` have one element in a piece."""
    return all((longest if a == split_axis else shape[a]) <= 1 for a in range(axis))


def _one_by_one(write: PieceWriter) -> PiecesWriter:
    """Several pieces written by `write`, one after another."""
    def write_all(x: np.ndarray, pieces: Sequence[tuple[int, np.ndarray]]) -> None:
        for k, into in pieces:
            write(x, k, into)

    return write_all


def _sender(shape: tuple[int, ...], n: int, split_axis: int, axis: int) -> Callable[[np.ndarray], np.ndarray]:
    """What sends the n equal pieces of a buffer of `shape` along `split_axis`,
    each in C order with `axis` first, one after another: the buffer's own
    memory where it is dense and they lie there so (decided from the shape,
    once), else one copy through a stacked view (_stacking), its shapes worked
    out here."""
    longest = shape[split_axis] // n
    axis_first_moves_nothing = _rows_of_runs(shape, split_axis, axis, longest)
    in_order = all(shape[a] <= 1 for a in range(split_axis)) and axis_first_moves_nothing
    cut, order, stacked = _stacking(shape, n, split_axis, axis)
    # A dense buffer whose pieces go in their own C order: (outer, n, run) -> (n, outer, run).
    outer, run = prod(shape[:split_axis]), longest * prod(shape[split_axis + 1:])

    def pieces(x: np.ndarray, into: np.ndarray | None = None) -> np.ndarray:
        """The packed pieces: in `into` (a C-contiguous array of x's size and
        dtype) where given, else wherever is cheapest."""
        if in_order and x.flags.c_contiguous:
            if into is None:
                return x
            np.copyto(into.reshape(x.shape), x)
            return into
        if axis_first_moves_nothing and x.flags.c_contiguous:
            send = scratch("send", (n, outer, run), x.dtype) if into is None else into.reshape(n, outer, run)
            pieces_into(send, x.reshape(outer, n, run))
            return send
        send = scratch("send", stacked, x.dtype) if into is None else into.reshape(stacked)
        copy_into(send, x.reshape(cut).transpose(order))
        return send

    return pieces


PieceWriter = Callable[[np.ndarray, int, np.ndarray], None]  # (buffer, piece k, the bytes it goes to)
PiecesWriter = Callable[[np.ndarray, Sequence[tuple[int, np.ndarray]]], None]  # (buffer, (piece k, its bytes)...)


def _uneven_sender(shape: tuple[int, ...], n: int, split_axis: int, axis: int,
                   sent: Sequence[int]) -> tuple[PieceWriter, Callable[[np.ndarray, np.ndarray], None]]:
    """What writes piece k of a buffer of `shape` cut in n along `split_axis` by
    the sharding rule (the last pieces shorter or empty; `sent`: their bytes),
    in C order with `axis` first, into the bytes it is given; and what packs
    them all one after another. Where each piece is a run of every row of a
    dense buffer (the axes before `axis` have one element in it), the pieces
    of the longest length (all but the last few) are packed by one copy of a
    stacked view, as _sender packs equal ones (four ranks on two cores: piece
    by piece lost, as the even all_to_all's did); the rest piece by piece."""
    extent = shape[split_axis]
    cuts = [tuple(slice(*block(extent, n, m)) if a == split_axis else slice(None) for a in range(len(shape)))
            for m in range(n)]
    sent_at, longest = displacements(sent), -(-extent // n)
    inner, outer = prod(shape[split_axis + 1:]), prod(shape[:split_axis])
    full = extent // longest if longest else 0
    stacks = full > 1 and _rows_of_runs(shape, split_axis, axis, longest)

    def write(x: np.ndarray, k: int, into: np.ndarray) -> None:
        p = moved_first(x[cuts[k]], axis)
        copy_into(into.view(x.dtype).reshape(p.shape), p)

    def pack(x: np.ndarray, into: np.ndarray) -> None:
        """Every piece of x at its place in `into` (x's bytes, pieces one after another)."""
        first = 0
        if stacks and x.flags.c_contiguous:
            run_of = longest * inner
            head = into[:full * sent[0]].view(x.dtype).reshape(full, outer, run_of)
            copy_into(head, x.reshape(outer, extent * inner)[:, :full * run_of].reshape(outer, full, run_of)
                      .transpose(1, 0, 2))
            first = full
        for k in range(first, n):
            write(x, k, into[sent_at[k]:sent_at[k] + sent[k]])

    return write, pack


def _run_writers(shape: tuple[int, ...], n: int, split_axis: int, axis: int,
                 write: PieceWriter) -> tuple[PieceWriter, PiecesWriter]:
    """What writes one piece, and several at once, of a buffer of `shape` cut in
    n along `split_axis` (equal pieces, or the sharding rule's uneven ones),
    each in C order with `axis` first: where the buffer is dense and each piece
    is a run of every row (the axes before `axis` have one element in a
    piece), by interp/mpi/row_runs.py's vector moves, several pieces in one pass
    over the rows (63 float32 columns in four, rows of 252 bytes: numpy's copy
    of a 1 MiB piece took 0.06 ms, three 0.19-0.20; here 0.04 and 0.08-0.09;
    equal pieces of 64 columns, three: 0.08-0.11 through host_copy.piece_into
    one by one, 0.09-0.10 here, the buffer read once, the quicker where it
    is out of cache); else by `write`, one after another."""
    extent, longest = shape[split_axis], -(-shape[split_axis] // n)
    outer, inner = prod(shape[:split_axis]), prod(shape[split_axis + 1:])
    cols = [(lo * inner, (hi - lo) * inner) for lo, hi in (block(extent, n, k) for k in range(n))]
    rows_of_runs = _rows_of_runs(shape, split_axis, axis, longest)
    one_by_one = _one_by_one(write)

    def write_one(x: np.ndarray, k: int, into: np.ndarray) -> None:
        if rows_of_runs and x.flags.c_contiguous:
            lo, width = cols[k]
            runs_into(into.view(x.dtype).reshape(outer, width), x.reshape(outer, extent * inner)[:, lo:lo + width])
        else:
            write(x, k, into)

    def write_all(x: np.ndarray, pieces: Sequence[tuple[int, np.ndarray]]) -> None:
        if rows_of_runs and x.flags.c_contiguous:
            runs_scattered(x.reshape(outer, extent * inner),
                           [(cols[k][0], into.view(x.dtype).reshape(outer, cols[k][1])) for k, into in pieces])
        else:
            one_by_one(x, pieces)

    return write_one, write_all
