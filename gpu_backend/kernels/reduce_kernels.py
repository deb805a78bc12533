"""The reduction kernels and the device-side folds they share, built per kind,
accumulator and store (and cached): gpu_backend/kernels/reduce.py plans each launch
and picks one of them; this file is only what runs on the device.

Two ways to spread the work:

- one thread per output when the operand's fastest axis is kept: neighbouring
  threads read neighbouring elements (`per_thread_kernel`);
- a group of threads per output when the fastest axis is reduced (the whole
  block for a long range, a fraction of it for a short one): the group's
  threads read it side by side, then fold their partials as a shared-memory
  tree (`per_block_kernel`, `_tree`).

Either way the reduced range may be cut into chunks to occupy the GPU when
there are few outputs; the chunks' partials then go through a second pass.
Where the kept axes and the reduced axes each coalesce to one strided run (a
reduction over the inner axis, an outer one, or all), lean kernels do the job
without unravelling indices: `columns_kernel` (a thread per output, one pass),
`total_kernel` (one output: one launch whose last block folds the chunks'
partials) and `plane_kernel` (the rest); the general kernels take what does
not coalesce so. On a GPU, a reduction over the contiguous inner axis of many
rows (`warp_rows_kernel`) gives each row a warp: its lanes read the row side
by side (as a copy does) and fold their partials by warp shuffles, with no
shared memory and no block barrier (the simulator has no shuffles). Where the
outputs are x's neighbouring elements and aligned, `wide_columns_kernel`
reads 2 or 4 neighbouring columns a thread by one 8- or 16-byte load
(`_wide_run`, gpu_backend/kernels/vectors.py), each column folded in the same order
as one column a thread (the same bits); max and min over all axes read
vectors in `total_kernel` too (their result is the same in any order).

Every run of loads folds through `_run` (or `_wide_run`), eight values at a
time by `_fold8`. Each fixed shape folds in one fixed order (replicas agree
bit for bit); the order differs between kernels and launch shapes, as spec §10
allows.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from gpu_backend.device import SHARED_ASKS, SIMULATED, THREADS, cuda
from gpu_backend.kernels import vectors
from gpu_backend.kernels.functions import BINARY, COMBINE
from gpu_backend.kernels.strides import Arr, Ints, unravel

WARP, FULL = 32, 0xFFFFFFFF  # a warp's lanes, and the mask of all of them
ORDER_FREE = frozenset({"max", "min"})  # kinds whose result no fold order changes


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
def per_thread_kernel(kind: str, to_acc: Callable, store: Callable) -> Callable:
    fold = _fold_rows(kind, to_acc)

    @cuda.jit
    def kernel(out: Arr, o_off: int, o_kept: Ints, x: Arr, x_off: int, x_kept: Ints, kept: Ints, n_out: int,
               r_in: int, s_in: int, r_outer: Ints, s_outer: Ints, n_red: int, chunks: int, chunk: int,
               ident: Any, part: Arr) -> None:
        for item in range(cuda.grid(1), n_out * chunks, cuda.gridsize(1)):
            o = item % n_out
            c = item // n_out
            start = c * chunk
            acc = fold(ident, x, x_off + unravel(o, kept, x_kept), start, min(n_red, start + chunk), 0, 1,
                       r_in, s_in, r_outer, s_outer)
            if chunks == 1:
                out[o_off + unravel(o, kept, o_kept)] = store(acc)
            else:
                part[o * chunks + c] = acc

    return kernel


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
def per_block_kernel(kind: str, to_acc: Callable, store: Callable, acc_type: type) -> Callable:
    """A group of `width` threads per output (THREADS // width groups a block):
    the group's threads read its reduced range side by side, then fold their
    partials as a shared-memory tree."""
    fold, tree, threads = _fold_rows(kind, to_acc), _tree(kind), THREADS

    @cuda.jit
    def kernel(out: Arr, o_off: int, o_kept: Ints, x: Arr, x_off: int, x_kept: Ints, kept: Ints, n_out: int,
               r_in: int, s_in: int, r_outer: Ints, s_outer: Ints, n_red: int, chunks: int, chunk: int,
               ident: Any, part: Arr, width: int) -> None:
        for _ in range(SHARED_ASKS):
            partial = cuda.shared.array(threads, acc_type)
            cuda.syncthreads()
        me = cuda.threadIdx.x
        tid, groups = me % width, threads // width
        base = me - tid
        for first in range(cuda.blockIdx.x * groups, n_out * chunks, cuda.gridDim.x * groups):
            item = first + me // width  # every group takes its turn at the tree, with work or without
            if item < n_out * chunks:
                o = item // chunks
                c = item % chunks
                start = c * chunk
                partial[me] = fold(ident, x, x_off + unravel(o, kept, x_kept), start, min(n_red, start + chunk),
                                   tid, width, r_in, s_in, r_outer, s_outer)
            else:
                partial[me] = ident
            cuda.syncthreads()
            tree(partial, base, tid, width)
            if tid == 0 and item < n_out * chunks:
                if chunks == 1:
                    out[o_off + unravel(o, kept, o_kept)] = store(partial[base])
                else:
                    part[o * chunks + c] = partial[base]
            cuda.syncthreads()

    return kernel


@cache
def plane_kernel(kind: str, to_acc: Callable, store: Callable, acc_type: type, loads: int = 8,
           pairs: bool = False) -> Callable:
    """The common case, kept axes and reduced axes each one strided run: x[o, r]
    at x_off + o * x_out + r * x_red. A group of `width` threads per (output,
    chunk) item, as in per_block_kernel (width 1: a thread per item, neighbouring
    threads on neighbouring outputs). Chunk c of an output's range takes the
    indices c * width + tid + k * chunks * width: at each step the groups of an
    output read one contiguous stretch together. Few registers (no unravelling),
    so many threads per SM, each with eight loads in flight."""
    run, tree, threads = _run(kind, to_acc, loads, pairs), _tree(kind), THREADS

    @cuda.jit
    def kernel(out: Arr, o_off: int, o_step: int, x: Arr, x_off: int, x_out: int, x_red: int, n_out: int,
               n_red: int, chunks: int, ident: Any, part: Arr, width: int) -> None:
        for _ in range(SHARED_ASKS):
            partial = cuda.shared.array(threads, acc_type)
            cuda.syncthreads()
        me = cuda.threadIdx.x
        tid, groups = me % width, cuda.blockDim.x // width
        base, total, stride = me - tid, n_out * chunks, chunks * width
        for first in range(cuda.blockIdx.x * groups, total, cuda.gridDim.x * groups):
            item = first + me // width
            acc = ident
            if item < total:
                if width == 1:
                    o = item % n_out
                    c = item // n_out
                else:
                    o = item // chunks
                    c = item - o * chunks
                row = x_off + o * x_out
                acc = run(acc, x, row, c * width + tid, n_red, stride, x_red)
            partial[me] = acc
            cuda.syncthreads()
            tree(partial, base, tid, width)
            if tid == 0 and item < total:
                if chunks == 1:
                    out[o_off + o * o_step] = store(partial[base])
                else:
                    part[o * chunks + c] = partial[base]
            cuda.syncthreads()

    return kernel


@cache
def columns_kernel(kind: str, to_acc: Callable, store: Callable, loads: int, pairs: bool,
             registers: int | None = None) -> Callable:
    """One thread per output, its whole range in one pass (no chunks): the
    plane's width-1 case without the shared tree, so fewer registers and
    every block of a large launch resident at once."""
    run = _run(kind, to_acc, loads, pairs)
    options = {} if registers is None or SIMULATED else {"max_registers": registers}

    @cuda.jit(**options)
    def kernel(out: Arr, o_off: int, o_step: int, x: Arr, x_off: int, x_out: int, x_red: int, n_out: int,
               n_red: int, ident: Any) -> None:
        for o in range(cuda.grid(1), n_out, cuda.gridsize(1)):
            out[o_off + o * o_step] = store(run(ident, x, x_off + o * x_out, 0, n_red, 1, x_red))

    return kernel


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


@cache
def wide_columns_kernel(kind: str, to_acc: Callable, store: Callable, lanes: int, loads: int, pairs: bool) -> Callable:
    """`columns_kernel` with `lanes` neighbouring columns a thread (x_out == 1), read
    by one vector load per reduced index: each column folds its values in
    `_run`'s order, so its result has the same bits as `columns_kernel`'. The caller
    guarantees whole groups (n_out and x_red multiples of `lanes`) and an
    aligned first element (`_lanes`)."""
    run = _wide_run(kind, to_acc, lanes, loads, pairs)

    @cuda.jit
    def kernel(out: Arr, o_off: int, o_step: int, x: Arr, x_off: int, x_red: int, n_groups: int, n_red: int,
               ident: Any) -> None:
        for g in range(cuda.grid(1), n_groups, cuda.gridsize(1)):
            a0, a1, a2, a3 = run(ident, ident, ident, ident, x, x_off + g * lanes, 0, n_red, 1, x_red)
            o = o_off + g * lanes * o_step
            out[o] = store(a0)
            out[o + o_step] = store(a1)
            if lanes == 4:  # with two lanes a2 and a3 are copies: not stored
                out[o + 2 * o_step] = store(a2)
                out[o + 3 * o_step] = store(a3)

    return kernel


@cache
def warp_rows_kernel(kind: str, to_acc: Callable, store: Callable, loads: int, pairs: bool) -> Callable:
    """A warp per output row of a plane whose rows are contiguous (x_red == 1):
    lane l folds the row's values l, l + 32, ... (`loads` in flight), then the
    warp folds its 32 partials by shuffles, halving the live lanes each level;
    lane 0 stores. A row's order is fixed by its length alone. GPU only."""
    run, combine = _run(kind, to_acc, loads, pairs), BINARY[COMBINE[kind]]

    @cuda.jit
    def kernel(out: Arr, o_off: int, o_step: int, x: Arr, x_off: int, x_out: int, n_out: int, n_red: int,
               ident: Any) -> None:
        lane = cuda.threadIdx.x % WARP
        first, step = cuda.grid(1) // WARP, cuda.gridsize(1) // WARP
        for o in range(first, n_out, step):  # the same rows for every lane of a warp: all take the shuffles
            acc = run(ident, x, x_off + o * x_out, lane, n_red, WARP, 1)
            acc = combine(acc, cuda.shfl_down_sync(FULL, acc, 16))
            acc = combine(acc, cuda.shfl_down_sync(FULL, acc, 8))
            acc = combine(acc, cuda.shfl_down_sync(FULL, acc, 4))
            acc = combine(acc, cuda.shfl_down_sync(FULL, acc, 2))
            acc = combine(acc, cuda.shfl_down_sync(FULL, acc, 1))
            if lane == 0:
                out[o_off + o * o_step] = store(acc)

    return kernel


@cache
def total_kernel(kind: str, to_acc: Callable, store: Callable, acc_type: type, loads: int, pairs: bool,
           lanes: int = 1) -> Callable:
    """One output from one strided run, in one launch: chunk c (block c, or,
    with fewer blocks than chunks, blocks taking chunks c, c + gridDim.x, ...
    in turn) folds indices c * THREADS + tid + k * chunks * THREADS (the
    plane's chunk c at full width) into part[c]; the block that finishes the
    last chunk (an atomic count) folds the chunks' partials, thread t taking
    part[t], part[t + THREADS], ..., then the tree (whichever block is last,
    and however many blocks, the same order). It leaves the count at zero for
    the next launch. With `lanes` (2 or 4; max and min only, whose result no
    order changes) the indices are those of vectors of `lanes` neighbouring
    elements (x_red == 1, aligned: `_lanes`), each thread folding its lanes apart and then together."""
    run, fold, tree, threads = _run(kind, to_acc, loads, pairs), _run(kind, same_acc), _tree(kind), THREADS
    wide, combine = _wide_run(kind, to_acc, max(lanes, 2), loads, pairs), BINARY[COMBINE[kind]]
    assert lanes == 1 or kind in ORDER_FREE, "vectors fold a sum in another order"

    @cuda.jit
    def kernel(out: Arr, o_off: int, x: Arr, x_off: int, x_red: int, n_red: int, ident: Any, part: Arr,
               count: Arr, chunks: int) -> None:
        for _ in range(SHARED_ASKS):
            partial = cuda.shared.array(threads, acc_type)
            last = cuda.shared.array(1, np.int32)
            cuda.syncthreads()
        tid = cuda.threadIdx.x
        for c in range(cuda.blockIdx.x, chunks, cuda.gridDim.x):
            if lanes == 1:
                partial[tid] = run(ident, x, x_off, c * threads + tid, n_red, chunks * threads, x_red)
            else:
                a0, a1, a2, a3 = wide(ident, ident, ident, ident, x, x_off, c * threads + tid, n_red // lanes,
                                      chunks * threads, lanes)
                partial[tid] = combine(combine(a0, a1), combine(a2, a3))  # two lanes: a2, a3 copy a0, a1
            cuda.syncthreads()
            tree(partial, 0, tid, threads)
            if tid == 0:
                part[c] = partial[0]
                cuda.threadfence()  # the partial is visible before the count says so
                last[0] = cuda.atomic.add(count, 0, 1) == chunks - 1
            cuda.syncthreads()
            if last[0]:  # the same for every thread of the block
                partial[tid] = fold(ident, part, 0, tid, chunks, threads, 1)
                cuda.syncthreads()
                tree(partial, 0, tid, threads)
                if tid == 0:
                    out[o_off] = store(partial[0])
                    count[0] = 0
            cuda.syncthreads()  # partial and last are read before the next chunk writes them

    return kernel


@cuda.jit(device=True)
def same_acc(a: object) -> object:
    """No conversion: values already in the accumulator's type (partials; float32 max and min)."""
    return a
