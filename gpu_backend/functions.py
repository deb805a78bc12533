"""Per-element device functions: what the kernels apply to values.

They follow interp/impls.py bit for bit where numpy is exact: float16 is
computed in float32 and rounded once on store, as numpy does; integers compute
wide and wrap when stored into their dtype; maximum and minimum propagate NaN
the way np.maximum does; a float to integer cast truncates, saturates and sends
NaN to 0. Reductions accumulate in float64 (floats) or int64 (integers, bool).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import numpy as np

from gpu_backend.device import SIMULATED, cuda

Fn = Callable[..., object]


def _device(fn: Fn) -> Fn:
    return cuda.jit(device=True)(fn)


@_device
def _same(a: object) -> object:
    return a


@_device
def _f32(a: object) -> object:
    return np.float32(a)


@_device
def _f64(a: object) -> object:
    return np.float64(a)


@_device
def _i64(a: object) -> object:
    return np.int64(a)


@_device
def _nonzero(a: object) -> object:
    return a != 0


@_device
def _maximum(a: object, b: object) -> object:
    return a if (a >= b or a != a) else b


@_device
def _minimum(a: object, b: object) -> object:
    return a if (a <= b or a != a) else b


@_device
def _relu(a: object) -> object:
    return a if (a >= 0 or a != a) else 0


@_device
def _add(a: object, b: object) -> object:
    return a + b


@_device
def _sub(a: object, b: object) -> object:
    return a - b


@_device
def _mul(a: object, b: object) -> object:
    return a * b


@_device
def _div(a: object, b: object) -> object:
    return a / b


@_device
def _band(a: object, b: object) -> object:
    return a & b


@_device
def _bor(a: object, b: object) -> object:
    return a | b


@_device
def _bxor(a: object, b: object) -> object:
    return a ^ b


@_device
def _neg(a: object) -> object:
    return -a


@_device
def _abs(a: object) -> object:
    return abs(a)


# The GPU's math returns inf or NaN where Python's math raises, as numpy's does:
# the simulator (Python) gets numpy's, the GPU the math module numba compiles.
EXP, LOG, SQRT = (np.exp, np.log, np.sqrt) if SIMULATED else (math.exp, math.log, math.sqrt)


@_device
def _exp(a: object) -> object:
    return EXP(a)


@_device
def _log(a: object) -> object:
    return LOG(a)


@_device
def _sqrt(a: object) -> object:
    return SQRT(a)


BINARY: dict[str, Fn] = {
    "add": _add, "sub": _sub, "mul": _mul, "div": _div, "maximum": _maximum, "minimum": _minimum,
    "band": _band, "bor": _bor, "bxor": _bxor,
}
UNARY: dict[str, Fn] = {"neg": _neg, "abs": _abs, "exp": _exp, "log": _log, "sqrt": _sqrt, "relu": _relu}
# The binary function each reduction folds with (interp.impls.COMBINE).
COMBINE = {"sum": "add", "prod": "mul", "max": "maximum", "min": "minimum",
           "band": "band", "bor": "bor", "bxor": "bxor"}


def widen(dtype: np.dtype) -> Fn:
    """What elementwise ops compute a value of `dtype` in."""
    return _f32 if dtype == np.float16 else _same


def accumulator(dtype: np.dtype) -> tuple[np.dtype, Fn]:
    """The type reductions and matmul accumulate `dtype` in, and the conversion."""
    if dtype.kind == "f":
        return np.dtype(np.float64), _f64
    return np.dtype(np.int64), _i64


@cache
def binary(name: str, dtype: np.dtype) -> Fn:
    op, w = BINARY[name], widen(dtype)

    @_device
    def fn(a: object, b: object) -> object:
        return op(w(a), w(b))

    return fn


@cache
def unary(name: str, dtype: np.dtype) -> Fn:
    op, w = UNARY[name], widen(dtype)

    @_device
    def fn(a: object) -> object:
        return op(w(a))

    return fn


@cache
def narrow(dtype: np.dtype) -> Fn:
    """A wide value (an accumulator, another integer) as `dtype`: integers wrap,
    bool is `!= 0`, floats round when stored."""
    if dtype.kind == "b":
        return _nonzero
    if dtype.kind not in "iu":
        return _same
    to = dtype.type

    @_device
    def wrap(a: object) -> object:
        return to(a)

    return wrap


@cache
def cast(src: np.dtype, dst: np.dtype) -> Fn:
    w = widen(src)
    if dst.kind == "b":
        @_device
        def to_bool(a: object) -> object:
            return w(a) != 0

        return to_bool
    if src.kind == "f" and dst.kind in "iu":
        info = np.iinfo(dst)
        lo, hi, flo, fhi = int(info.min), int(info.max), float(info.min), float(info.max)

        @_device
        def saturate(a: object) -> object:
            x = np.float64(a)
            if x != x:
                return np.int64(0)
            if x >= fhi:
                return np.int64(hi)
            if x <= flo:
                return np.int64(lo)
            return np.int64(x)

        return saturate
    return narrow(dst)  # int to int wraps; to a float, the store rounds once
