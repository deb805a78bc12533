"""The mask ops on device buffers (docs/spec.md §5.9): comparisons (the elementwise
kernels, to a bool buffer), `where` (a kernel of three operands) and `iota` (a kernel of
none). Both kernels here are grid-stride loops over the result in its memory order
(coalesced writes), each operand read through its own strides (broadcast axes at stride
0, any layout, negative strides): no axis is assumed dense. gpu_backend/impls.py imports
this module last; it registers the ops in GPU_IMPLS."""

from __future__ import annotations

from functools import cache
from math import prod

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.device import THREADS, blocks_for, cuda, fitted
from gpu_backend.impls import Order, broadcast_shape, impl, per_device
from gpu_backend.kernels import functions
from gpu_backend.kernels.elementwise import elementwise
from gpu_backend.kernels.strides import Arr, Ints, padded, unravel
from gpu_backend.launches.launch import launch
from interp.masks import iota_block_of
from refir.ir import ops
from refir.ir.types import TensorType

BOOL = np.dtype(bool)


@impl(ops.Compare)
def compare(op: ops.Compare, order: Order, a: DeviceBuffer, b: DeviceBuffer) -> DeviceBuffer:
    shape = broadcast_shape(a.shape, b.shape)
    return elementwise(functions.compare(op.name, a.dtype), DeviceBuffer.empty(shape, BOOL, order), a, b)


def _walk(out: DeviceBuffer) -> tuple[list[int], tuple[int, ...]]:
    """The result's axes outermost-in-memory first: the walk that writes it in order."""
    axes = sorted(range(len(out.shape)), key=lambda i: -abs(out.strides[i]))
    return axes, tuple(out.shape[i] for i in axes)


@cuda.jit
def _where_kernel(out: Arr, o_off: int, o_st: Ints, c: Arr, c_off: int, c_st: Ints, x: Arr, x_off: int,
                  x_st: Ints, y: Arr, y_off: int, y_st: Ints, shape: Ints, n: int) -> None:
    i = cuda.grid(1)
    while i < n:
        if c[c_off + unravel(i, shape, c_st)]:
            out[o_off + unravel(i, shape, o_st)] = x[x_off + unravel(i, shape, x_st)]
        else:
            out[o_off + unravel(i, shape, o_st)] = y[y_off + unravel(i, shape, y_st)]
        i += cuda.gridsize(1)


@impl(ops.Where)
def where(op: ops.Where, order: Order, cond: DeviceBuffer, x: DeviceBuffer, y: DeviceBuffer) -> DeviceBuffer:
    """out = x where cond else y; a pick of stored values (bfloat16's bits move as they are)."""
    shape = broadcast_shape(broadcast_shape(cond.shape, x.shape), y.shape)
    out = DeviceBuffer.empty(shape, x.dtype, order)
    n = out.size
    if n == 0:
        return out
    axes, walk = _walk(out)
    args: list[object] = []
    for b in (out, cond.broadcast_to(shape), x.broadcast_to(shape), y.broadcast_to(shape)):
        args += (b.data, b.offset, padded([b.strides[i] for i in axes], 0))
    threads = fitted(n)
    launch(_where_kernel, blocks_for(n, threads), threads, *args, padded(walk, 1), n)
    return out


@cache
def _iota_kernel(convert: object) -> object:
    @cuda.jit
    def kernel(out: Arr, o_off: int, o_st: Ints, shape: Ints, inner: int, extent: int, start: int, n: int) -> None:
        i = cuda.grid(1)
        while i < n:
            out[o_off + unravel(i, shape, o_st)] = convert(np.int64(start + i // inner % extent))
            i += cuda.gridsize(1)

    return kernel


@per_device(ops.Iota)
def iota(op: ops.Iota, order: Order, t: TensorType, device: int, extents: list[int]) -> DeviceBuffer:
    """`device`'s block of an iota of global `extents`: the global indices of its block,
    converted as cast from i64 converts (interp/masks.py iota_block)."""
    shape, start = iota_block_of(op, t, device, extents)
    dtype = t.np_dtype
    out = DeviceBuffer.empty(shape, dtype, order)
    n = out.size
    if n == 0:
        return out
    axes, walk = _walk(out)
    at = axes.index(op.axis)
    inner = prod(walk[at + 1:])
    kernel = _iota_kernel(functions.cast(np.dtype(np.int64), dtype))
    threads = fitted(n, THREADS)
    launch(kernel, blocks_for(n, threads), threads, out.data, out.offset, padded([out.strides[i] for i in axes], 0),
           padded(walk, 1), inner, shape[op.axis], start, n)
    return out
