"""allgather, allreduce and reduce_scatter, of equal or uneven blocks (the
sharding rule's: the last ones shorter or empty), as one rank makes them under
MPI, planned once per (op, type, team, rank); and the registry of plans
(`PLANS`, `planned`), which interp/mpi/all_to_all.py's plans join when
interp/mpi/transport.py imports it.

What a call needs beyond its buffer (shapes, byte counts, where this rank's
piece goes, whether the pieces already lie in order and the view that packs
them) follows from the op, the type and the team: a plan works it out once, and
a call is then a few numpy and MPI calls. At 1K elements the Python around the
MPI call was most of a call's time, and four ranks sharing two cores pay for
it about twice over (benchmarks/RESULTS.md, "third pass"). Results are arrays
of their own (interp/mpi/pools.py's `result`: kept ones nobody holds any more,
past 64 KiB; an allgather's may be a result slot in shared memory,
interp/mpi/shared_windows.py), in C order where the result's axes keep their
order, so that spmd's NumpyTransport need not copy them again. Where the
pieces lie and what packs them: interp/mpi/layout.py.
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
from interp.mpi.host_copy import copy_into
from interp.mpi.layout import (
    block_shapes,
    displacements,
    front_first,
    moved_first,
    one_by_one,
    run_writers,
    sender,
    uneven_sender,
)
from interp.mpi.pools import handed_out, result, scratch
from interp.mpi.shared_windows import (
    SHARED_MIN_BYTES,
    SharedResults,
    SharedSegments,
    shared_results,
    shared_segments,
)
from interp.sentinel import fill
from interp.transport import HANDED_OUT
from refir.ir import ops
from refir.ir.blocks import gathered_order, gathered_split
from refir.ir.program_cache import by_identity
from refir.ir.tables import registrar
from refir.ir.types import TensorType, block, block_size
from refir.lowering.teams import Team
from refir.world.mpi_job import barrier, wait

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
    front, back = front_first((*shapes[0][:axis], sum(lengths), *shapes[0][axis + 1:]), axis)
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
            return handed_out(whole, back)
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
        return handed_out(whole, back)

    split = gathered_split(src.axes[axis])
    if split == 1:
        return run
    gathered = run

    def interleaved(comm: MPI.Comm, x: np.ndarray) -> np.ndarray:
        """The members' blocks gathered in team order, then their runs put in place (§3.4)."""
        whole, lead = gathered(comm, x), (slice(None),) * axis
        at = [sum(lengths[:k]) for k in range(len(lengths))]
        pieces = [whole[(*lead, slice(at[k] + lo, at[k] + hi))] for k, lo, hi in gathered_order(lengths, split)]
        return np.concatenate(pieces, axis) if pieces else whole

    return interleaved


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
    pieces = sender(shape, n, op.axis, 0) if even else None
    row = prod(e for a, e in enumerate(shape) if a != op.axis) * itemsize
    sent = [block_size(extent, n, k) * row for k in range(n)]
    sent_at, got = displacements(sent), [prod(mine) * itemsize] * n
    got_at, nbytes = displacements(got), prod(shape) * itemsize
    in_order = all(e <= 1 for e in shape[:op.axis])  # a dense partial holds its pieces one after another
    write, pack = uneven_sender(shape, n, op.axis, 0, sent)
    # pieces cut along an inner axis are runs of every row: written in one pass (interp/mpi/row_runs.py)
    write_others = run_writers(shape, n, op.axis, 0, write)[1] if prod(shape[:op.axis]) > 1 else one_by_one(write)
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
    starting with the member after it, as all_to_all's _gathered_from."""
    me, size = shared.comm.rank, shared.comm.size
    for step in range(1, size):
        member = (me + step) % size
        lo, hi = places[member]
        np.copyto(out[lo:hi], shared.half(member, turn, hi - lo))
