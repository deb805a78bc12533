"""The window ops (slice, select, pad, cat; docs/spec.md §5.8) on device buffers,
registered in gpu_backend.impls' table. slice and select are views of the
operand (any strides, steps multiply them), laid out as the result asks; cat
copies each operand into its stretch of a fresh result; pad copies the operand
into the interior of a fresh result and fills the border around it, each element
written once (the border as at most two slabs an axis: `border`)."""

from __future__ import annotations

import struct
from functools import lru_cache

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.impls import Order, impl, laid_out_view
from gpu_backend.kernels.elementwise import copy_into
from gpu_backend.kernels.window_kernels import copy_framed, fill_view
from interp.impls import scalar_value
from refir.errors import RunError
from refir.ir import ops
from refir.ir.types import dense_strides

FRAMED = True  # pad's border along the rows written by the interior's copy (copy_framed); False: by fills
# pad's border along the rows' outer axis (the top and bottom rows of a 2-D pad) written by that copy too,
# blank rows of the same launch (one launch, not a fill's after it); off until measured on a GPU
PAD_ROWS = False


@impl(ops.Slice)
def slice_(op: ops.Slice, order: Order, x: DeviceBuffer) -> DeviceBuffer:
    offset, shape, strides = _slice_view(x.shape, x.strides, op.axes, op.starts, op.stops, op.steps)
    return laid_out_view(DeviceBuffer(x.data, x.offset + offset, shape, strides), order)


@lru_cache(maxsize=1024)
def _slice_view(shape: tuple[int, ...], strides: tuple[int, ...], axes: tuple[int, ...], starts: tuple[int, ...],
                stops: tuple[int, ...], steps: tuple[int, ...]) -> Box:
    """The slice's view of an operand at offset 0 (kept by layout: a run slices alike each time)."""
    index = [slice(None)] * len(shape)
    for a, start, stop, step in zip(axes, starts, stops, steps):
        index[a] = slice(start, stop, step)
    v = DeviceBuffer(None, 0, shape, strides)[tuple(index)]
    return v.offset, v.shape, v.strides


@impl(ops.Select)
def select(op: ops.Select, order: Order, x: DeviceBuffer) -> DeviceBuffer:
    a = op.axis
    if op.index >= x.shape[a]:
        raise RunError(f"select index {op.index} is outside axis {a} of extent {x.shape[a]} [select_c3]")
    view = DeviceBuffer(x.data, x.offset + op.index * x.strides[a], x.shape[:a] + x.shape[a + 1:],
                        x.strides[:a] + x.strides[a + 1:])
    return laid_out_view(view, order)


def border(shape: tuple[int, ...], low: tuple[int, ...], inner: tuple[int, ...],
           axes: int | None = None) -> list[tuple[slice, ...]]:
    """The elements of `shape` outside the box low[k] <= i_k < low[k] + inner[k], as
    disjoint slabs: for each axis k, the indices before and after the box on k, the
    box's on the axes before k and every index on those after (empty slabs left out;
    a single index on each side of the box one slab, stepping from the first to the last).
    `axes`: only the slabs of the first `axes` axes (the last axis's are the box's rows'
    ends, which pad's framed copy writes)."""
    slabs = []
    for k, (n, lo, m) in enumerate(list(zip(shape, low, inner))[:axes]):
        box = tuple(slice(b, b + e) for b, e in zip(low[:k], inner[:k]))
        rest = (slice(None),) * (len(shape) - k - 1)
        parts = (slice(0, lo), slice(lo + m, n))
        if lo == 1 and n - m == 2:  # one index either side: both in one slab (one fill, not two)
            parts = (slice(0, n, n - 1),)
        for part in parts:
            index = (*box, part, *rest)
            if all(len(range(*s.indices(e))) for s, e in zip(index, shape)):
                slabs.append(index)
    return slabs


Box = tuple[int, tuple[int, ...], tuple[int, ...]]  # a view's offset, shape and strides in its buffer
# pad's geometry by the operand's shape, the widths and the result's order (all a fresh result's
# views depend on): the result's shape, its interior, and its border slabs: without the last
# two axes' (framed with blank rows: pad's interior copy writes those), without the last axis's
# (framed), and all (plain). Worked out once:
# `border` and a view a slab cost more Python than the launches (benchmarks/probe_layer_ops.py).
_pad_plans: dict[tuple[object, ...], tuple[tuple[int, ...], Box, list[Box], list[Box], list[Box]]] = {}
PAD_PLANS_KEPT = 1024  # then the cache starts again


def _pad_plan(shape: tuple[int, ...], low: tuple[int, ...], high: tuple[int, ...],
              order: Order) -> tuple[tuple[int, ...], Box, list[Box], list[Box], list[Box]]:
    padded = tuple(n + lo + hi for n, lo, hi in zip(shape, low, high))
    out = DeviceBuffer(None, 0, padded, dense_strides(padded, order, 1))  # a fresh result's layout

    def box(index: tuple[slice, ...]) -> Box:
        v = out[index]
        return v.offset, v.shape, v.strides

    interior = box(tuple(slice(lo, lo + n) for n, lo in zip(shape, low)))
    return (padded, interior, [box(s) for s in border(padded, low, shape, max(len(shape) - 2, 0))],
            [box(s) for s in border(padded, low, shape, len(shape) - 1)], [box(s) for s in border(padded, low, shape)])


@lru_cache(maxsize=256)
def _pad_value(kind: type, bits: object, dtype: np.dtype) -> np.ndarray:
    """pad's value in the operand's dtype, kept by the literal's type and exact bits (-0.0 is not 0.0)."""
    value = scalar_value(struct.unpack("<d", bits)[0] if kind is float else bits, dtype)  # type: ignore[arg-type]
    value.setflags(write=False)
    return value


@impl(ops.Pad)
def pad(op: ops.Pad, order: Order, x: DeviceBuffer) -> DeviceBuffer:
    key = (x.shape, op.low, op.high, order)
    plan = _pad_plans.get(key)
    if plan is None:
        if len(_pad_plans) >= PAD_PLANS_KEPT:
            _pad_plans.clear()
        plan = _pad_plans[key] = _pad_plan(x.shape, op.low, op.high, order)
    shape, inner, framed_rows, framed, slabs = plan
    out = DeviceBuffer.empty(shape, x.dtype, order)
    v = op.value
    value = _pad_value(type(v), struct.pack("<d", v) if type(v) is float else v, x.dtype)
    if x.size:
        interior = DeviceBuffer(out.data, *inner)
        lo, hi = op.low[-1], op.high[-1]
        rows = (op.low[-2], op.high[-2]) if PAD_ROWS and x.ndim in (2, 3) else (0, 0)
        if FRAMED and lo + hi and any(rows) and copy_framed(interior, x, lo, hi, value, rows):
            slabs = framed_rows  # the last two axes' border with it
        elif FRAMED and lo + hi and copy_framed(interior, x, lo, hi, value):  # the last axis's border with it
            slabs = framed
        else:
            copy_into(interior, x)
    for offset, sh, st in slabs:
        fill_view(DeviceBuffer(out.data, offset, sh, st), value)
    return out


@impl(ops.Cat)
def cat(op: ops.Cat, order: Order, *xs: DeviceBuffer) -> DeviceBuffer:
    a = op.axis
    shape = list(xs[0].shape)
    shape[a] = sum(x.shape[a] for x in xs)
    out = DeviceBuffer.empty(tuple(shape), xs[0].dtype, order)
    start = 0
    for x in xs:
        if x.size:
            copy_into(out.take(a, start, start + x.shape[a]), x)
        start += x.shape[a]
    return out
