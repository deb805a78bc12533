"""Row copies of elements narrower than 8 bytes whose rows do not align alike,
moved as 8-byte words on both sides (copy_into's "words" plan, gpu_backend/kernels/elementwise.py).

A row copy between buffers whose rows start at different element offsets modulo
a word (a slice `[:, 1:-1]`, pad's interior, a reshape of such a slice) cannot
take the row kernel's 8-byte words: one side would be misaligned, and element by
element a thread moves 4 bytes a load, too few in flight to fill the memory
system. Here each destination row is written as whole aligned 8-byte words (its
first and last elements that share a word with a neighbouring row element by
element, one a thread, each loaded before the row's words and stored after them,
so no warp waits a load's latency on its own), and each word is made from the
source in one of three ways, chosen per row (the same for every word of it, so
warps never diverge on it):

- the source aligned like the destination: one aligned word load;
- shifted by r elements: the two aligned source words it straddles, each loaded
  whole, joined by two shifts (little-endian: element e is bits (e mod f) * bits
  of word e // f); for 4-byte elements, by default, the word's two elements loaded
  each (WORDS_PAIRS: measured below);
- the source's inner stride 0 (an expand along the fastest axis): the row's one
  value, read once, repeated f times into a word (multiplied by 0x..0101);
- 4-byte elements at source stride 2 (a slice `[:, ::2]`, which reads every sector
  anyway): the same half of two neighbouring aligned words.

Values move as unsigned bits, never as values, so every dtype is exact. Rows are
indexed over two strided outer axes (grid x and y, no division), and a long row
is cut into chunks over grid z so that few long rows still fill the GPU. Each
thread loads eight words (sixteen in the shifted case) before it stores any, then
four, the row's ragged end too (its loads clamped to the chunk's last word). A kernel is
made per source inner stride (its modes only), without launch bounds (72 registers for
f32); WORDS_* choose the other variants (kernel_probe).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from math import prod
from typing import Any

import numpy as np

from gpu_backend.device import cuda, fitted, jit_options, max_blocks, rows_block
from gpu_backend.kernels.strides import Arr

MIN_INNER = 64  # shorter rows keep the row kernel: a word path pays its head and tail per row
# The word copy's variants (benchmarks/kernel_probe.py `layer` compares them; benchmarks/kernel_regs.py
# gives their registers for sm_90 without a GPU): eight words a round (else four); a kernel per source
# inner stride (else one for all: 80 registers for f32, three blocks an SM, where the unit stride's
# alone takes 72); for unit-stride sources, blocks an SM asked of the compiler (launch bounds; 0 none).
# Measured on the H200 (RESULTS.md, ninth session): launch bounds of 4 (64 registers, four blocks an SM)
# ran slice [:, 1:-1] at 77.9% of the copy, none (72 registers) at 85.7%; pad 74.6% against 81.4%.
# Shifted f32 rows by their 4-byte elements (WORDS_PAIRS, 72 registers too; thirteenth session):
# slice [:, 1:-1] 89.4% against 86.8% joined words, pad 86.4% against 84.4%, reshape 90.3% / 88.5%.
WORDS_WIDE = True
WORDS_BY_STEP = True
WORDS_MIN_BLOCKS = 0
WORDS_PAIRS = True  # 4-byte elements of shifted rows loaded each (mode 4); False: two words joined (mode 1)
# Shifted rows staged through shared memory (each source word loaded once, blocks one row high) lost on
# the H200 (fifteenth session: slice [:, 1:-1] 79.8% of the copy a call against 83.8%, pad 79.0% / 85.1%):
# removed (HISTORY.md).
WORD = np.dtype(np.uint64)


U = np.uint64  # indices as unsigned: numba adds no wraparound code (they are element places, never negative)
LOW32 = np.uint64(0xFFFFFFFF)
HALF = np.uint64(32)


@cuda.jit(device=True)
def _word(a8: Arr, a_e: Arr, wa: int, s: int, k: int, mode: int, lo_shift: np.uint64, hi_shift: np.uint64,
          fill: np.uint64) -> np.uint64:
    """Destination word k of a row whose source starts in word wa (its first element: element s),
    as the row's `mode` makes it: 0 aligned (a8[U(wa + k)]), 1 shifted (a8[U(w)] and a8[U(w + 1)]
    joined), 2 broadcast (`fill`, the row's value repeated), 3 every other 4-byte element (the
    same half of two words), 4 shifted 4-byte elements: the word's two elements loaded each
    (a_e[s + 2 k], a_e[s + 2 k + 1]: each source byte loaded once, not twice as in mode 1;
    ptxas gives the kernel as many registers, 72 for f32: kernel_probe times both)."""
    if mode == 0:
        return a8[U(wa + k)]
    if mode == 1:
        return (a8[U(wa + k)] >> lo_shift) | (a8[U(wa + k + 1)] << hi_shift)
    if mode == 2:
        return fill
    if mode == 4:
        e = U(s + 2 * k)  # one index for both: their addresses a base and base + 4
        return np.uint64(a_e[e]) | (np.uint64(a_e[e + U(1)]) << HALF)
    w = wa + 2 * k
    return ((a8[U(w)] >> lo_shift) & LOW32) | ((a8[U(w + 1)] >> lo_shift) << HALF)


@cuda.jit(device=True)
def _four(a8: Arr, a_e: Arr, wa: int, s: int, k: int, bx: int, last: int, ragged: bool, mode: int,
          lo_shift: np.uint64, hi_shift: np.uint64, fill: np.uint64) -> tuple[np.uint64, np.uint64, np.uint64,
                                                                              np.uint64]:
    """Words k, k + bx, k + 2 bx, k + 3 bx of a row (`ragged`: those past `last` read as `last`)."""
    k1, k2, k3 = k + bx, k + 2 * bx, k + 3 * bx
    if ragged:
        k1, k2, k3 = min(k1, last), min(k2, last), min(k3, last)
    return (_word(a8, a_e, wa, s, k, mode, lo_shift, hi_shift, fill),
            _word(a8, a_e, wa, s, k1, mode, lo_shift, hi_shift, fill),
            _word(a8, a_e, wa, s, k2, mode, lo_shift, hi_shift, fill),
            _word(a8, a_e, wa, s, k3, mode, lo_shift, hi_shift, fill))


@cuda.jit(device=True)
def _put(o8: Arr, wo: int, k: int, bx: int, w1: int, ragged: bool,
         v: tuple[np.uint64, np.uint64, np.uint64, np.uint64]) -> None:
    """Store `_four`'s words (`ragged`: only those below w1)."""
    o8[U(wo + k)] = v[0]
    if not ragged or k + bx < w1:
        o8[U(wo + k + bx)] = v[1]
    if not ragged or k + 2 * bx < w1:
        o8[U(wo + k + 2 * bx)] = v[2]
    if not ragged or k + 3 * bx < w1:
        o8[U(wo + k + 3 * bx)] = v[3]


@cuda.jit(device=True)
def _run(o8: Arr, a8: Arr, a_e: Arr, wo: int, wa: int, s: int, k: int, w1: int, bx: int, wide: bool, mode: int,
         lo_shift: np.uint64, hi_shift: np.uint64, fill: np.uint64) -> None:
    """Words k, k + bx, ... below w1 of a row (dst's from word wo, src's from word wa): with
    `wide`, eight a round, all eight made (their loads issued) before any is stored, then at
    most one round of four (without `wide`, rounds of four), then the ragged end's four, its
    loads clamped to the last word. (`_four` and `_put` are inlined, `wide`, `ragged` and `mode` constants at
    each call: the rounds compile to the straight loads and stores written out before.)"""
    last = w1 - 1
    if wide:
        while k + 7 * bx < w1:  # eight a round: 64 bytes of loads in flight a thread
            v = _four(a8, a_e, wa, s, k, bx, last, False, mode, lo_shift, hi_shift, fill)
            u = _four(a8, a_e, wa, s, k + 4 * bx, bx, last, False, mode, lo_shift, hi_shift, fill)
            _put(o8, wo, k, bx, w1, False, v)
            _put(o8, wo, k + 4 * bx, bx, w1, False, u)
            k += 8 * bx
        if k + 3 * bx < w1:  # then at most one round of four
            _put(o8, wo, k, bx, w1, False, _four(a8, a_e, wa, s, k, bx, last, False, mode, lo_shift, hi_shift, fill))
            k += 4 * bx
    else:
        while k + 3 * bx < w1:  # rounds of four
            _put(o8, wo, k, bx, w1, False, _four(a8, a_e, wa, s, k, bx, last, False, mode, lo_shift, hi_shift, fill))
            k += 4 * bx
    if k < w1:  # the ragged end: up to four words, all loaded first (indices clamped)
        _put(o8, wo, k, bx, w1, True, _four(a8, a_e, wa, s, k, bx, last, True, mode, lo_shift, hi_shift, fill))


@cuda.jit(device=True)
def _framed(a_e: Arr, pa: int, e: int, a_in: int, inner: int, fill: Any) -> Any:
    """Element e of a dst row: the src row's where 0 <= e < inner, else the frame's `fill`
    (its load made either way, at the row's first element: one branch-free select)."""
    inside = 0 <= e < inner
    v = a_e[U(pa + (e if inside else 0) * a_in)]
    return v if inside else fill


@cache
def row_words_kernel(f: int, wide: bool = True, min_blocks: int = 0, pairs: bool = False,
                     step: int = -1, fill_rows: bool = False) -> Callable:
    """The word copy for elements of 64 / f bits (f a constant: its divisions are shifts);
    `wide`: eight words a round (else four: fewer registers, more threads an SM); `min_blocks`:
    blocks of THREADS an SM asked of the compiler (launch bounds: registers capped), 0 none;
    `pairs` (f 2 only): shifted rows by their elements (mode 4), not by two words a word;
    `step`: the source's inner stride (0, 1 or 2) where the kernel is made for it (a constant:
    only its modes compiled, mode 1's 16 loads of a round no longer beside mode 3's), -1 any;
    `fill_rows`: blank rows of pad's border written too (their words as mode 2's, of the fill)."""
    pairs = pairs and f == 2
    bits = 64 // f
    rep = np.uint64(sum(1 << (q * bits) for q in range(f)))  # 1 in every element's lowest bit

    @cuda.jit(**jit_options(min_blocks))
    def row_words(o_e: Arr, o8: Arr, a_e: Arr, a8: Arr, o_off: int, a_off: int,
                  o_i: int, o_j: int, a_i: int, a_j: int, a_in: int, ni: int, nj: int, inner: int,
                  chunk: int, lo: int, hi: int, rows_lo: int, rows_hi: int, fill: Any) -> None:
        """dst row (i, j) = src row (i, j), `inner` elements; o_e, a_e the buffers' memory as
        unsigned elements, o8, a8 the same memory as 8-byte words. With a frame (pad's): the
        lo elements before each dst row and the hi after it set to `fill` (an element's bits);
        with `fill_rows`, the rows_lo rows before row 0 along j and the rows_hi after the last
        too, frame and all (pad's border along the rows' outer axis, in the same launch)."""
        bx = cuda.blockDim.x
        t = cuda.threadIdx.x
        rows = nj + (rows_lo + rows_hi if fill_rows else 0)  # pad's blank rows too (fill_rows)
        gy = cuda.gridDim.y * cuda.blockDim.y
        for i in range(cuda.blockIdx.x, ni, cuda.gridDim.x):
            for jj in range(cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y, rows, gy):
                j = jj - rows_lo if fill_rows else jj
                blank = fill_rows and (j < 0 or j >= nj)  # a row all `fill`, its frame included: no source
                po = o_off + i * o_i + j * o_j  # the rows' first elements
                pa = a_off + i * a_i + (0 if blank else j * a_j)
                flo, fhi, n_in, src_n = (0, 0, lo + inner + hi, 0) if blank else (lo, hi, inner, inner)
                if blank:
                    po -= lo
                head = min((f - po % f) % f, n_in)  # elements before dst's first whole word
                words = (n_in - head) // f
                tail0 = head + words * f
                nh = flo + head  # element by element: the frame's and the row's before the words,
                nt = n_in + fhi - tail0  # and after them
                z0 = cuda.blockIdx.z == 0
                spread = bx >= nh and bx >= nt  # the elements sharing a word with another row: one a thread
                if z0 and not spread and t == 0:  # (blocks narrower than them: one thread, one by one)
                    for e in range(-flo, head):
                        o_e[U(po + e)] = _framed(a_e, pa, e, a_in, src_n, fill)
                    for e in range(tail0, n_in + fhi):
                        o_e[U(po + e)] = _framed(a_e, pa, e, a_in, src_n, fill)
                do_h = z0 and spread and t < nh  # head element t - flo, tail element tail0 + bx - 1 - t:
                do_t = z0 and spread and bx - 1 - t < nt  # loaded with the row's words
                eh = t - flo if do_h else 0
                et = tail0 + bx - 1 - t if do_t else 0
                hv = _framed(a_e, pa, eh, a_in, src_n, fill)
                tv = _framed(a_e, pa, et, a_in, src_n, fill)
                w0 = cuda.blockIdx.z * chunk
                w1 = min(w0 + chunk, words)
                if w0 < w1:
                    wo = (po + head) // f  # dst's first whole word
                    s = pa + head * a_in  # the source element going to its first element
                    r = s % f
                    lo_shift = np.uint64(r * bits)
                    hi_shift = np.uint64(64 - r * bits)
                    at = a_in if step < 0 else step  # the inner stride, a constant where made for one
                    mode = 2 if at == 0 or blank else (3 if at == 2 else (0 if r == 0 else 1))
                    wa = s // f
                    value = np.uint64(fill) if blank else np.uint64(a_e[U(pa)])
                    repeated = value * rep if mode == 2 else np.uint64(0)  # read once a row
                    k = w0 + t
                    if mode == 0:  # each call inlined with its mode a constant: loops without the other modes
                        _run(o8, a8, a_e, wo, wa, s, k, w1, bx, wide, 0, lo_shift, hi_shift, repeated)
                    elif mode == 1 and pairs:  # 4-byte elements: each loaded, not two words a word
                        _run(o8, a8, a_e, wo, wa, s, k, w1, bx, wide, 4, lo_shift, hi_shift, repeated)
                    elif mode == 1:
                        _run(o8, a8, a_e, wo, wa, s, k, w1, bx, wide, 1, lo_shift, hi_shift, repeated)
                    elif mode == 2:
                        _run(o8, a8, a_e, wo, wa, s, k, w1, bx, wide, 2, lo_shift, hi_shift, repeated)
                    else:
                        _run(o8, a8, a_e, wo, wa, s, k, w1, bx, wide, 3, lo_shift, hi_shift, repeated)
                if do_h:  # stored after them: no thread waits on a lone load
                    o_e[U(po + eh)] = hv
                if do_t:
                    o_e[U(po + et)] = tv

    return row_words


def many_rows(nj: int, by: int) -> int:
    """Grid y for nj rows, by a block, on one outer axis: a block for each by rows (within
    the grid's limit), not max_blocks()' grid-stride over them: an SM holds 3 to 5 blocks
    of these kernels (48 to 72 registers), so max_blocks()' 16 an SM ran 3.2 to 5.3 waves
    of 7 or 8 rows a block, the last wave part full; a call alone waits for it."""
    return min(-(-nj // by), 65535)


def rows_geometry(ni: int, nj: int, inner: int) -> tuple[tuple[int, int, int], tuple[int, int], int]:
    """A rows kernel's grid, block and chunk (what a block z takes of a row of `inner`): rows
    over grid x and y as the row kernels take them, a row cut over z only where rows are
    fewer than the GPU's blocks; each chunk a whole number of four block widths."""
    bx, by = rows_block(inner)
    by = fitted(nj, by)
    gi = min(ni, max_blocks())
    gj = min(-(-nj // by), max(1, max_blocks() // gi), 65535)
    gc = max(1, min(-(-inner // (4 * bx)), max(1, max_blocks() // (gi * gj)), 65535))
    if gi == 1 and gc == 1:  # many rows on one axis: a block for each by rows (many_rows)
        gj = many_rows(nj, by)
    per = -(-inner // gc)
    return (gi, gj, gc), (bx, by), -(-per // (4 * bx)) * 4 * bx


def words_geometry(ni: int, nj: int, inner: int, f: int) -> tuple[tuple[int, int, int], tuple[int, int], int]:
    """row_words' rows_geometry: rows of `inner` elements hold at most inner // f + 1 whole words."""
    return rows_geometry(ni, nj, inner // f + 1)


def words_plan(shape: list[int], ds: list[int], ss: list[int], itemsize: int, src_n: int,
               frame: tuple[int, int, int] = (0, 0, 0), rows: tuple[int, int] = (0, 0)) -> tuple[object, ...] | None:
    """("words", the kernel, element word, f, grid, block, its constants after the offsets), for a
    copy coalesced to `shape` with strides ds (dst) and ss (src), where this kernel takes it:
    narrow elements, dst rows unit stride, src rows unit stride or broadcast, at most two
    outer axes, rows of MIN_INNER elements or more, src's memory whole words where its words
    are read (a shifted word reads the whole word holding a row's last element); else None.
    dst's words are whole words inside its rows: its memory is seen to its last whole word.
    `frame`: (lo, hi, fill bits): each dst row's lo elements before and hi after set to fill;
    `rows`: (before, after): that many rows before the first along the row's outer axis (j, whose
    stride ds[-2] is dst's row to row) and after its last set to fill, frame included."""
    f = 8 // itemsize
    gather = itemsize == 4 and ss[-1] == 2  # every other element: mode 3
    if itemsize not in (1, 2, 4) or len(shape) > 3 or ds[-1] != 1 or (ss[-1] not in (0, 1) and not gather):
        return None
    if shape[-1] < MIN_INNER or (src_n % f and ss[-1]) or prod(shape) == 0:
        return None
    pad = 3 - len(shape)
    (ni, nj, inner), (o_i, o_j, _), (a_i, a_j, a_in) = [[1] * pad + shape, [0] * pad + ds, [0] * pad + ss]
    lo, hi, fill = frame
    rows_lo, rows_hi = rows
    grid, block, chunk = words_geometry(ni, nj + rows_lo + rows_hi, inner + lo + hi if any(rows) else inner, f)
    elem = np.dtype(f"u{itemsize}")
    blocks = WORDS_MIN_BLOCKS if a_in == 1 and WORDS_BY_STEP else 0
    kernel = row_words_kernel(f, WORDS_WIDE, blocks, WORDS_PAIRS, a_in if WORDS_BY_STEP else -1, any(rows))
    return ("words", kernel, elem, f, grid, block,
            (o_i, o_j, a_i, a_j, a_in, ni, nj, inner, chunk, lo, hi, rows_lo, rows_hi, elem.type(fill)))
