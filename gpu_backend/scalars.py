"""Binary ops with a Python scalar operand: the scalar travels as a kernel
argument, not as an uploaded one-element buffer (an allocation and a host to
device copy per scalar per step).

The value takes the tensor dtype exactly as interp.impls.scalar_value converts
it (integers wrap); bfloat16 travels as its bits, as its buffers hold it. The
walk is kernels.elementwise's, with one array operand.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from math import prod

import numpy as np

from gpu_backend.buffer import DeviceBuffer, storage
from gpu_backend.device import blocks_for, cuda, fitted, rows_block
from gpu_backend.kernels import Arr, Ints, _item, _walk, coalesce, padded, unravel
from gpu_backend.launch import launch
from interp.impls import scalar_value


@cache
def _with_scalar(fn: Callable, scalar_first: bool) -> Callable:
    @cuda.jit(device=True)
    def left(a: object, c: object) -> object:
        return fn(c, a)

    g = left if scalar_first else fn

    @cuda.jit
    def kernel(out: Arr, o_off: int, o_outer: Ints, o_mid: int, o_in: int,
               a: Arr, a_off: int, a_outer: Ints, a_mid: int, a_in: int, c: object, outer: Ints, walk: Ints,
               items: int) -> None:
        for item in range(cuda.blockIdx.x * cuda.blockDim.y + cuda.threadIdx.y, items,
                          cuda.gridDim.x * cuda.blockDim.y):
            row, m0, m1, j0, j1 = _item(item, walk)
            o = o_off + unravel(row, outer, o_outer)
            p = a_off + unravel(row, outer, a_outer)
            for m in range(m0, m1):
                for j in range(j0 + cuda.threadIdx.x, j1, cuda.blockDim.x):
                    out[o + m * o_mid + j * o_in] = g(a[p + m * a_mid + j * a_in], c)

    return kernel


def kernel_scalar(value: int | float, dtype: np.dtype) -> np.generic:
    """`value` in the tensor dtype, as the kernel receives it (bfloat16 as its bits)."""
    return scalar_value(value, dtype).view(storage(dtype))[()]


def elementwise_scalar(fn: Callable, out: DeviceBuffer, x: DeviceBuffer, value: int | float,
                       scalar_first: bool) -> DeviceBuffer:
    """out = fn(x, value) (or fn(value, x)) element by element, x broadcast to out's shape."""
    if out.size == 0:
        return out
    c = kernel_scalar(value, x.dtype)
    views = [out, x.broadcast_to(out.shape)]
    shape, strides = coalesce(out.shape, [v.strides for v in views], out.strides)
    shape, strides = [1] + shape, [[0] + st for st in strides]  # a mid axis, at worst of extent 1
    outer = padded(shape[:-2], 1)
    (o, a) = ([v.data, v.offset, padded(st[:-2], 0), st[-2], st[-1]] for v, st in zip(views, strides))
    bx, by = rows_block(shape[-1])
    walk, items = _walk(prod(outer), shape[-2], shape[-1], bx)
    by = fitted(items, by)
    launch(_with_scalar(fn, scalar_first), blocks_for(items, by), (bx, by), *o, *a, c, outer, walk, items)
    return out
