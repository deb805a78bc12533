"""Elementwise ops and copies over buffers of any strides: the planning and
launching (the elementwise kernels themselves: gpu_backend/kernels/elementwise_kernels.py).

An elementwise launch is worked out once per layout (`_plan`, kept in
`_plans`): operands coalesced to one unit-stride run each take the dense
kernels, unit-stride rows at two strided outer axes the row kernel, the rest
the general walk over the result's memory order. Shapes and strides travel as
int tuples, padded to a multiple of four axes so that each kernel compiles
for few ranks (gpu_backend/kernels/strides.py). A copy (`copy_into`) between buffers
dense alike is the driver's memcpy; between buffers that keep one innermost
axis, the elementwise row kernels (as 8-byte words where the rows align), or
where they do not align alike, are broadcast along the rows or step by two 4-byte
elements, gpu_backend/kernels/row_words.py's aligned 8-byte words on both sides;
between buffers whose fastest axes differ, gpu_backend/kernels/transpose.py's
shared-memory tile, so both its reads and its writes are coalesced. Between
pooled Memory, launches are kept ready per layout (`_ready_maps`,
`_ready_copies`). Launch shapes (tile, threads, grids) were chosen by
measurement: benchmarks/kernel_probe.py, benchmarks/RESULTS.md.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from math import prod

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.buffers.memory import Memory
from gpu_backend.device import SIMULATED, blocks_for, cuda, fitted, max_blocks, rows_block
from gpu_backend.kernels.elementwise_kernels import (
    dense1_kernel,
    dense2_kernel,
    ignoring_scalar,
    map_kernel,
    rows1_kernel,
    walk_geometry,
)
from gpu_backend.kernels.row_words import WORD, many_rows, words_plan
from gpu_backend.kernels.strides import Arr, coalesce, padded
from gpu_backend.kernels.transpose import clear_plans as clear_transpose_plans
from gpu_backend.kernels.transpose import transpose_plan
from gpu_backend.launches import recording
from gpu_backend.launches.driver_launch import copy_bytes
from gpu_backend.launches.launch import KeptLaunches, counts, keep_launch, launch, values

# ---- elementwise: out[i] = fn(x[i], ...) --------------------------------------------

# The dense kernels' grids, one and two operands: at most this many times
# max_blocks() (benchmarks/kernel_probe.py). The simulator, where every thread
# is a Python thread, keeps its two small blocks.
DENSE1_BLOCKS = 1 if SIMULATED else 16
DENSE2_BLOCKS = 1 if SIMULATED else 1 << 20
# The row kernel's narrowest rows of threads: short rows (a head's 64 words) take a
# quarter or half warp each, so that every thread still loads four elements at once.
ROWS1_LEAST = 8
# The row kernel's two outer axes as the result's memory order has them (a block's rows next to each
# other in the result: a heads reshape reads them from H places); True: swapped where the source's
# inner one is the farther apart, so a block reads neighbouring rows and writes them apart
# (benchmarks/kernel_probe.py `layer` compares: on the H200 the heads reshape ran at 89.6% of the copy
# swapped, 85.4% not).
ROWS1_SWAP = True
ROWS1_MIN_BLOCKS = 0  # the row kernel's launch bounds (blocks an SM; 0 none: 48 registers, five blocks)


# What elementwise launches for one call, by everything it depends on but the
# data: the kernel, its grid and block, the arguments that follow each buffer's
# data and offset, and the arguments after the last buffer's. Working it out
# (coalescing axes, padding strides, the walk) costs more Python than the
# launch itself; a program repeats its shapes run after run.
Plan = tuple[Callable, object, object, tuple[tuple[object, ...], ...], tuple[object, ...]]
_plans: dict[tuple[object, ...], Plan] = {}
PLANS_KEPT = 4096  # then the cache starts again (programs of many shapes)


def clear_plans() -> None:
    """Forget the elementwise and copy plans (after the launch geometry knobs change)."""
    recording.forget()  # recorded runs (gpu_backend/launches/replay.py) assumed the old plans
    _plans.clear()
    _ready_maps.clear()
    _copies.clear()
    _ready_copies.clear()
    _ready_words.clear()
    clear_transpose_plans()


# Elementwise launches between pooled Memory ready to go again, by the function,
# the scalar's type and each buffer's shape, strides and dtype: the driver
# launch, its grid and block, each buffer's parameters after its memory and
# offset, and those after the last buffer's (the scalar, if any, follows them).
# A repeated call costs a dict lookup and the launch, as a kept copy does.
_ready_maps: KeptLaunches = {}


def elementwise(fn: Callable, out: DeviceBuffer, *xs: DeviceBuffer, scalar: object = None) -> DeviceBuffer:
    """out = fn(*xs) element by element; operands broadcast to out's shape. With
    `scalar` (one operand): out = fn(x, scalar), the scalar a kernel argument."""
    if len(xs) != 1 and scalar is not None:
        raise TypeError("a scalar goes with one operand")
    buffers = (out, *xs)
    key = None
    if all(type(b.data) is Memory for b in buffers):  # raw addresses: a kept launch can take them
        key = (fn, type(scalar), *[v for b in buffers for v in (b.shape, b.strides, b.data.dtype.char)])
        ready = _ready_maps.get(key)
        if ready is not None:
            direct, grid, block, consts, tail = ready
            params: list[object] = []
            for b, c in zip(buffers, consts):  # type: ignore[call-overload]
                d = b.data
                n, size = d.size, d.dtype.itemsize
                params += (0, 0, n, size, d.ptr, n, size, b.offset, *c)
            params += tail  # type: ignore[arg-type]
            if len(xs) == 1:
                params.append(0 if scalar is None else scalar)
            counts["prepared"] += 1
            direct(grid, block, params)  # type: ignore[operator]
            return out
    plan, args = _launch_args(fn, out, xs, scalar)
    if plan[0] is not None:
        launch(plan[0], plan[1], plan[2], *args)
        if key is not None:
            kernel, grid, block, per_buffer, tail = plan
            keep_launch(_ready_maps, key, kernel, args, grid, block,
                        lambda: (tuple(tuple(values(c)) for c in per_buffer), tuple(values(tail))))
    return out


def _launch_args(fn: Callable, out: DeviceBuffer, xs: tuple[DeviceBuffer, ...], scalar: object) -> tuple[Plan, tuple]:
    """elementwise's plan (kept per layout) and its kernel's arguments for these buffers."""
    key = (fn, scalar is None, out.shape, out.strides, *[v for x in xs for v in (x.shape, x.strides)])
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= PLANS_KEPT:
            _plans.clear()
        plan = _plans[key] = _plan(fn, out, xs, scalar is not None)
    kernel, grid, block, per_buffer, tail = plan
    if kernel is None:  # nothing to compute
        return plan, ()
    args: list[object] = []
    for b, consts in zip((out, *xs), per_buffer):
        args += (b.data, b.offset, *consts)
    if len(xs) == 1:
        args += (*tail, 0 if scalar is None else scalar)
    else:
        args += tail
    return plan, tuple(args)


def _plan(fn: Callable, out: DeviceBuffer, xs: tuple[DeviceBuffer, ...], has_scalar: bool) -> Plan:
    """elementwise's launch for these shapes and strides (see Plan)."""
    if out.size == 0:
        return None, 0, 0, (), ()  # type: ignore[return-value]
    views = [out] + [x.broadcast_to(out.shape) for x in xs]
    if len(xs) == 1 and not has_scalar:
        fn = ignoring_scalar(fn)  # the one-operand kernels take a scalar: an unused 0
    shape, strides = coalesce(out.shape, [v.strides for v in views], out.strides)
    if len(shape) == 1 and all(st == [1] for st in strides):
        n = shape[0]
        threads = fitted(-(-n // 4))
        cap = (DENSE1_BLOCKS if len(xs) == 1 else DENSE2_BLOCKS) * max_blocks()
        blocks = max(1, min(-(-n // (threads * 4)), cap))
        return (dense1_kernel if len(xs) == 1 else dense2_kernel)(fn), blocks, threads, ((),) * len(views), (n,)
    if len(xs) == 1 and len(shape) <= 3 and all(st[-1] == 1 for st in strides):
        (ni, nj, inner), ((o_i, o_j, _), (a_i, a_j, _)) = [1] * (3 - len(shape)) + shape, [
            [0] * (3 - len(shape)) + st for st in strides]
        if ROWS1_SWAP and ni > 1 and abs(a_j) > abs(a_i):  # a block's rows next to each other in the source
            ni, nj, o_i, o_j, a_i, a_j = nj, ni, o_j, o_i, a_j, a_i
        bx, by = rows_block(inner, ROWS1_LEAST)
        by = fitted(nj, by)
        gi = min(ni, max_blocks())
        gj = many_rows(nj, by) if gi == 1 else min(-(-nj // by), max(1, max_blocks() // gi), 65535)
        return rows1_kernel(fn, ROWS1_MIN_BLOCKS), (gi, gj), (bx, by), ((o_i, o_j), (a_i, a_j)), (ni, nj, inner)
    shape, strides = [1] + shape, [[0] + st for st in strides]  # a mid axis, at worst of extent 1
    outer = padded(shape[:-2], 1)
    bx, by = rows_block(shape[-1])
    walk, items = walk_geometry(prod(outer), shape[-2], shape[-1], bx)
    by = fitted(items, by)
    kernel = map_kernel(fn, len(xs))
    per_buffer = tuple((padded(st[:-2], 0), st[-2], st[-1]) for st in strides)
    return kernel, blocks_for(items, by), (bx, by), per_buffer, (outer, walk, items)


# ---- data movement -------------------------------------------------------------------


@cuda.jit(device=True)
def _same(a: object) -> object:
    return a


# A reinterpreting view of a device array costs numba tens of µs (a new
# DeviceNDArray, its layout checks): each array's views are made once and
# kept while it lives.
_views: dict[tuple[int, str], tuple[weakref.ref, Arr]] = {}


def as_words(data: Arr, word: np.dtype) -> Arr:
    """`data` (1-D) reinterpreted as `word`s (its size a multiple of them)."""
    if data.dtype == word:
        return data
    if type(data) is Memory:  # its views are cheap (an address, a length, a dtype)
        return data.view(word)
    key = (id(data), word.char)
    hit = _views.get(key)
    if hit is not None and hit[0]() is data:
        return hit[1]
    view = data.view(word)
    try:
        ref = weakref.ref(data, lambda _, k=key: _views.pop(k, None))  # type: ignore[misc]
    except TypeError:  # an array type without weak references: no caching
        return view
    _views[key] = (ref, view)
    return view


def _widening(d: DeviceBuffer, s: DeviceBuffer, shape: list[int], ds: list[int], ss: list[int]) -> int:
    """How many elements make one 8-byte word, where the copy can move words:
    both innermost axes unit stride, every row starting and ending on a word
    (fewer, wider accesses); else 1."""
    f = 8 // d.dtype.itemsize
    if f < 2 or ds[-1] != 1 or ss[-1] != 1 or shape[-1] % f:
        return 1
    if any(v % f for v in [*ds[:-1], *ss[:-1], d.offset, s.offset]):
        return 1
    return f


def _as_words(b: DeviceBuffer, f: int, word: np.dtype, shape: tuple[int, ...],
              strides: tuple[int, ...]) -> DeviceBuffer:
    """`b`'s memory as `word`s (f elements' bits each), seen with `shape` and `strides` (in words)."""
    data = b.data if f == 1 or b.data.size % f == 0 else b.data[:b.data.size // f * f]
    return DeviceBuffer(as_words(data, word), b.offset // f, shape, strides)


# copy_into's choice for one pair of layouts (see _copy_plan), by shapes,
# strides, element size and the offsets' alignment to a word.
_copies: dict[tuple[object, ...], tuple[object, ...]] = {}
# Copies between pooled Memory ready to go again, by the same key: the driver
# launch, its grid and block, the elements a word (f) and the word's bytes,
# and the kernel parameters after dst's memory and offset and after src's: a
# repeated copy costs a dict lookup and the launch.
_ready_copies: KeptLaunches = {}
# Word copies (gpu_backend/kernels/row_words.py) ready to go again, by the same key: the
# driver launch, its grid and block, the kernel parameters after the two offsets.
_ready_words: KeptLaunches = {}
# A copy between two buffers dense in one memory order (a layout-preserving
# copy): "memcpy", the driver's cuMemcpyDtoDAsync on the kernels' stream, as
# torch's copy_ does; "kernel", the dense row copy (benchmarks/kernel_probe.py
# measures both). Only between pooled Memory on a GPU; else the kernel.
DENSE_COPY = "memcpy"


def _copy_plan(dst: DeviceBuffer, src: DeviceBuffer, memcpy: bool) -> tuple[object, ...]:
    """("none",); ("memcpy", bytes) for one dense run each (where `memcpy`); ("rows", f, word,
    shape, dst strides, src strides) in words of f elements; or ("tiles", word,
    the transpose's plan)."""
    if dst.size == 0:
        return ("none",)
    src = src.broadcast_to(dst.shape)
    shape, (ds, ss) = coalesce(dst.shape, [dst.strides, src.strides], dst.strides)
    fast = min(range(len(shape)), key=lambda a: (abs(ss[a]), -a))
    if memcpy and len(shape) == 1 and ds == ss == [1]:
        return ("memcpy", shape[0] * dst.data.dtype.itemsize)
    if fast == len(shape) - 1 or ss[fast] == 0:
        f = _widening(dst, src, shape, ds, ss)
        words = None if f > 1 else words_plan(shape, ds, ss, dst.data.dtype.itemsize, src.data.size)
        if words is not None:  # rows that align differently, or a broadcast along them: 8-byte words
            return words
        if f == 1:  # src broadcast to dst's shape
            return ("rows", 1, _word(dst, 1), dst.shape, dst.strides, src.strides)
        wide = (*shape[:-1], shape[-1] // f)
        return ("rows", f, _word(dst, f), wide, (*(v // f for v in ds[:-1]), 1), (*(v // f for v in ss[:-1]), 1))
    word = _word(dst, 1)
    return ("tiles", word, transpose_plan(word.itemsize, shape, ds, ss, fast))


def _whole_words(data: Arr, f: int) -> Arr:
    """`data` (1-D, f elements a word) as 8-byte words, to its last whole word."""
    return as_words(data if data.size % f == 0 else data[:data.size // f * f], WORD)


def _word(b: DeviceBuffer, f: int) -> np.dtype:
    """The unsigned word of f elements of `b`: a copy moves bits, never values."""
    return np.dtype(f"u{b.data.dtype.itemsize * f}")


def copy_into(dst: DeviceBuffer, src: DeviceBuffer) -> DeviceBuffer:
    """dst[...] = src, both of one shape and dtype, any strides. Where both
    are one dense run alike, the driver's copy; where both keep one innermost
    axis, rows are copied (as 8-byte words: the row kernel's where they align,
    row_words' where they do not, or where src is broadcast along them or steps
    by two 4-byte elements); otherwise the tiled transpose."""
    dd, sd = dst.data, src.data
    pooled = type(dd) is Memory and type(sd) is Memory  # raw addresses: the driver's copy can take them
    key = (dst.shape, dst.strides, src.shape, src.strides, dd.dtype.itemsize, dst.offset % 8, src.offset % 8,
           dd.size % 8, sd.size % 8, pooled)  # the sizes: whether the memories are whole words
    ready = _ready_words.get(key)
    if ready is not None:  # the word copy's kept launch: each memory as elements, then as words
        direct, grid, block, consts = ready
        counts["prepared"] += 1
        direct(grid, block, word_copy_params(dd, sd, dst.offset, src.offset, consts))  # type: ignore[operator]
        return dst
    ready = _ready_copies.get(key)
    if ready is not None:  # launched before: all its parameters but the memory and offsets are kept
        direct, grid, block, f, size, d_args, s_args = ready
        nd, ns = dd.size // f, sd.size // f  # the memory as words (what _as_words makes)
        counts["prepared"] += 1
        direct(grid, block, (0, 0, nd, size, dd.ptr, nd, size, dst.offset // f, *d_args,  # type: ignore[operator]
                             0, 0, ns, size, sd.ptr, ns, size, src.offset // f, *s_args))  # type: ignore[operator]
        return dst
    plan = _copies.get(key)
    if plan is None:
        if len(_copies) >= PLANS_KEPT:
            _copies.clear()
        plan = _copies[key] = _copy_plan(dst, src, pooled and DENSE_COPY == "memcpy" and not SIMULATED)
    how = plan[0]
    if how == "memcpy":
        size = dd.dtype.itemsize
        copy_bytes(dd.ptr + dst.offset * size, sd.ptr + src.offset * size, plan[1])  # type: ignore[arg-type]
    elif how == "rows":
        _, f, word, shape, ds, ss = plan
        (kernel, grid, block, per_buffer, _), args = _launch_args(
            _same, _as_words(dst, f, word, shape, ds), (_as_words(src, f, word, shape, ss),), None)
        launch(kernel, grid, block, *args)
        if pooled:
            _remember_copy(key, kernel, grid, block, args, f, word.itemsize, len(per_buffer[0]))  # type: ignore[arg-type]
    elif how == "words":
        _, kernel, elem, f, grid, block, consts = plan
        args = (as_words(dd, elem), _whole_words(dd, f), as_words(sd, elem), _whole_words(sd, f),  # type: ignore
                dst.offset, src.offset, *consts)  # type: ignore[misc]
        launch(kernel, grid, block, *args)
        if pooled:
            keep_launch(_ready_words, key, kernel, args, grid, block, lambda: (tuple(values(consts)),))  # type: ignore
    elif how == "tiles":
        _, word, t = plan
        args = (as_words(dd, word), dst.offset, *t.d_args, as_words(sd, word), src.offset,  # type: ignore[attr-defined]
                *t.s_args, *t.tail)  # type: ignore[attr-defined]
        launch(t.kernel, t.grid, t.block, *args)  # type: ignore[attr-defined]
        if pooled:
            _remember_copy(key, t.kernel, t.grid, t.block, args, 1, word.itemsize, len(t.d_args))  # type: ignore
    return dst


def word_copy_params(dd: Memory, sd: Memory, d_off: int, s_off: int, consts: tuple[object, ...]) -> list[object]:
    """A kept word copy's driver parameters (row_words' kernel: each memory as elements, then as
    8-byte words to its last whole one; the offsets; the kept constants)."""
    params: list[object] = []
    for d in (dd, sd):
        n, size = d.size, d.dtype.itemsize
        w = n * size // 8
        params += (0, 0, n, size, d.ptr, n, size, 0, 0, w, 8, d.ptr, w, 8)
    params += (d_off, s_off, *consts)
    return params


def _remember_copy(key: tuple[object, ...], kernel: Callable, grid: object, block: object, args: tuple[object, ...],
                   f: int, size: int, n: int) -> None:
    """Keep a copy's launch just made (args: dst's words and offset, n more, src's words and offset, the rest)."""
    keep_launch(_ready_copies, key, kernel, args, grid, block,
                lambda: (f, size, tuple(values(args[2:2 + n])), tuple(values(args[4 + n:]))))


def laid_out(x: DeviceBuffer, order: tuple[int, ...]) -> DeviceBuffer:
    """`x` itself when dense in `order`, else a copy that is."""
    if x.is_dense(order):
        return x
    return copy_into(DeviceBuffer.empty(x.shape, x.dtype, order), x)
