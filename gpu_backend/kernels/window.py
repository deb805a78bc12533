"""The window ops (slice, select, pad, cat; docs/spec.md §5.8) on device buffers,
registered in gpu_backend.impls' table. slice and select are views of the
operand (any strides, steps multiply them), laid out as the result asks; cat
copies each operand into its stretch of a fresh result; pad copies the operand
into the interior of a fresh result and fills the border around it, each element
written once (the border as at most two slabs an axis: `border`)."""

from __future__ import annotations

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.impls import Order, impl, laid_out_view
from gpu_backend.kernels.elementwise import copy_into
from gpu_backend.kernels.window_kernels import copy_framed, fill_view
from interp.impls import scalar_value
from refir.errors import RunError
from refir.ir import ops

FRAMED = True  # pad's border along the rows written by the interior's copy (copy_framed); False: by fills


@impl(ops.Slice)
def slice_(op: ops.Slice, order: Order, x: DeviceBuffer) -> DeviceBuffer:
    index = [slice(None)] * x.ndim
    for a, start, stop, step in zip(op.axes, op.starts, op.stops, op.steps):
        index[a] = slice(start, stop, step)
    return laid_out_view(x[tuple(index)], order)


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


@impl(ops.Pad)
def pad(op: ops.Pad, order: Order, x: DeviceBuffer) -> DeviceBuffer:
    shape = tuple(n + lo + hi for n, lo, hi in zip(x.shape, op.low, op.high))
    out = DeviceBuffer.empty(shape, x.dtype, order)
    value = scalar_value(op.value, x.dtype)
    slabs = border(shape, op.low, x.shape)
    if x.size:
        interior = out[tuple(slice(lo, lo + n) for n, lo in zip(x.shape, op.low))]
        lo, hi = op.low[-1], op.high[-1]
        if FRAMED and lo + hi and copy_framed(interior, x, lo, hi, value):  # the last axis's border with it
            slabs = border(shape, op.low, x.shape, x.ndim - 1)
        else:
            copy_into(interior, x)
    for slab in slabs:
        fill_view(out[slab], value)
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
