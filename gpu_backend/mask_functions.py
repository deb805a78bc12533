"""Per-element device functions of the mask ops (docs/spec.md §5.9): the unary
`tanh erf sigmoid rsqrt sin cos` in the dtype they compute in (float32 for f16, bf16
and f32, float64 for f64: gpu_backend/functions.py widens and rounds around them), and
the comparisons. On a GPU they are CUDA's math functions (sinf, tanhf, erff, expf,
sqrtf, ...); the simulator uses numpy's, as interp/masks.py does."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from gpu_backend.device import SIMULATED, cuda

Fn = Callable[..., object]

# The GPU's math returns inf or NaN where Python's math raises; the simulator gets numpy's.
TANH, SIN, COS, EXP, SQRT = ((np.tanh, np.sin, np.cos, np.exp, np.sqrt) if SIMULATED
                             else (math.tanh, math.sin, math.cos, math.exp, math.sqrt))
ERF = math.erf  # numpy has none; on a GPU, erff for float32 and erf for float64


def _device(fn: Fn) -> Fn:
    return cuda.jit(device=True)(fn)


@_device
def _tanh(a: object) -> object:
    return TANH(a)


@_device
def _sin(a: object) -> object:
    return SIN(a)


@_device
def _cos(a: object) -> object:
    return COS(a)


@_device
def _erf32(a: object) -> object:
    return np.float32(ERF(a))


@_device
def _erf64(a: object) -> object:
    return np.float64(ERF(a))


@_device
def _sigmoid32(a: object) -> object:
    one = np.float32(1.0)
    return one / (one + EXP(-a))


@_device
def _sigmoid64(a: object) -> object:
    one = np.float64(1.0)
    return one / (one + EXP(-a))


@_device
def _rsqrt32(a: object) -> object:
    return np.float32(1.0) / SQRT(a)


@_device
def _rsqrt64(a: object) -> object:
    return np.float64(1.0) / SQRT(a)


# name -> (the float32 function, the float64 one)
MASK_UNARY: dict[str, tuple[Fn, Fn]] = {
    "tanh": (_tanh, _tanh), "sin": (_sin, _sin), "cos": (_cos, _cos), "erf": (_erf32, _erf64),
    "sigmoid": (_sigmoid32, _sigmoid64), "rsqrt": (_rsqrt32, _rsqrt64),
}


def mask_unary(name: str, dtype: np.dtype) -> Fn:
    """The device function of a mask unary op on values of `dtype`, widened as functions.widen does."""
    return MASK_UNARY[name][dtype == np.float64]


@_device
def _eq(a: object, b: object) -> object:
    return a == b


@_device
def _ne(a: object, b: object) -> object:
    return a != b


@_device
def _lt(a: object, b: object) -> object:
    return a < b


@_device
def _le(a: object, b: object) -> object:
    return a <= b


@_device
def _gt(a: object, b: object) -> object:
    return a > b


@_device
def _ge(a: object, b: object) -> object:
    return a >= b


COMPARE: dict[str, Fn] = {"eq": _eq, "ne": _ne, "lt": _lt, "le": _le, "gt": _gt, "ge": _ge}
