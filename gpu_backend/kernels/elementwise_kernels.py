"""The elementwise kernels, built per function (and cached): out[i] = fn(x[i], ...)
over buffers of any strides. gpu_backend/kernels/elementwise.py plans each launch (which
kernel, its grid and block, the strides it takes) and launches it, for
elementwise ops and for the row copies of copy_into; this file is only what
runs on the device, and the geometry of the walk its general kernels decode.

The general kernel (`map_kernel`, of one or two operands) walks the result's
memory order, its innermost axis along threadIdx.x (coalesced writes, and
coalesced reads of operands laid out alike), unravelling the outer axes once
per work item of many elements. Two common shapes get lean kernels (few registers, no
division per element): operands that are one unit-stride run each
(`dense1_kernel`, `dense2_kernel`: a plain grid-stride loop), and unit-stride
rows at two strided outer axes (`rows1_kernel`: a permute that keeps the
innermost axis). Every kernel has each thread load several elements before
it stores or uses any, so that the loads are in flight together.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from gpu_backend.device import ITEM_ROWS, UNROLL, cuda, jit_options
from gpu_backend.kernels.strides import Arr, Ints, unravel

# The walk: [outer..., mid, inner] in the result's memory order. A work item is
# `span` elements of one inner row (threadIdx.x side by side), or, where rows
# are shorter than that, `span` elements' worth of consecutive rows: the outer
# index is unravelled once per item, never per element.


@cuda.jit(device=True)
def _item(item: int, walk: Ints) -> tuple[int, int, int, int, int]:
    """Work item -> (outer row, first and end mid index, first and end inner index)."""
    mid, inner, span, per_item, items_mid, items_in = walk[0], walk[1], walk[2], walk[3], walk[4], walk[5]
    c = item % items_in
    q = item // items_in
    m0 = q % items_mid * per_item
    return q // items_mid, m0, min(m0 + per_item, mid), c * span, min(c * span + span, inner)


def walk_geometry(rows: int, mid: int, inner: int, bx: int) -> tuple[tuple[int, ...], int]:
    """The walk's geometry for the kernels, and its number of work items."""
    span = bx * ITEM_ROWS
    items_in = -(-inner // span)
    per_item = max(1, span // inner) if items_in == 1 else 1
    items_mid = -(-mid // per_item)
    return (mid, inner, span, per_item, items_mid, items_in), rows * items_mid * items_in


# Each thread loads UNROLL elements (block widths apart) before it stores any:
# a GPU thread stalls only where it first uses a loaded value, so the loads are
# in flight together. (One load, then its store, in turn, leaves the memory
# system idle for most of each round trip.)
assert UNROLL == 4, "the elementwise kernels spell out four loads"

# The lean kernels index with unsigned ints: numba wraps a signed index that is negative
# (three instructions an access: a shift, an and, an add), an unsigned one not. Their
# indices are element places, never negative (a negative stride's walk starts at its
# highest place); the cast itself costs nothing.
U = np.uint64


# The one-operand kernels apply `fn(value, scalar)`: `scalar` is a kernel
# argument (a binary op's Python scalar, gpu_backend/kernels/scalars.py), or an unused
# 0 for a unary function (`elementwise` wraps it with `ignoring_scalar`).


@cache
def ignoring_scalar(fn: Callable) -> Callable:
    @cuda.jit(device=True)
    def apply(a: object, scalar: object) -> object:
        return fn(a)

    return apply


# One walk serves both operand counts: fn's second argument, `b`, is a second
# array read at the element's place (two operands) or the one-operand kernel's
# scalar, the same for every element. Which, is a constant of the closure
# (`two`): numba prunes the branch not taken before typing, so each kernel
# compiles to the PTX it had when spelled out alone (benchmarks/kernel_ptx.py).
# Device functions for b's loads instead cost 20-45% more compile time a
# kernel and moved one of its loads; inlined by numba (the same PTX), 50-70%.


def _walk(fn: Callable, two: bool) -> Callable:
    """The general walk: out[...] = fn(a[...], b[...] if `two` else b)."""

    def walk_items(out: Arr, o_off: int, o_outer: Ints, o_mid: int, o_in: int,
                   a: Arr, a_off: int, a_outer: Ints, a_mid: int, a_in: int,
                   b: object, b_off: int, b_outer: Ints, b_mid: int, b_in: int,
                   outer: Ints, walk: Ints, items: int) -> None:
        bx = cuda.blockDim.x
        for item in range(cuda.blockIdx.x * cuda.blockDim.y + cuda.threadIdx.y, items,
                          cuda.gridDim.x * cuda.blockDim.y):
            row, m0, m1, j0, j1 = _item(item, walk)
            o = o_off + unravel(row, outer, o_outer)
            p = a_off + unravel(row, outer, a_outer)
            q = b_off + unravel(row, outer, b_outer) if two else 0
            for m in range(m0, m1):
                om, pm, qm = o + m * o_mid, p + m * a_mid, q + m * b_mid
                j = j0 + cuda.threadIdx.x
                while j + 3 * bx < j1:
                    v0, v1 = a[pm + j * a_in], a[pm + (j + bx) * a_in]
                    v2, v3 = a[pm + (j + 2 * bx) * a_in], a[pm + (j + 3 * bx) * a_in]
                    if two:
                        w0, w1 = b[qm + j * b_in], b[qm + (j + bx) * b_in]
                        w2, w3 = b[qm + (j + 2 * bx) * b_in], b[qm + (j + 3 * bx) * b_in]
                    else:
                        w0 = w1 = w2 = w3 = b
                    out[om + j * o_in] = fn(v0, w0)
                    out[om + (j + bx) * o_in] = fn(v1, w1)
                    out[om + (j + 2 * bx) * o_in] = fn(v2, w2)
                    out[om + (j + 3 * bx) * o_in] = fn(v3, w3)
                    j += 4 * bx
                while j < j1:
                    out[om + j * o_in] = fn(a[pm + j * a_in], b[qm + j * b_in] if two else b)
                    j += bx

    return walk_items


@cache
def map_kernel(fn: Callable, operands: int) -> Callable:
    """The general kernel of one or two operands: out[i] = fn(a[i], scalar) or
    fn(a[i], b[i]). Its parameters are each buffer's (data, offset, outer
    strides, mid stride, inner stride), then the walk's (outer shape, geometry,
    work items), then for one operand the scalar. The two-operand kernel is the
    walk; the one-operand kernel calls it with the scalar in b's place (its
    parameters come in another order, and numba's kernels take no *args): the
    same PTX but for an unused status word, at a fifth more compile time than
    a one-operand kernel spelled out, half of it the call, half the walk's
    pruned branches (benchmarks/walk_compile.py; benchmarks/RESULTS.md)."""
    if operands == 2:
        return cuda.jit(_walk(fn, True))
    if operands == 1:
        walk_items = cuda.jit(device=True)(_walk(fn, False))

        @cuda.jit
        def one(out: Arr, o_off: int, o_outer: Ints, o_mid: int, o_in: int,
                a: Arr, a_off: int, a_outer: Ints, a_mid: int, a_in: int, outer: Ints, walk: Ints, items: int,
                c: object) -> None:
            walk_items(out, o_off, o_outer, o_mid, o_in, a, a_off, a_outer, a_mid, a_in, c, 0, outer, 0, 0,
                       outer, walk, items)

        return one
    raise ValueError(f"the elementwise kernels take one or two operands, not {operands}")


# The dense case: every operand one unit-stride run (after coalesce), walked by a
# plain grid-stride loop: no index arithmetic beyond an add per element.


@cache
def _four(fn: Callable) -> Callable:
    @cuda.jit(device=True)
    def four(out: Arr, po: int, a: Arr, pa: int, k: int, bx: int, c: object) -> None:
        """out[po + k + q bx] = fn(a[pa + k + q bx], c) for q < 4, all four loads first."""
        p, q = pa + k, po + k  # indices as unsigned (U): no wraparound code for negative ones
        v0, v1, v2, v3 = a[U(p)], a[U(p + bx)], a[U(p + 2 * bx)], a[U(p + 3 * bx)]
        out[U(q)] = fn(v0, c)
        out[U(q + bx)] = fn(v1, c)
        out[U(q + 2 * bx)] = fn(v2, c)
        out[U(q + 3 * bx)] = fn(v3, c)

    return four


@cache
def dense1_kernel(fn: Callable) -> Callable:
    four = _four(fn)

    @cuda.jit
    def kernel(out: Arr, o_off: int, a: Arr, a_off: int, n: int, c: object) -> None:
        bx = cuda.blockDim.x
        i = cuda.blockIdx.x * bx * 4 + cuda.threadIdx.x
        step = cuda.gridDim.x * bx * 4
        while i + 3 * bx < n:
            four(out, o_off, a, a_off, i, bx, c)
            i += step
        while i < n:  # the ragged end: what is left of this thread's last four
            out[U(o_off + i)] = fn(a[U(a_off + i)], c)
            i += bx

    return kernel


@cache
def dense2_kernel(fn: Callable) -> Callable:
    @cuda.jit
    def kernel(out: Arr, o_off: int, a: Arr, a_off: int, b: Arr, b_off: int, n: int) -> None:
        bx = cuda.blockDim.x
        i = cuda.blockIdx.x * bx * 4 + cuda.threadIdx.x
        step = cuda.gridDim.x * bx * 4
        while i + 3 * bx < n:
            v0, v1, v2, v3 = a[a_off + i], a[a_off + i + bx], a[a_off + i + 2 * bx], a[a_off + i + 3 * bx]
            w0, w1, w2, w3 = b[b_off + i], b[b_off + i + bx], b[b_off + i + 2 * bx], b[b_off + i + 3 * bx]
            out[o_off + i] = fn(v0, w0)
            out[o_off + i + bx] = fn(v1, w1)
            out[o_off + i + 2 * bx] = fn(v2, w2)
            out[o_off + i + 3 * bx] = fn(v3, w3)
            i += step
        while i < n:
            out[o_off + i] = fn(a[a_off + i], b[b_off + i])
            i += bx

    return kernel


def rows1_kernel(fn: Callable, min_blocks: int = 0) -> Callable:
    """Unit-stride rows at two strided outer axes (i, j): a permute that keeps
    the innermost axis. Blocks stride over i on x and over j on y, threads
    along the row four elements apart: no division anywhere. `min_blocks`:
    blocks of THREADS an SM asked of the compiler (launch bounds), 0 none
    (48 registers for a copy, five blocks an SM; 6 and 8 spill 44-80 bytes:
    benchmarks/kernel_probe.py `layer` times them)."""
    return _rows1(fn, min_blocks)


@cache
def _rows1(fn: Callable, min_blocks: int) -> Callable:
    four = _four(fn)

    @cuda.jit(**jit_options(min_blocks))
    def kernel(out: Arr, o_off: int, o_i: int, o_j: int, a: Arr, a_off: int, a_i: int, a_j: int,
               ni: int, nj: int, inner: int, c: object) -> None:
        bx = cuda.blockDim.x
        for i in range(cuda.blockIdx.x, ni, cuda.gridDim.x):
            for j in range(cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y, nj,
                           cuda.gridDim.y * cuda.blockDim.y):
                po, pa = o_off + i * o_i + j * o_j, a_off + i * a_i + j * a_j
                k = cuda.threadIdx.x
                while k + 3 * bx < inner:
                    four(out, po, a, pa, k, bx, c)
                    k += 4 * bx
                if k < inner:  # the ragged end: its loads together too, indices clamped to the row
                    last = inner - 1
                    v0, v1 = a[U(pa + k)], a[U(pa + min(k + bx, last))]
                    v2, v3 = a[U(pa + min(k + 2 * bx, last))], a[U(pa + min(k + 3 * bx, last))]
                    out[U(po + k)] = fn(v0, c)
                    if k + bx < inner:
                        out[U(po + k + bx)] = fn(v1, c)
                    if k + 2 * bx < inner:
                        out[U(po + k + 2 * bx)] = fn(v2, c)
                    if k + 3 * bx < inner:
                        out[U(po + k + 3 * bx)] = fn(v3, c)

    return kernel
