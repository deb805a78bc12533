"""Reductions over any axes (sum prod max min band bor bxor), in parallel: the
planning and launching. Which kernel of gpu_backend/kernels/reduce_kernels.py takes a
layout, with what grid, block, chunks and vector width, is worked out once per
layout (`_plan`, kept in `_plans`); the launch geometry knobs below were chosen
by measurement (benchmarks/kernel_probe.py, benchmarks/RESULTS.md). A call whose
layout was seen before launches through a kept driver launch (`_ready`).

Values accumulate in float64 (floats) or int64 (integers and bool), starting
from the reduction's identity in the operand dtype (interp.impls.identity), and
round or wrap once when stored (functions.narrow); float32 max and min fold in
float32 itself, which gives the same bits (`_accumulator`). A chunked launch's
partials go through a second pass of the same planning (`_reduce`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from math import prod
from typing import Any, NamedTuple

import numpy as np

from gpu_backend.buffers import memory
from gpu_backend.buffers.buffer import DeviceBuffer, to_device
from gpu_backend.buffers.memory import Memory
from gpu_backend.device import SIMULATED, THREADS, blocks_for, fitted, max_blocks
from gpu_backend.kernels import vectors
from gpu_backend.kernels.functions import accumulator, narrow
from gpu_backend.kernels.reduce_folds import same_acc
from gpu_backend.kernels.reduce_kernels import (
    ORDER_FREE,
    WARP,
    columns_kernel,
    per_block_kernel,
    per_thread_kernel,
    plane_kernel,
    total_kernel,
    warp_rows_kernel,
    wide_columns_kernel,
)
from gpu_backend.kernels.strides import coalesce, padded
from gpu_backend.launches import recording
from gpu_backend.launches.launch import KeptLaunches, counts, keep_launch, launch, values
from interp.impls import identity

# Launch geometry on a GPU (benchmarks/kernel_probe.py measures the choices):
GROUP_VALUES = 64  # values each thread of a per-block group folds, at least
THREAD_TARGET = 1  # chunks for one thread per output: enough for this many times max_blocks() full blocks
COLUMNS_FROM: int | None = None  # one thread per output, one pass (no chunks), from this many outputs (None: a
# quarter of the threads of max_blocks() full blocks: then the kernel's blocks fit on the GPU at once)
COLUMN_THREADS = THREADS  # the block of that kernel
COLUMN_REGISTERS: int | None = None  # its registers a thread at most (None: the compiler's choice)
MAX_IN_OPERAND = True  # float32 max and min fold in float32 (`_accumulator`)
TOTAL_SPLIT = 1  # `total_kernel` launches max_blocks() // TOTAL_SPLIT blocks at most, each taking chunks in turn
WARP_ROWS_FROM: int | None = None  # `warp_rows_kernel` from this many rows (None: a warp each for max_blocks()
# full blocks); never under the simulator
RUN_LOADS = 8  # loads in flight per thread in the plane kernel (8 or 16)
WIDE_LOADS = 16  # the same in the column and one-output kernels
# By kind, the bytes (16 or 8) of neighbouring elements one load reads, where x's dtype, extents and
# alignment allow (`_lanes`), in the column kernel and, for kinds in ORDER_FREE, the one-output kernel;
# a kind not named reads an element a load. A float32 sum's columns measured 15% slower with 16-byte
# loads, 2-3% faster with 8-byte ones (benchmarks/RESULTS.md, "vector loads").
VECTOR_BYTES: dict[str, int] = {"sum": 8, "max": 16, "min": 16}
VECTOR_LOADS = 16  # vector loads in flight per thread of the column kernel (8 or 16)
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
def _scratch(n: int, dtype: np.dtype) -> Any:
    """total_kernel's partials, kept for the next launch of as many chunks (the
    legacy default stream orders the launches, so one buffer serves them all)."""
    return memory.empty(n, dtype)


@cache
def _counter() -> Any:
    """The finishing count of total_kernel's launches (one at a time: the legacy default stream orders them)."""
    return to_device(np.zeros(1, np.int32))


@cache
def _unused(dtype: np.dtype) -> Any:
    """The partials argument of a one-pass launch, which no thread touches."""
    return memory.empty(1, dtype)


# One-launch reductions ready to go again, by kind, the memory dtypes and what _plans
# keys on: the driver launch, its grid and block, and the kernel parameters
# between out's memory and offset and x's, and after x's. A repeated call then
# costs a dict lookup and the launch: no dtype, identity or kernel lookups, no
# pass over the arguments.
_ready: KeptLaunches = {}


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
        return dtype, same_acc
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
    n = len(plan.out_args)
    keep_launch(_ready, key, kernel, args, plan.grid, plan.block,
                lambda: (tuple(values(plan.out_args)), tuple(values(args[4 + n:]))))


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
    recording.forget()  # recorded runs (gpu_backend/launches/replay.py) assumed the old plans
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
        kernel = total_kernel(kind, to_acc, store, acc_dtype.type, WIDE_LOADS, kind in PAIRED, plan.lanes)
        args = (*head, _scratch(chunks, acc_dtype), _counter(), chunks)
    elif path == "warp_rows":
        kernel, args = warp_rows_kernel(kind, to_acc, store, WIDE_LOADS, kind in PAIRED), head
    elif path == "columns" and plan.lanes > 1:
        kernel, args = wide_columns_kernel(kind, to_acc, store, plan.lanes, VECTOR_LOADS, kind in PAIRED), head
    elif path == "columns":
        kernel, args = columns_kernel(kind, to_acc, store, WIDE_LOADS, kind in PAIRED, COLUMN_REGISTERS), head
    else:
        part = memory.empty(plan.n_out * chunks, acc_dtype) if chunks > 1 else _unused(acc_dtype)
        if path == "plane":
            kernel = plane_kernel(kind, to_acc, store, acc_dtype.type, RUN_LOADS, kind in PAIRED)
            args = (*head, part, plan.group)
        elif path == "per_block":
            kernel, args = per_block_kernel(kind, to_acc, store, acc_dtype.type), (*head, part, plan.group)
        else:
            kernel, args = per_thread_kernel(kind, to_acc, store), (*head, part)
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
