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


# kernel_scalar's results by (type, value, dtype): a step repeats its scalars run after
# run, and the conversion (numpy's errstate, a 0-d array, a view) costs several µs a call.
# Only values whose equality means equal bits are kept: ints, and floats but 0 and NaN
# (-0.0 == 0.0, and NaN equals nothing).
_kernel_scalars: dict[tuple[type, object, np.dtype], np.generic] = {}
SCALARS_KEPT = 4096


def kernel_scalar(value: int | float, dtype: np.dtype) -> np.generic:
    """`value` in the tensor dtype, as the kernel receives it (bfloat16 as its bits)."""
    t = type(value)
    keep = t is int or (t is float and value == value and value != 0)
    if keep:
        hit = _kernel_scalars.get((t, value, dtype))
        if hit is not None:
            return hit
    got = scalar_value(value, dtype).view(storage(dtype))[()]
    if keep:
        if len(_kernel_scalars) >= SCALARS_KEPT:
            _kernel_scalars.clear()
        _kernel_scalars[(t, value, dtype)] = got
    return got


def elementwise_scalar(fn: Callable, out: DeviceBuffer, x: DeviceBuffer, value: int | float,
                       scalar_first: bool) -> DeviceBuffer:
    """out = fn(x, value) (or fn(value, x)) element by element, x broadcast to out's shape."""
    return elementwise(_scalar_first(fn) if scalar_first else fn, out, x, scalar=kernel_scalar(value, x.dtype))
