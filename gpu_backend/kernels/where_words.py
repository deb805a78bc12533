"""`where` over rows of elements narrower than 8 bytes, moved as 8-byte words (gpu_backend/kernels/masks.py
takes it before its element row kernel, where the rows allow).

The attention mask's where (a bool mask [S, S] broadcast over the batch, x [B, S, S],
a scalar y) read its mask a byte a load and x four bytes a load: four load or store
instructions for eight bytes of DRAM traffic an element, and only 32 bytes of x in
flight a thread at eight a round. Here each thread makes whole 8-byte words of the
result: x's word (or its row's value repeated, where x is broadcast along the rows),
y's the same way, and the f cond bytes of the word's f elements read as one f-byte
integer (2 bytes for f32), spread to a mask of whole elements (all ones where the
byte is not 0): out = x & mask | y & ~mask, bits, never values. Eight words a round,
all their loads issued before any store (64 bytes of x in flight a thread), then
rounds of four with the ragged end's loads clamped to the chunk's last word.

Taken where every row is whole words alike: the rows of out, and of each operand read
along them (inner stride 1), start on a word (offsets and outer strides multiples of f
elements, cond's of f bytes) and hold a whole number of words; an operand broadcast
along the rows (inner stride 0) is read once a row. Rows over grid x and y, a long
row in chunks over z (row_words' rows_geometry), kernels made per element width and
per operand's inner stride (0 or 1, a constant).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from gpu_backend.device import cuda
from gpu_backend.kernels.row_words import rows_geometry
from gpu_backend.kernels.strides import Arr

U = np.uint64  # indices as unsigned (no wraparound code); words as unsigned bits
WORD = np.dtype(np.uint64)
ROWS_MIN = 64  # elements a row at least, as masks' row kernel


@cache
def where_words_kernel(f: int, kc: int, kx: int, ky: int) -> Callable:
    """The word kernel for f elements a word, cond's, x's and y's inner strides kc, kx, ky (0 or 1)."""
    bits = 64 // f
    lane = U((1 << bits) - 1)
    rep = U(sum(1 << (q * bits) for q in range(f)))  # 1 in every element's lowest bit

    @cuda.jit(device=True)
    def spread(cw: np.uint64) -> np.uint64:
        """f cond bytes (cw's byte q: element q's) as a mask of whole elements."""
        m = U(0)
        for q in range(f):  # f a constant: unrolled
            if (cw >> U(8 * q)) & U(0xFF):
                m |= lane << U(q * bits)
        return m

    @cuda.jit(device=True)
    def pick(c8: Arr, x8: Arr, y8: Arr, pc: int, px: int, py: int, k: int, m0: np.uint64, x0: np.uint64,
             y0: np.uint64) -> np.uint64:
        """Word k of a row: each operand's word k (from its row's word p.) or its row's repeated value."""
        m = spread(U(c8[U(pc + k)])) if kc else m0
        xv = x8[U(px + k)] if kx else x0
        yv = y8[U(py + k)] if ky else y0
        return (xv & m) | (yv & ~m)

    @cuda.jit
    def where_words(o8: Arr, o_off: int, o_i: int, o_j: int, c8: Arr, c_e: Arr, c_off: int, c_i: int, c_j: int,
                    x8: Arr, x_e: Arr, x_off: int, x_i: int, x_j: int, y8: Arr, y_e: Arr, y_off: int, y_i: int,
                    y_j: int, ni: int, nj: int, nw: int, chunk: int) -> None:
        """Row (i, j) of nw words: o8's from word o_off + i o_i + j o_j; each operand's place
        the same way, in words where read along the row (its k 1; c8 holds f cond bytes a
        word), else in elements of its element view (the row's one value)."""
        bx = cuda.blockDim.x
        for i in range(cuda.blockIdx.x, ni, cuda.gridDim.x):
            for j in range(cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y, nj, cuda.gridDim.y * cuda.blockDim.y):
                po = o_off + i * o_i + j * o_j
                pc = c_off + i * c_i + j * c_j
                px = x_off + i * x_i + j * x_j
                py = y_off + i * y_i + j * y_j
                m0 = (U(0) if kc or c_e[U(pc)] == 0 else ~U(0))  # broadcast operands: read once a row
                x0 = U(0) if kx else U(x_e[U(px)]) * rep
                y0 = U(0) if ky else U(y_e[U(py)]) * rep
                k1 = min(cuda.blockIdx.z * chunk + chunk, nw)
                k = cuda.blockIdx.z * chunk + cuda.threadIdx.x
                while k + 7 * bx < k1:  # eight words a round, every load before any store
                    v0 = pick(c8, x8, y8, pc, px, py, k, m0, x0, y0)
                    v1 = pick(c8, x8, y8, pc, px, py, k + bx, m0, x0, y0)
                    v2 = pick(c8, x8, y8, pc, px, py, k + 2 * bx, m0, x0, y0)
                    v3 = pick(c8, x8, y8, pc, px, py, k + 3 * bx, m0, x0, y0)
                    v4 = pick(c8, x8, y8, pc, px, py, k + 4 * bx, m0, x0, y0)
                    v5 = pick(c8, x8, y8, pc, px, py, k + 5 * bx, m0, x0, y0)
                    v6 = pick(c8, x8, y8, pc, px, py, k + 6 * bx, m0, x0, y0)
                    v7 = pick(c8, x8, y8, pc, px, py, k + 7 * bx, m0, x0, y0)
                    o8[U(po + k)] = v0
                    o8[U(po + k + bx)] = v1
                    o8[U(po + k + 2 * bx)] = v2
                    o8[U(po + k + 3 * bx)] = v3
                    o8[U(po + k + 4 * bx)] = v4
                    o8[U(po + k + 5 * bx)] = v5
                    o8[U(po + k + 6 * bx)] = v6
                    o8[U(po + k + 7 * bx)] = v7
                    k += 8 * bx
                last = k1 - 1
                while k < k1:  # rounds of four (at most two), the loads past the chunk clamped to its last word
                    v0 = pick(c8, x8, y8, pc, px, py, k, m0, x0, y0)
                    v1 = pick(c8, x8, y8, pc, px, py, min(k + bx, last), m0, x0, y0)
                    v2 = pick(c8, x8, y8, pc, px, py, min(k + 2 * bx, last), m0, x0, y0)
                    v3 = pick(c8, x8, y8, pc, px, py, min(k + 3 * bx, last), m0, x0, y0)
                    o8[U(po + k)] = v0
                    if k + bx < k1:
                        o8[U(po + k + bx)] = v1
                    if k + 2 * bx < k1:
                        o8[U(po + k + 2 * bx)] = v2
                    if k + 3 * bx < k1:
                        o8[U(po + k + 3 * bx)] = v3
                    k += 4 * bx

    return where_words


def _aligned(offset: int, st: list[int], f: int) -> bool:
    """Whether rows at `offset` (outer strides st[:-1]) all start on a word of f elements."""
    return offset % f == 0 and all(s % f == 0 for s in st[:-1])


def where_words_plan(size: int, offsets: list[int], walk: list[int], strides: list[list[int]]) -> tuple | None:
    """(kernel, grid, block, recipes, tail) (gpu_backend/kernels/recipes.py) for where's coalesced
    rows of elements of `size` bytes (out, cond, x, y at these element offsets, each with its
    strides of `strides` along `walk`), or None where the rows are not whole words alike (the
    module's docstring). Its recipes: out's memory as words; each operand's as words and as
    elements (cond's as f-byte words and bytes), its places in words where read along the
    rows, in elements where broadcast along them."""
    if size > 4 or len(walk) > 3 or walk[-1] < ROWS_MIN:
        return None
    f = 8 // size
    if walk[-1] % f or strides[0][-1] != 1 or not _aligned(offsets[0], strides[0], f):
        return None
    if any(st[-1] not in (0, 1) or (st[-1] == 1 and not _aligned(o, st, f)) for o, st in zip(offsets[1:], strides[1:])):
        return None
    pad = 3 - len(walk)
    ni, nj, inner = [1] * pad + walk
    st = [[0] * pad + s for s in strides]
    grid, block, chunk = rows_geometry(ni, nj, inner // f)
    elem = np.dtype(f"u{size}")
    recipes: list[tuple] = [((WORD,), f, (st[0][0] // f, st[0][1] // f))]
    for s, words in ((st[1], (np.dtype(f"u{f}"), np.dtype(np.uint8))), (st[2], (WORD, elem)), (st[3], (WORD, elem))):
        recipes.append((words, f, (s[0] // f, s[1] // f)) if s[2] == 1 else (words, 1, (s[0], s[1])))
    kernel = where_words_kernel(f, *[s[2] for s in st[1:]])
    return kernel, grid, block, tuple(recipes), (ni, nj, inner // f, chunk)
