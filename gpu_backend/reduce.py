"""Reductions over any axes (sum prod max min band bor bxor), in parallel.

Values accumulate in float64 (floats) or int64 (integers and bool), starting
from the reduction's identity in the operand dtype (interp.impls.identity), and
round or wrap once when stored (functions.narrow); float32 max and min fold in
float32 itself, which gives the same bits (`_accumulator`). A call whose
layout was seen before launches through a kept driver launch (`_ready`).
Two ways to spread the work:

- one thread per output when the operand's fastest axis is kept: neighbouring
  threads read neighbouring elements;
- a group of threads per output when the fastest axis is reduced (the whole
  block for a long range, a fraction of it for a short one): the group's
  threads read it side by side, then fold their partials as a shared-memory tree.

Either way the reduced range may be cut into chunks to occupy the GPU when
there are few outputs; the chunks' partials then go through a second pass.
Where the kept axes and the reduced axes each coalesce to one strided run (a
reduction over the inner axis, an outer one, or all), lean kernels do the job
without unravelling indices: _columns (a thread per output, one pass, where
the outputs alone fill the GPU), _total (one output: one launch whose last
block folds the chunks' partials) and _plane (the rest); the general kernels
take what does not coalesce so. On a GPU, a reduction over the contiguous inner axis of
many rows (`_warp_rows`) gives each row a warp: its lanes read the row side by
side (as a copy does) and fold their partials by warp shuffles, with no shared
memory and no block barrier (the simulator has no shuffles: it takes the
group kernel). Where the outputs are x's neighbouring elements and aligned,
the column kernel reads 2 or 4 neighbouring columns a thread by one 8- or
16-byte load (`_wide_columns`, gpu_backend/vectors.py), each column folded in
the same order as one column a thread (the same bits); max and min over all
axes read vectors in `_total` too (their result is the same in any order; a
sum's chunks keep their scalar order). The launch geometry below was chosen by
measurement (benchmarks/kernel_probe.py, benchmarks/RESULTS.md).

Each fixed shape folds in one fixed order (replicas agree bit for bit); the
order differs between kernels and launch shapes, as spec §10 allows.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from math import prod
from typing import Any, NamedTuple

import numpy as np

from gpu_backend import memory, vectors
from gpu_backend.buffer import DeviceBuffer, to_device
from gpu_backend.device import SHARED_ASKS, SIMULATED, THREADS, blocks_for, cuda, fitted, max_blocks
from gpu_backend.functions import BINARY, COMBINE, accumulator, narrow
from gpu_backend.launch import counts, launch, prepared, values
from gpu_backend.memory import Memory
from gpu_backend.strides import Arr, Ints, coalesce, padded, unravel
from interp.impls import identity


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
def _per_thread(kind: str, to_acc: Callable, store: Callable) -> Callable:
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
def _per_block(kind: str, to_acc: Callable, store: Callable, acc_type: type) -> Callable:
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
def _plane(kind: str, to_acc: Callable, store: Callable, acc_type: type, loads: int = 8,
           pairs: bool = False) -> Callable:
    """The common case, kept axes and reduced axes each one strided run: x[o, r]
    at x_off + o * x_out + r * x_red. A group of `width` threads per (output,
    chunk) item, as in _per_block (width 1: a thread per item, neighbouring
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
def _columns(kind: str, to_acc: Callable, store: Callable, loads: int, pairs: bool,
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
    """`_run` over vectors of `lanes` neighbouring elements (gpu_backend/vectors.py):
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
def _wide_columns(kind: str, to_acc: Callable, store: Callable, lanes: int, loads: int, pairs: bool) -> Callable:
    """`_columns` with `lanes` neighbouring columns a thread (x_out == 1), read
    by one vector load per reduced index: each column folds its values in
    `_run`'s order, so its result has the same bits as `_columns`'. The caller
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
def _warp_rows(kind: str, to_acc: Callable, store: Callable, loads: int, pairs: bool) -> Callable:
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
def _total(kind: str, to_acc: Callable, store: Callable, acc_type: type, loads: int, pairs: bool,
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
    run, fold, tree, threads = _run(kind, to_acc, loads, pairs), _run(kind, _same_acc), _tree(kind), THREADS
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
def _same_acc(a: object) -> object:
    return a


@cache
def _scratch(n: int, dtype: np.dtype) -> Any:
    """_total's partials, kept for the next launch of as many chunks (the
    legacy default stream orders the launches, so one buffer serves them all)."""
    return memory.empty(n, dtype)


@cache
def _counter() -> Any:
    """The finishing count of _total's launches (one at a time: the legacy default stream orders them)."""
    return to_device(np.zeros(1, np.int32))


# Launch geometry on a GPU (benchmarks/kernel_probe.py measures the choices):
GROUP_VALUES = 64  # values each thread of a per-block group folds, at least
THREAD_TARGET = 1  # chunks for one thread per output: enough for this many times max_blocks() full blocks
COLUMNS_FROM: int | None = None  # one thread per output, one pass (no chunks), from this many outputs (None: a
# quarter of the threads of max_blocks() full blocks: then the kernel's blocks fit on the GPU at once)
COLUMN_THREADS = THREADS  # the block of that kernel
COLUMN_REGISTERS: int | None = None  # its registers a thread at most (None: the compiler's choice)
MAX_IN_OPERAND = True  # float32 max and min fold in float32 (`_accumulator`)
TOTAL_SPLIT = 1  # `_total` launches max_blocks() // TOTAL_SPLIT blocks at most, each taking chunks in turn
WARP, FULL = 32, 0xFFFFFFFF  # a warp's lanes, and the mask of all of them
WARP_ROWS_FROM: int | None = None  # `_warp_rows` from this many rows (None: a warp each for max_blocks()
# full blocks); never under the simulator
RUN_LOADS = 8  # loads in flight per thread in the plane kernel (8 or 16)
WIDE_LOADS = 16  # the same in the column and one-output kernels
# By kind, the bytes (16 or 8) of neighbouring elements one load reads, where x's dtype, extents and
# alignment allow (`_lanes`), in the column kernel and, for kinds in ORDER_FREE, the one-output kernel;
# a kind not named reads an element a load. A float32 sum's columns measured 15% slower with 16-byte
# loads, 2-3% faster with 8-byte ones (benchmarks/RESULTS.md, "vector loads").
VECTOR_BYTES: dict[str, int] = {"sum": 8, "max": 16, "min": 16}
VECTOR_LOADS = 16  # vector loads in flight per thread of the column kernel (8 or 16)
ORDER_FREE = frozenset({"max", "min"})  # kinds whose result no fold order changes
# The kinds whose runs fold each eight loads as a tree before adding them to the
# accumulator (a chain of four folds, not eight): max and min, whose result is
# the same in any order (a sum's inner fold measured slower so).
PAIRED = frozenset({"max", "min"})


def _warp_rows_from() -> int:
    if SIMULATED:
        return 1 << 62
    return WARP_ROWS_FROM if WARP_ROWS_FROM is not None else max_blocks() * THREADS // WARP


def _group(n_red: int) -> int:
    """Threads folding one output in the per-block kernel: a power of two
    within the block, about GROUP_VALUES values each (a short reduced range
    leaves the block's other threads to other outputs, not idle)."""
    width = 1
    while width * 2 <= min(n_red // GROUP_VALUES, THREADS):
        width *= 2
    return width


def _chunks(n_out: int, n_red: int, width: int) -> int:
    """How many pieces to cut each output's reduced range into (`width`: the
    threads of a per-block group, 0 for one thread per output)."""
    if SIMULATED:
        return 1
    if not width and n_out >= (COLUMNS_FROM or max_blocks() * THREADS // 4):
        return 1
    if width:  # enough groups for the GPU, each thread folding a few dozen values
        return max(1, min(-(-max_blocks() * (THREADS // width) // n_out), n_red // (width * 16)))
    return max(1, min(-(-THREAD_TARGET * max_blocks() * THREADS // n_out), n_red // 64))


@cache
def _unused(dtype: np.dtype) -> Any:
    """The partials argument of a one-pass launch, which no thread touches."""
    return memory.empty(1, dtype)


# One-launch reductions ready to go again, by kind, the memory dtypes and what _plans
# keys on: the driver launch (gpu_backend/launch.py `prepared`), its grid and
# block, and the kernel parameters between out's memory and offset and x's, and
# after x's. A repeated call then costs a dict lookup and the launch: no
# dtype, identity or kernel lookups, no pass over the arguments.
Ready = tuple[Any, Any, int, tuple[Any, ...], tuple[Any, ...]]
_ready: dict[tuple[Any, ...], Ready] = {}


def reduce_into(out: DeviceBuffer, x: DeviceBuffer, dims: tuple[int, ...], kind: str,
                chunks: int | None = None) -> DeviceBuffer:
    """out = kind-reduction of x over `dims`; out's axes are x's other axes, in order."""
    od, xd = out.data, x.data
    key = None
    if type(od) is Memory and type(xd) is Memory:
        key = (kind, od.dtype, xd.dtype, out.shape, out.strides, x.shape, x.strides, dims, chunks,
               (xd.ptr + x.offset * xd.dtype.itemsize) % 16)
        ready = _ready.get(key)
        if ready is not None:
            direct, grid, block, mid, tail = ready
            counts["prepared"] += 1
            direct(grid, block, (*od.packed(), out.offset, *mid, *xd.packed(), x.offset, *tail))
            return out
    acc_dtype, to_acc = _accumulator(kind, x.dtype)
    return _reduce(out, x, dims, kind, acc_dtype.type(identity(kind, x.dtype)), to_acc, chunks, key)


def _accumulator(kind: str, dtype: np.dtype) -> tuple[np.dtype, Callable]:
    """What a reduction folds in: functions.accumulator's type, but float32 max
    and min (MAX_IN_OPERAND) fold in float32 itself: a comparison is exact in
    either type and its result is one of its operands, so the result is the
    same, bit for bit, without a conversion per value (the folds' order is
    unchanged)."""
    if MAX_IN_OPERAND and kind in ("max", "min") and dtype == np.float32:
        return dtype, _same_acc
    return accumulator(dtype)


def _alignment(x: DeviceBuffer) -> int:
    """The byte address of x's first element modulo 16 (what `_lanes` needs to know)."""
    data = x.data
    if type(data) is Memory:
        address = data.ptr
    elif hasattr(data, "__cuda_array_interface__"):
        address = data.__cuda_array_interface__["data"][0]
    else:  # the simulator's array
        address = data._ary.ctypes.data
    return (address + x.offset * data.dtype.itemsize) % 16


def _lanes(itemsize: int, n_out: int, x_out: int, x_red: int, alignment: int, wide: int) -> int:
    """Neighbouring columns a thread of the column kernel reads by one vector
    load of `wide` bytes (else half as many): 4 or 2 where the outputs are x's
    neighbouring elements, their count and the reduced stride are whole
    groups and the first element is aligned to the load; else 1 (a column a
    thread)."""
    if x_out != 1 or not wide:
        return 1
    for size in (wide, wide // 2):
        lanes = size // itemsize
        if lanes in vectors.LANES and not (n_out % lanes or x_red % lanes or alignment % size):
            return lanes
    return 1


def _remember(key: tuple[Any, ...], kernel: Any, plan: _Plan, args: tuple[Any, ...]) -> None:
    """Keep the launch of a one-kernel reduction just made (args: out's memory
    and offset, plan.out_args, x's memory and offset, the rest) for reduce_into."""
    direct = prepared(kernel, args)
    if direct is None:
        return
    if len(_ready) >= PLANS_KEPT:
        _ready.clear()
    n = len(plan.out_args)
    _ready[key] = (direct, plan.grid, plan.block, tuple(values(plan.out_args)), tuple(values(args[4 + n:])))


class _Plan(NamedTuple):
    """_reduce's launch for one layout, all but the data: which kernel (`path`),
    its grid and block, the arguments after out's data and offset and after
    x's, and for a chunked launch the second pass's shape and strides."""

    path: str  # "none", "total", "warp_rows", "columns", "plane", "per_block", "per_thread"
    grid: Any
    block: int
    out_args: tuple[Any, ...]
    x_args: tuple[Any, ...]
    chunks: int
    n_out: int
    group: int  # the plane and per-block kernels' last argument
    kept_shape: tuple[int, ...]
    kept_o: tuple[int, ...]
    lanes: int = 1  # the vector width the column and one-output kernels may read (`_lanes`)


# Plans by out's and x's shapes and strides, the reduced dims and the chunks asked
# for: working one out (coalescing, chunking) costs more Python than its launch.
_plans: dict[tuple[Any, ...], _Plan] = {}
PLANS_KEPT = 4096


def clear_plans() -> None:
    """Forget the plans (after the launch geometry knobs above change)."""
    _plans.clear()
    _ready.clear()


def _plan(out: DeviceBuffer, x: DeviceBuffer, dims: tuple[int, ...], chunks: int | None, alignment: int, wide: int,
          order_free: bool) -> _Plan:
    """The launch (alignment: x's first byte address modulo 16; wide: the
    vector bytes the kind may read; order_free: whether the one-output
    kernel may read vectors, which change the order of its folds)."""
    if out.size == 0:
        return _Plan("none", 0, 0, (), (), 1, 0, 0, (), ())
    kept = [a for a in range(x.ndim) if a not in dims]
    red_shape, (red_x,) = coalesce([x.shape[d] for d in dims], [[x.strides[d] for d in dims]],
                                   [x.strides[d] for d in dims])
    n_red = prod(red_shape)
    moving = [a for a in range(x.ndim) if x.shape[a] > 1]
    fast = min(moving, key=lambda a: abs(x.strides[a]), default=None)
    per_block = n_red >= THREADS and fast in dims
    lead = out.strides if per_block else [x.strides[a] for a in kept]
    kept_shape, (kept_x, kept_o) = coalesce(out.shape, [[x.strides[a] for a in kept], out.strides], lead)
    n_out = prod(kept_shape)
    width = _group(n_red) if per_block else 0
    asked, chunks = chunks, chunks or _chunks(n_out, n_red, width)
    chunk = -(-n_red // chunks) if n_red else 0
    plane = len(red_shape) == 1 and len(kept_shape) == 1
    kept_shape_t, kept_o_t = tuple(kept_shape), tuple(kept_o)
    if plane and n_out == 1 and width == THREADS and chunks > 1:  # one launch: the last block folds the partials
        lanes = _lanes(x.data.dtype.itemsize, n_red, red_x[0], 0, alignment, wide if order_free else 0)
        return _Plan("total", min(chunks, max(1, max_blocks() // TOTAL_SPLIT)), THREADS, (), (red_x[0], n_red),
                     chunks, n_out, 0, kept_shape_t, kept_o_t, lanes)
    if asked is None and plane and per_block and red_x[0] == 1 and n_out >= _warp_rows_from():
        return _Plan("warp_rows", blocks_for(n_out, THREADS // WARP), THREADS, (kept_o[0],), (kept_x[0], n_out, n_red),
                     1, n_out, 0, kept_shape_t, kept_o_t)
    if plane and width == 0 and chunks == 1:
        lanes = _lanes(x.data.dtype.itemsize, n_out, kept_x[0], red_x[0], alignment, wide)
        if lanes > 1:
            groups = n_out // lanes
            threads = fitted(groups, COLUMN_THREADS)
            return _Plan("columns", blocks_for(groups, threads), threads, (kept_o[0],), (red_x[0], groups, n_red),
                         1, n_out, 0, kept_shape_t, kept_o_t, lanes)
        threads = fitted(n_out, COLUMN_THREADS)
        return _Plan("columns", blocks_for(n_out, threads), threads, (kept_o[0],),
                     (kept_x[0], red_x[0], n_out, n_red), 1, n_out, 0, kept_shape_t, kept_o_t)
    if plane:
        group = max(width, 1)
        threads = THREADS if width else fitted(n_out * chunks)
        return _Plan("plane", blocks_for(n_out * chunks, threads // group), threads, (kept_o[0],),
                     (kept_x[0], red_x[0], n_out, n_red, chunks), chunks, n_out, group, kept_shape_t, kept_o_t)
    x_args = (padded(kept_x, 0), padded(kept_shape, 1), n_out, red_shape[-1], red_x[-1], padded(red_shape[:-1], 1),
              padded(red_x[:-1], 0), n_red, chunks, chunk)
    if per_block:
        return _Plan("per_block", blocks_for(n_out * chunks, THREADS // width), THREADS, (padded(kept_o, 0),),
                     x_args, chunks, n_out, width, kept_shape_t, kept_o_t)
    threads = fitted(n_out * chunks)
    return _Plan("per_thread", blocks_for(n_out * chunks, threads), threads, (padded(kept_o, 0),), x_args, chunks,
                 n_out, 0, kept_shape_t, kept_o_t)


def _reduce(out: DeviceBuffer, x: DeviceBuffer, dims: tuple[int, ...], kind: str, ident: np.generic,
            to_acc: Callable, chunks: int | None, ready_key: tuple[Any, ...] | None = None) -> DeviceBuffer:
    """The reduction (ready_key: where to keep a one-kernel launch for reduce_into; None: not kept)."""
    alignment, wide, order_free = _alignment(x), VECTOR_BYTES.get(kind, 0), kind in ORDER_FREE
    key = (out.shape, out.strides, x.shape, x.strides, dims, chunks, alignment, wide, order_free)
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= PLANS_KEPT:
            _plans.clear()
        plan = _plans[key] = _plan(out, x, dims, chunks, alignment, wide, order_free)
    path = plan.path
    if path == "none":
        return out
    acc_dtype, store = np.dtype(type(ident)), narrow(out.dtype)
    head = (out.data, out.offset, *plan.out_args, x.data, x.offset, *plan.x_args, ident)
    chunks = plan.chunks
    if path == "total":
        kernel = _total(kind, to_acc, store, acc_dtype.type, WIDE_LOADS, kind in PAIRED, plan.lanes)
        args = (*head, _scratch(chunks, acc_dtype), _counter(), chunks)
    elif path == "warp_rows":
        kernel, args = _warp_rows(kind, to_acc, store, WIDE_LOADS, kind in PAIRED), head
    elif path == "columns" and plan.lanes > 1:
        kernel, args = _wide_columns(kind, to_acc, store, plan.lanes, VECTOR_LOADS, kind in PAIRED), head
    elif path == "columns":
        kernel, args = _columns(kind, to_acc, store, WIDE_LOADS, kind in PAIRED, COLUMN_REGISTERS), head
    else:
        part = memory.empty(plan.n_out * chunks, acc_dtype) if chunks > 1 else _unused(acc_dtype)
        if path == "plane":
            kernel = _plane(kind, to_acc, store, acc_dtype.type, RUN_LOADS, kind in PAIRED)
            args = (*head, part, plan.group)
        elif path == "per_block":
            kernel, args = _per_block(kind, to_acc, store, acc_dtype.type), (*head, part, plan.group)
        else:
            kernel, args = _per_thread(kind, to_acc, store), (*head, part)
    launch(kernel, plan.grid, plan.block, *args)
    if chunks == 1 or path == "total":  # one kernel: done
        if ready_key is not None:
            _remember(ready_key, kernel, plan, args)
        return out
    # Second pass: the partials, one row of `chunks` per output, into out.
    partials = DeviceBuffer.dense(part, (*plan.kept_shape, chunks))
    target = DeviceBuffer(out.data, out.offset, plan.kept_shape, plan.kept_o)
    _reduce(target, partials, (len(plan.kept_shape),), kind, ident, _accumulator(kind, acc_dtype)[1], 1)
    return out
