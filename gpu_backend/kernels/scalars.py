"""Binary ops with a Python scalar operand: the scalar travels as a kernel
argument, not as an uploaded one-element buffer (an allocation and a host to
device copy per scalar per step).

The value takes the tensor dtype exactly as interp.impls.scalar_value converts
it (integers wrap); bfloat16 travels as its bits, as its buffers hold it. The
kernels are kernels.elementwise's one-operand ones, which take the scalar
as their last argument.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer, storage
from gpu_backend.device import cuda
from gpu_backend.kernels.elementwise import elementwise
from interp.impls import scalar_value


@cache
def _scalar_first(fn: Callable) -> Callable:
    @cuda.jit(device=True)
    def swapped(a: object, c: object) -> object:
        return fn(c, a)

    return swapped


def kernel_scalar(value: int | float, dtype: np.dtype) -> np.generic:
    """`value` in the tensor dtype, as the kernel receives it (bfloat16 as its bits)."""
    return scalar_value(value, dtype).view(storage(dtype))[()]


def elementwise_scalar(fn: Callable, out: DeviceBuffer, x: DeviceBuffer, value: int | float,
                       scalar_first: bool) -> DeviceBuffer:
    """out = fn(x, value) (or fn(value, x)) element by element, x broadcast to out's shape."""
    return elementwise(_scalar_first(fn) if scalar_first else fn, out, x, scalar=kernel_scalar(value, x.dtype))
