"""Copying a strided array into C order on the host, fast where numpy is slow.

numpy copies element by element along the destination's contiguous axis; when
the source's contiguous axis is another one (a column-major block sent row-major,
an axis moved to the front), every read jumps a whole row of the source, and
4 MiB take about 3 ms on a 2-core EPYC against 0.1 ms for a plain copy. A tiled
copy reads a tile along the source's contiguous axis and writes it along the
destination's while both stay in cache: about 0.5 ms for the same bytes, and
0.15 ms for 32-bit elements, whose 8 x 8 tiles move as eight vector loads,
shuffles and eight vector stores (numba's own loops move one element at a
time on one side). Only bytes move (elements as unsigned integers of their
size), so any dtype keeps its bits.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import product
from math import prod

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core.base import BaseContext
from numba.core.typing.templates import Signature
from numba.extending import intrinsic

# Below this many bytes, or with a short axis on either side, numpy's copy is as
# good and a tiled copy is not worth a compilation.
TILED_MIN_BYTES = 1 << 16
TILED_MIN_EXTENT = 8
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@numba.njit(cache=True, nogil=True)
def _tiled(dst: np.ndarray, src: np.ndarray) -> None:  # pragma: no cover - compiled
    """dst[s, i, j] = src[s, i, j], where j is dst's contiguous axis and i src's,
    slice s after slice s: in 8 x 8 blocks (fixed trip counts, which LLVM turns
    into register transposes), down a strip of 8 columns of a band of 1024 rows,
    strip after strip (eight sequential streams read; the band's rows stay in
    cache while its strips are written), then the edges. On four ranks copying
    at once on two cores this beat square 16 x 16 tiles by 15-35% (alone, 0.5 ms
    against 0.45 for 4 MiB of float32)."""
    slices, rows, cols = dst.shape
    r8, c8 = rows - rows % 8, cols - cols % 8
    for s in range(slices):
        for band in range(0, r8, 1024):
            for j8 in range(0, c8, 8):
                for i8 in range(band, min(band + 1024, r8), 8):
                    for i in range(i8, i8 + 8):
                        for j in range(j8, j8 + 8):
                            dst[s, i, j] = src[s, i, j]
        for i in range(r8, rows):
            for j in range(cols):
                dst[s, i, j] = src[s, i, j]
        for i in range(r8):
            for j in range(c8, cols):
                dst[s, i, j] = src[s, i, j]


# Lane masks of an 8 x 8 transpose of 32-bit words in three rounds of two-vector
# shuffles (the unpack, 64-bit shuffle and 128-bit permute a hand-written AVX
# transpose uses): interleave 32-bit words, then 64-bit pairs, then 128-bit halves.
_ROUNDS = (((0, 8, 1, 9, 4, 12, 5, 13), (2, 10, 3, 11, 6, 14, 7, 15)),
           ((0, 1, 8, 9, 4, 5, 12, 13), (2, 3, 10, 11, 6, 7, 14, 15)),
           ((0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15)))


@intrinsic
def _transpose8x8(typingctx: object, dst: types.Type, also: types.Type, dst_step: types.Type, src: types.Type,
                  src_step: types.Type) -> tuple[Signature, Callable[..., object]]:  # pragma: no cover - compiled
    """Eight rows of eight 32-bit words at address src (rows src_step bytes
    apart) written transposed at dst (rows dst_step bytes apart), and at `also`
    where it is another address (one read for two copies): eight vector
    loads, 24 shuffles, eight vector stores. numba's loops over 8 x 8 tiles
    compile to one word at a time instead (a strided read or write on one side);
    these are about 3.5x faster for 4 MiB of float32 (16384 x 64)."""
    words = ir.VectorType(ir.IntType(32), 8)
    index = ir.IntType(64)

    def codegen(context: BaseContext, builder: ir.IRBuilder, signature: Signature, args: list[ir.Value]) -> object:
        d, also, d_step, s, s_step = args

        def row(base: ir.Value, step: ir.Value, k: int) -> ir.Value:
            return builder.inttoptr(builder.add(base, builder.mul(step, ir.Constant(index, k))), words.as_pointer())

        def shuffled(a: ir.Value, b: ir.Value, lanes: tuple[int, ...]) -> ir.Value:
            return builder.shuffle_vector(a, b, ir.Constant(words, list(lanes)))

        r = []
        for k in range(8):
            load = builder.load(row(s, s_step, k))
            load.align = 1  # any address: the vector moves are unaligned ones
            r.append(load)
        (lo32, hi32), (lo64, hi64), (lo128, hi128) = _ROUNDS
        t = [shuffled(r[k], r[k + 1], m) for k in (0, 2, 4, 6) for m in (lo32, hi32)]
        u = [shuffled(t[k], t[k + 2], m) for k in (0, 1, 4, 5) for m in (lo64, hi64)]
        out = [shuffled(u[k], u[k + 4], m) for m in (lo128, hi128) for k in range(4)]
        for k in range(8):
            store = builder.store(out[k], row(d, d_step, k))
            store.align = 1
        with builder.if_then(builder.icmp_unsigned("!=", also, d)):
            for k in range(8):
                store = builder.store(out[k], row(also, d_step, k))
                store.align = 1
        return context.get_dummy_value()

    return types.void(types.intp, types.intp, types.intp, types.intp, types.intp), codegen


@numba.njit(cache=True, nogil=True)
def _tiled32(dst: np.ndarray, src: np.ndarray, also: np.ndarray) -> None:  # pragma: no cover - compiled
    """_tiled for 32-bit words, with both contiguous axes of step 4, through
    _transpose8x8, written to `also` as well where it is another array of dst's
    shape and strides. Taller than wide: 64 x 64 blocks, down each block's strips of
    8 columns (eight source streams); where 64 columns are all there are, bands
    of 1024 rows instead (one contiguous stretch of the destination): as fast
    in cache, and a fifth to a quarter faster on a source that is not (4 MiB
    of 16384 x 64, two ranks at once, each cycling through 48 MiB: best 0.60
    ms against 0.79). Wider than tall: strips of 256 columns of
    all rows, along the rows (eight destination streams). Measured alone on
    shapes from 16384 x 64 to 64 x 16384 (benchmarks/RESULTS.md): 0.14-0.45 ms
    for 4 MiB against 0.5-0.55 for _tiled; power-of-two extents of 1024 and
    more on both sides stay near _tiled's (cache sets the strides share)."""
    slices, rows, cols = dst.shape
    r8, c8 = rows - rows % 8, cols - cols % 8
    down = rows >= cols
    block_rows, block_cols = (1024 if c8 <= 64 else 64, 64) if down else (max(r8, 8), 256)
    d0, s0, a0 = dst.ctypes.data, src.ctypes.data, also.ctypes.data
    d_slice, d_row = dst.strides[0], dst.strides[1]
    s_slice, s_col = src.strides[0], src.strides[2]
    for s in range(slices):
        d, f, a = d0 + s * d_slice, s0 + s * s_slice, a0 + s * d_slice
        for bi in range(0, r8, block_rows):
            for bj in range(0, c8, block_cols):
                i_end, j_end = min(bi + block_rows, r8), min(bj + block_cols, c8)
                if down:
                    for j8 in range(bj, j_end, 8):
                        for i8 in range(bi, i_end, 8):
                            at = i8 * d_row + j8 * 4
                            _transpose8x8(d + at, a + at, d_row, f + i8 * 4 + j8 * s_col, s_col)
                else:
                    for i8 in range(bi, i_end, 8):
                        for j8 in range(bj, j_end, 8):
                            at = i8 * d_row + j8 * 4
                            _transpose8x8(d + at, a + at, d_row, f + i8 * 4 + j8 * s_col, s_col)
        for i in range(r8, rows):
            for j in range(cols):
                dst[s, i, j] = also[s, i, j] = src[s, i, j]
        for i in range(r8):
            for j in range(c8, cols):
                dst[s, i, j] = also[s, i, j] = src[s, i, j]


@numba.njit(cache=True, nogil=True)
def _in_order(dst: np.ndarray, src: np.ndarray) -> None:  # pragma: no cover - compiled
    """dst[i, j, k] = src[i, j, k], in src's memory order (k its contiguous axis)."""
    a, b, c = dst.shape
    for i in range(a):
        for j in range(b):
            for k in range(c):
                dst[i, j, k] = src[i, j, k]


@numba.njit(cache=True, nogil=True)
def _pieces_of(dst: np.ndarray, src: np.ndarray) -> None:  # pragma: no cover - compiled
    """dst[k, a, b] = src[a, k, b], both C-contiguous: read in src's order. Both
    arrays typed C-contiguous, the runs along b move by vector loads and stores
    (a strided view's unknown steps keep a loop to one element at a time)."""
    rows, n, run = src.shape
    for a in range(rows):
        for k in range(n):
            for b in range(run):
                dst[k, a, b] = src[a, k, b]


def pieces_into(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[k] = src[:, k] for C-contiguous dst (n, A, B) and src (A, n, B) of one
    dtype: the pieces of a dense buffer cut along one axis, stacked (an
    all_to_all's send buffer). 4 MiB alone: 0.12 ms, against 0.25 ms through
    copy_into's in-order copy of the strided view and 0.09 for a plain copy."""
    if dst.nbytes < TILED_MIN_BYTES or dst.itemsize not in _BITS:
        np.copyto(dst, src.transpose(1, 0, 2))
        return
    bits = _BITS[dst.itemsize]
    to, frm = dst.view(bits), src.view(bits)  # views of the last axis: each run's bytes
    word = np.uint64
    if (dst.shape[2] * dst.itemsize) % 8 == 0 and dst.ctypes.data % 8 == 0 and src.ctypes.data % 8 == 0:
        to, frm = dst.view(word), src.view(word)
    _pieces_of(to, frm)


@numba.njit(cache=True, nogil=True)
def _piece_of(dst: np.ndarray, src: np.ndarray, k: int) -> None:  # pragma: no cover - compiled
    """dst[a, b] = src[a, k, b], both C-contiguous (vector moves along b)."""
    rows, _, run = src.shape
    for a in range(rows):
        for b in range(run):
            dst[a, b] = src[a, k, b]


def piece_into(dst: np.ndarray, src: np.ndarray, k: int) -> None:
    """dst[...] = src[:, k] for C-contiguous dst (A, B) and src (A, n, B) of one
    dtype: one piece of pieces_into, as fast per byte (2 MiB of 128-byte runs
    alone: 0.06 ms, against 0.10 for numpy's copy of the strided view)."""
    if dst.nbytes < TILED_MIN_BYTES or dst.itemsize not in _BITS:
        np.copyto(dst, src[:, k])
        return
    to, frm = dst.view(_BITS[dst.itemsize]), src.view(_BITS[dst.itemsize])
    if (dst.shape[1] * dst.itemsize) % 8 == 0 and dst.ctypes.data % 8 == 0 and src.ctypes.data % 8 == 0:
        to, frm = dst.view(np.uint64), src.view(np.uint64)
    _piece_of(to, frm, k)


def copy_into(dst: np.ndarray, src: np.ndarray, also: np.ndarray | None = None) -> None:
    """dst[...] = src for a C-contiguous `dst` of src's shape and dtype, and
    also[...] = src for another such array where given (a transposing copy
    writes both from one read)."""
    if src.nbytes < TILED_MIN_BYTES or dst.itemsize not in _BITS or src.ndim < 2:
        np.copyto(dst, src)
        _again(also, dst)
        return
    bits = _BITS[dst.itemsize]
    across = _across_axis(src)
    if across is not None:
        last = src.ndim - 1
        others = [a for a in range(src.ndim) if a not in (across, last)]
        order = (*others, across, last)  # the two axes the tiles span, last
        to, frm = dst.view(bits).transpose(order), src.view(bits).transpose(order)
        to2 = to if also is None else also.view(bits).transpose(order)
        if not others:
            to, frm, to2 = to[None], frm[None], to2[None]
        shuffled = _shuffles_fit(to, frm) and to2.strides == to.strides
        for index in product(*(range(src.shape[a]) for a in others[:-1])):  # the slices' axes, the last one compiled
            if shuffled:
                _tiled32(to[index], frm[index], to2[index])
            else:
                _tiled(to[index], frm[index])
        if not shuffled:
            _again(also, dst)
        return
    # Runs along the last axis, but the others out of memory order (pieces of a
    # split stacked one after another): numpy walks dst's order and jumps about
    # src; reading src in its own order is about 1.6x faster on four busy ranks.
    order = sorted(range(src.ndim), key=lambda a: -abs(src.strides[a]))
    to, frm = _merged(dst.view(bits).transpose(order), src.view(bits).transpose(order))
    if order != sorted(order) and to.ndim == 3:
        _in_order(*_widened(to, frm))
    else:
        np.copyto(dst, src)
    _again(also, dst)


def _again(also: np.ndarray | None, dst: np.ndarray) -> None:
    if also is not None:
        np.copyto(also, dst)


def _shuffles_fit(dst: np.ndarray, src: np.ndarray) -> bool:
    """Whether _tiled32 takes these (slices, rows, cols) views: 32-bit words, both
    contiguous axes of step 4 (not reversed)."""
    return dst.itemsize == 4 and dst.strides[2] == 4 and src.strides[1] == 4


def _widened(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """a and b with their runs along the last axis read as 8-byte words where
    runs, strides and addresses allow it: fewer, wider moves (about 1.4x faster
    for 64-byte runs of float32)."""
    words = (a.shape[-1] * a.itemsize, *a.strides[:-1], *b.strides[:-1], a.ctypes.data, b.ctypes.data)
    if a.itemsize < 8 and a.strides[-1] == b.strides[-1] == a.itemsize and all(w % 8 == 0 for w in words):
        return a.view(np.uint64), b.view(np.uint64)
    return a, b


def _merged(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """a and b (of one shape) with neighbouring axes merged where both lie so that
    the outer one steps over the inner one exactly: the same elements, fewer axes."""
    shape: list[int] = []
    sa: list[int] = []
    sb: list[int] = []
    for n, x, y in zip(a.shape, a.strides, b.strides):
        if n == 1:  # an axis of one steps nowhere
            continue
        if shape and sa[-1] == x * n and sb[-1] == y * n:
            shape[-1], sa[-1], sb[-1] = shape[-1] * n, x, y
        else:
            shape.append(n)
            sa.append(x)
            sb.append(y)
    view = np.lib.stride_tricks.as_strided
    return view(a, shape, sa), view(b, shape, sb)


def _across_axis(src: np.ndarray) -> int | None:
    """The source's contiguous axis, where a tiled copy beats numpy's: it is not
    the last (numpy reads runs along it then), both it and the last are long,
    and the slices over the other axes but one are few (a Python loop)."""
    long = [a for a in range(src.ndim) if src.shape[a] > 1]  # an axis of one has no say in the layout
    across = min(long, key=lambda a: (abs(src.strides[a]), a))
    last = src.ndim - 1
    if across == last or abs(src.strides[across]) != src.itemsize:
        return None
    if min(src.shape[across], src.shape[last]) < TILED_MIN_EXTENT:
        return None
    others = [n for a, n in enumerate(src.shape) if a not in (across, last)]
    return across if prod(others[:-1]) <= 64 else None
