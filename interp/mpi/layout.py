"""Where a collective's blocks and pieces lie, and what lays them out to send.

Every buffer crosses MPI as the bytes of its elements in C order with the
communicated axis moved to the front (`moved_first`); each member's block
shape and each piece's byte count and place follow from the types alone
(`block_shapes`, `displacements`). A buffer cut in n pieces along one axis
(the sharding rule's: equal, or the last ones shorter or empty) is sent as
its pieces one after another: from its own memory where they already lie in
that order, else packed by one copy of a stacked view (`sender`,
`uneven_sender`); or written piece by piece, several at once by runs of
every row where each piece is one (`run_writers`, interp/mpi/row_runs.py).
Strided copies go through interp/mpi/host_copy.py. Only bytes move: the bits
never change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod

import numpy as np

from interp.mpi.host_copy import copy_into, pieces_into
from interp.mpi.pools import scratch
from interp.mpi.row_runs import runs_into, runs_scattered
from refir.ir.program_cache import by_identity
from refir.ir.types import TensorType, axis_first, block, local_shape


def moved_first(x: np.ndarray, axis: int) -> np.ndarray:
    """x with `axis` moved to the front, as np.moveaxis (a view; a few µs
    cheaper, which counts on every call of a small collective)."""
    if axis == 0 or x.ndim < 2:  # nothing to move (a 0-d buffer has no axis)
        return x
    return x.transpose(axis_first(x.ndim, axis))


def displacements(counts: Sequence[int]) -> list[int]:
    """Where each count starts when they lie one after another."""
    return [sum(counts[:i]) for i in range(len(counts))]


@by_identity  # asked at every call of a collective: types are frozen, and hashing one walks it all
def block_shapes(t: TensorType, devices: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Each device's block shape under a resolved (symbol-free) type."""
    return tuple(local_shape(t, {}, d) for d in devices)


PieceWriter = Callable[[np.ndarray, int, np.ndarray], None]  # (buffer, piece k, the bytes it goes to)
PiecesWriter = Callable[[np.ndarray, Sequence[tuple[int, np.ndarray]]], None]  # (buffer, (piece k, its bytes)...)


def front_first(shape: tuple[int, ...], axis: int) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """The shape with `axis` moved to the front, and the transpose that moves it
    back (None where nothing moves)."""
    if axis == 0:
        return shape, None
    return (shape[axis], *shape[:axis], *shape[axis + 1:]), (*range(1, axis + 1), 0, *range(axis + 1, len(shape)))


def stacking(shape: tuple[int, ...], n: int, split_axis: int,
             axis: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """How a buffer of `shape` shows its n equal pieces along `split_axis` as one
    view, the piece index first and then each piece's axes with `axis` first:
    the shape it is cut to (one axis split: a view of any buffer), the
    transpose of that, and the view's shape."""
    cut = (*shape[:split_axis], n, shape[split_axis] // n, *shape[split_axis + 1:])
    piece_axes = [a + (a >= split_axis) for a in range(len(shape))]  # where the buffer's axes are in `cut`
    order = (split_axis, *(piece_axes[a] for a in axis_first(len(shape), axis)))
    return cut, order, tuple(cut[a] for a in order)


def rows_of_runs(shape: tuple[int, ...], split_axis: int, axis: int, longest: int) -> bool:
    """Whether each piece of a buffer of `shape` cut along `split_axis` (at most
    `longest` long there), in C order with `axis` first, is a run of every row
    of the dense buffer: the axes before `axis` have one element in a piece."""
    return all((longest if a == split_axis else shape[a]) <= 1 for a in range(axis))


def one_by_one(write: PieceWriter) -> PiecesWriter:
    """Several pieces written by `write`, one after another."""
    def write_all(x: np.ndarray, pieces: Sequence[tuple[int, np.ndarray]]) -> None:
        for k, into in pieces:
            write(x, k, into)

    return write_all


def sender(shape: tuple[int, ...], n: int, split_axis: int, axis: int) -> Callable[[np.ndarray], np.ndarray]:
    """What sends the n equal pieces of a buffer of `shape` along `split_axis`,
    each in C order with `axis` first, one after another: the buffer's own
    memory where it is dense and they lie there so (decided from the shape,
    once), else one copy through a stacked view (stacking), its shapes worked
    out here."""
    longest = shape[split_axis] // n
    axis_first_moves_nothing = rows_of_runs(shape, split_axis, axis, longest)
    in_order = all(shape[a] <= 1 for a in range(split_axis)) and axis_first_moves_nothing
    cut, order, stacked = stacking(shape, n, split_axis, axis)
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


def uneven_sender(shape: tuple[int, ...], n: int, split_axis: int, axis: int,
                  sent: Sequence[int]) -> tuple[PieceWriter, Callable[[np.ndarray, np.ndarray], None]]:
    """What writes piece k of a buffer of `shape` cut in n along `split_axis` by
    the sharding rule (the last pieces shorter or empty; `sent`: their bytes),
    in C order with `axis` first, into the bytes it is given; and what packs
    them all one after another. Where each piece is a run of every row of a
    dense buffer (the axes before `axis` have one element in it), the pieces
    of the longest length (all but the last few) are packed by one copy of a
    stacked view, as sender packs equal ones (four ranks on two cores: piece
    by piece lost, as the even all_to_all's did); the rest piece by piece."""
    extent = shape[split_axis]
    cuts = [tuple(slice(*block(extent, n, m)) if a == split_axis else slice(None) for a in range(len(shape)))
            for m in range(n)]
    sent_at, longest = displacements(sent), -(-extent // n)
    inner, outer = prod(shape[split_axis + 1:]), prod(shape[:split_axis])
    full = extent // longest if longest else 0
    stacks = full > 1 and rows_of_runs(shape, split_axis, axis, longest)

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


def run_writers(shape: tuple[int, ...], n: int, split_axis: int, axis: int,
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
    by_runs = rows_of_runs(shape, split_axis, axis, longest)
    singly = one_by_one(write)

    def write_one(x: np.ndarray, k: int, into: np.ndarray) -> None:
        if by_runs and x.flags.c_contiguous:
            lo, width = cols[k]
            runs_into(into.view(x.dtype).reshape(outer, width), x.reshape(outer, extent * inner)[:, lo:lo + width])
        else:
            write(x, k, into)

    def write_all(x: np.ndarray, pieces: Sequence[tuple[int, np.ndarray]]) -> None:
        if by_runs and x.flags.c_contiguous:
            runs_scattered(x.reshape(outer, extent * inner),
                           [(cols[k][0], into.view(x.dtype).reshape(outer, cols[k][1])) for k, into in pieces])
        else:
            singly(x, pieces)

    return write_one, write_all
