"""The reduction kernels, built per kind, accumulator and store (and cached):
gpu_backend/kernels/reduce.py plans each launch and picks one of them; this
file is only what runs on the device, and the device-side folds the kernels
share are in reduce_folds.py.

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

Every run of loads folds through `_run` (or `_wide_run`) of reduce_folds.py.
Each fixed shape folds in one fixed order (replicas agree bit for bit); the
order differs between kernels and launch shapes, as spec §10 allows.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from gpu_backend.device import SIMULATED, THREADS, cuda
from gpu_backend.kernels.functions import BINARY, COMBINE
from gpu_backend.kernels.reduce_folds import _fold_rows, _run, _tree, _wide_run, same_acc  # a mutant patches _tree here
from gpu_backend.kernels.strides import Arr, Ints, unravel

WARP, FULL = 32, 0xFFFFFFFF  # a warp's lanes, and the mask of all of them
ORDER_FREE = frozenset({"max", "min"})  # kinds whose result no fold order changes


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
def per_block_kernel(kind: str, to_acc: Callable, store: Callable, acc_type: type) -> Callable:
    """A group of `width` threads per output (THREADS // width groups a block):
    the group's threads read its reduced range side by side, then fold their
    partials as a shared-memory tree."""
    fold, tree, threads = _fold_rows(kind, to_acc), _tree(kind), THREADS

    @cuda.jit
    def kernel(out: Arr, o_off: int, o_kept: Ints, x: Arr, x_off: int, x_kept: Ints, kept: Ints, n_out: int,
               r_in: int, s_in: int, r_outer: Ints, s_outer: Ints, n_red: int, chunks: int, chunk: int,
               ident: Any, part: Arr, width: int) -> None:
        partial = cuda.shared.array(threads, acc_type)
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
        partial = cuda.shared.array(threads, acc_type)
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
        partial = cuda.shared.array(threads, acc_type)
        last = cuda.shared.array(1, np.int32)
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

