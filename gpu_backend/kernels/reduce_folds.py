"""The device-side folds the reduction kernels (reduce_kernels.py) share,
built per kind and accumulator (and cached); only what runs on the device.

Every run of loads folds through `_run`, or `_wide_run` over vectors of 2 or 4
neighbouring elements (gpu_backend/kernels/vectors.py), each lane in `_run`'s
order; both fold eight values at a time by `_fold8` (in index order, or with
`pairs` as a tree first). `_fold_rows` walks a general kernel's reduced rows
through `_run`, `_tree` folds a group's shared partials, and `same_acc` is the
conversion of values already in the accumulator's type. Each fixed shape folds
in one fixed order (replicas agree bit for bit).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from gpu_backend.device import cuda
from gpu_backend.kernels import vectors
from gpu_backend.kernels.functions import BINARY, COMBINE
from gpu_backend.kernels.strides import Arr, Ints, unravel


@cache
def _run(kind: str, to_acc: Callable, loads: int = 8, pairs: bool = False) -> Callable:
    combine, fold8 = BINARY[COMBINE[kind]], _fold8(kind, to_acc, pairs)
    assert loads in (8, 16), "the runs spell out eight or sixteen loads"

    @cuda.jit(device=True)
    def run(acc: Any, x: Arr, row: int, k: int, stop: int, step: int, stride: int) -> Any:
        """Fold x[row + j * stride] for j = k, k + step, ... below `stop`.
        `loads` loads go out before the first is folded (latency hidden), and
        are folded eight at a time by `_fold8`: in index order, one at a time,
        or with `pairs`, each eight as a tree first (a shorter chain of
        dependent folds)."""
        d = step * stride
        while k + (loads - 1) * step < stop:
            p = row + k * stride
            v0, v1, v2, v3 = x[p], x[p + d], x[p + 2 * d], x[p + 3 * d]
            v4, v5, v6, v7 = x[p + 4 * d], x[p + 5 * d], x[p + 6 * d], x[p + 7 * d]
            if loads == 16:
                w0, w1, w2, w3 = x[p + 8 * d], x[p + 9 * d], x[p + 10 * d], x[p + 11 * d]
                w4, w5, w6, w7 = x[p + 12 * d], x[p + 13 * d], x[p + 14 * d], x[p + 15 * d]
            acc = fold8(acc, v0, v1, v2, v3, v4, v5, v6, v7)
            if loads == 16:
                acc = fold8(acc, w0, w1, w2, w3, w4, w5, w6, w7)
            k += loads * step
        while k < stop:
            acc = combine(acc, to_acc(x[row + k * stride]))
            k += step
        return acc

    return run


@cache
def _fold_rows(kind: str, to_acc: Callable) -> Callable:
    run = _run(kind, to_acc)

    @cuda.jit(device=True)
    def fold(acc: Any, x: Arr, base: int, start: int, end: int, first: int, step: int, r_in: int, s_in: int,
             r_outer: Ints, s_outer: Ints) -> Any:
        """Fold x over reduced indices [start, end) (row-major over r_outer x
        r_in); this thread takes every `step`-th from `first` within each row
        (`run` folds each row's stretch, eight loads in flight)."""
        r = start
        while r < end:
            ro = r // r_in
            stop = min(end - ro * r_in, r_in)
            row = base + (unravel(ro, r_outer, s_outer) if ro else 0)
            acc = run(acc, x, row, r - ro * r_in + first, stop, step, s_in)
            r = ro * r_in + stop
        return acc

    return fold


@cache
def _tree(kind: str, last: int = 1) -> Callable:
    """`last`: the width of the last level folded (1; a conformance mutant stops at 2)."""
    combine = BINARY[COMBINE[kind]]

    @cuda.jit(device=True)
    def tree(partial: Arr, base: int, tid: int, width: int) -> None:
        """Fold a group's `width` shared partials, partial[base:base + width],
        into partial[base]: log2(width) levels, each halving the live ones.
        Every group of the block runs the same levels (they share syncthreads)."""
        s = width // 2
        while s >= last:
            if tid < s:
                partial[base + tid] = combine(partial[base + tid], partial[base + tid + s])
            cuda.syncthreads()
            s //= 2

    return tree


@cache
def _fold8(kind: str, to_acc: Callable, pairs: bool) -> Callable:
    """acc folded with eight values in index order (one at a time, or with
    `pairs` as a tree first): how `_run` and `_wide_run` fold eight loads."""
    combine = BINARY[COMBINE[kind]]

    @cuda.jit(device=True)
    def fold8(acc: Any, v0: Any, v1: Any, v2: Any, v3: Any, v4: Any, v5: Any, v6: Any, v7: Any) -> Any:
        if pairs:
            u0 = combine(combine(to_acc(v0), to_acc(v1)), combine(to_acc(v2), to_acc(v3)))
            u1 = combine(combine(to_acc(v4), to_acc(v5)), combine(to_acc(v6), to_acc(v7)))
            return combine(acc, combine(u0, u1))
        acc = combine(acc, to_acc(v0))
        acc = combine(acc, to_acc(v1))
        acc = combine(acc, to_acc(v2))
        acc = combine(acc, to_acc(v3))
        acc = combine(acc, to_acc(v4))
        acc = combine(acc, to_acc(v5))
        acc = combine(acc, to_acc(v6))
        return combine(acc, to_acc(v7))

    return fold8


@cache
def _wide_run(kind: str, to_acc: Callable, lanes: int, loads: int, pairs: bool) -> Callable:
    """`_run` over vectors of `lanes` neighbouring elements (gpu_backend/kernels/vectors.py):
    lane j of the vectors at x[p + k * stride] for k = k, k + step, ... below
    `stop` folds into a_j, each lane in `_run`'s order (`loads`, 8 or 16, in
    flight). With two lanes a2 and a3 fold copies of a0's and a1's values."""
    combine, load, fold8 = BINARY[COMBINE[kind]], vectors.loader(lanes), _fold8(kind, to_acc, pairs)
    assert loads in (8, 16), "eight or sixteen loads in flight"

    @cuda.jit(device=True)
    def run(a0: Any, a1: Any, a2: Any, a3: Any, x: Arr, p: int, k: int, stop: int, step: int,
            stride: int) -> tuple[Any, Any, Any, Any]:
        d = step * stride
        while k + (loads - 1) * step < stop:
            q = p + k * stride
            v0, v1, v2, v3 = load(x, q), load(x, q + d), load(x, q + 2 * d), load(x, q + 3 * d)
            v4, v5, v6, v7 = load(x, q + 4 * d), load(x, q + 5 * d), load(x, q + 6 * d), load(x, q + 7 * d)
            if loads == 16:
                q += 8 * d
                w0, w1, w2, w3 = load(x, q), load(x, q + d), load(x, q + 2 * d), load(x, q + 3 * d)
                w4, w5, w6, w7 = load(x, q + 4 * d), load(x, q + 5 * d), load(x, q + 6 * d), load(x, q + 7 * d)
            a0 = fold8(a0, v0[0], v1[0], v2[0], v3[0], v4[0], v5[0], v6[0], v7[0])
            a1 = fold8(a1, v0[1], v1[1], v2[1], v3[1], v4[1], v5[1], v6[1], v7[1])
            a2 = fold8(a2, v0[2], v1[2], v2[2], v3[2], v4[2], v5[2], v6[2], v7[2])
            a3 = fold8(a3, v0[3], v1[3], v2[3], v3[3], v4[3], v5[3], v6[3], v7[3])
            if loads == 16:
                a0 = fold8(a0, w0[0], w1[0], w2[0], w3[0], w4[0], w5[0], w6[0], w7[0])
                a1 = fold8(a1, w0[1], w1[1], w2[1], w3[1], w4[1], w5[1], w6[1], w7[1])
                a2 = fold8(a2, w0[2], w1[2], w2[2], w3[2], w4[2], w5[2], w6[2], w7[2])
                a3 = fold8(a3, w0[3], w1[3], w2[3], w3[3], w4[3], w5[3], w6[3], w7[3])
            k += loads * step
        while k < stop:  # the rest one index at a time, as `_run`'s tail
            v = load(x, p + k * stride)
            a0, a1 = combine(a0, to_acc(v[0])), combine(a1, to_acc(v[1]))
            a2, a3 = combine(a2, to_acc(v[2])), combine(a3, to_acc(v[3]))
            k += step
        return a0, a1, a2, a3

    return run


@cuda.jit(device=True)
def same_acc(a: object) -> object:
    """No conversion: values already in the accumulator's type (partials; float32 max and min)."""
    return a
