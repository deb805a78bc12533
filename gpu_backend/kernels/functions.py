"""Per-element device functions: what the kernels apply to values.

bfloat16 has no numba type: on the device it is stored as its 16 bits (uint16,
not a refir dtype, so never ambiguous), decoded to float32 where a kernel reads
it and rounded back where it stores it, as ml_dtypes computes bf16 in float32
(a float64 accumulator is rounded to float32 first, as ml_dtypes does).

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
from gpu_backend.mask_functions import COMPARE, MASK_UNARY, mask_unary
from refir.ir.types import is_bf16, is_float

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


def bf16_decode(bits: object) -> object:
    """The float32 value of bfloat16 bits (exact)."""
    b = int(bits)
    e = (b >> 7) & 0xFF
    m = b & 0x7F
    if e == 0xFF:
        v = math.inf if m == 0 else math.nan
    elif e == 0:
        v = math.ldexp(np.float64(m), -133)
    else:
        v = math.ldexp(np.float64(128 + m), e - 134)
    if b & 0x8000:
        v = -v
    return np.float32(v)


def bf16_encode(x: object) -> object:
    """The bfloat16 bits of a value, rounded to nearest even (via float32, as
    ml_dtypes rounds a double); NaN becomes the quiet NaN of its sign."""
    v = np.float64(np.float32(x))
    negative = math.copysign(1.0, v) < 0
    if v != v:
        return 0xFFC0 if negative else 0x7FC0
    s = 0x8000 if negative else 0
    a = abs(v)
    if a == math.inf:
        return s | 0x7F80
    if a == 0.0:
        return s
    mant, e = math.frexp(a)  # a = mant * 2**e, 0.5 <= mant < 1
    biased = e + 126
    q = math.ldexp(mant, 8) if biased >= 1 else math.ldexp(a, 133)
    r = int(math.floor(q))
    f = q - r
    if f > 0.5 or (f == 0.5 and r % 2 == 1):
        r += 1
    if biased < 1:
        return s | r  # a subnormal; r == 128 is the smallest normal, spelled the same
    if r == 256:
        r = 128
        biased += 1
    if biased >= 255:
        return s | 0x7F80
    return s | (biased << 7) | (r - 128)


_from_bf16 = _device(bf16_decode)
_to_bf16 = _device(bf16_encode)


@_device
def _bf16_f64(a: object) -> object:
    return np.float64(_from_bf16(a))


@_device
def _bf16_maximum(a: object, b: object) -> object:
    x, y = _from_bf16(a), _from_bf16(b)
    return a if (x >= y or x != x) else b


@_device
def _bf16_minimum(a: object, b: object) -> object:
    x, y = _from_bf16(a), _from_bf16(b)
    return a if (x <= y or x != x) else b


@_device
def _bf16_neg(a: object) -> object:
    return a ^ 0x8000


@_device
def _bf16_abs(a: object) -> object:
    return a & 0x7FFF


@_device
def _bf16_relu(a: object) -> object:
    x = _from_bf16(a)
    return a if (x >= 0 or x != x) else 0


# bf16 ops that pick or flip bits, as numpy does, rather than compute anew.
BF16_BITWISE: dict[str, Fn] = {"maximum": _bf16_maximum, "minimum": _bf16_minimum, "neg": _bf16_neg,
                               "abs": _bf16_abs, "relu": _bf16_relu}


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
    if is_bf16(dtype):
        return _from_bf16
    return _f32 if dtype == np.float16 else _same


def accumulator(dtype: np.dtype) -> tuple[np.dtype, Fn]:
    """The type reductions and matmul accumulate `dtype` in, and the conversion."""
    if is_bf16(dtype):
        return np.dtype(np.float64), _bf16_f64
    if dtype.kind == "f":
        return np.dtype(np.float64), _f64
    return np.dtype(np.int64), _i64


@cache
def binary(name: str, dtype: np.dtype) -> Fn:
    if is_bf16(dtype) and name in BF16_BITWISE:
        return BF16_BITWISE[name]
    op, w = BINARY[name], widen(dtype)
    if is_bf16(dtype):
        @_device
        def bf16(a: object, b: object) -> object:
            return _to_bf16(op(w(a), w(b)))

        return bf16

    @_device
    def fn(a: object, b: object) -> object:
        return op(w(a), w(b))

    return fn


@cache
def unary(name: str, dtype: np.dtype) -> Fn:
    if is_bf16(dtype) and name in BF16_BITWISE:
        return BF16_BITWISE[name]
    op, w = mask_unary(name, dtype) if name in MASK_UNARY else UNARY[name], widen(dtype)
    if is_bf16(dtype):
        @_device
        def bf16(a: object) -> object:
            return _to_bf16(op(w(a)))

        return bf16

    @_device
    def fn(a: object) -> object:
        return op(w(a))

    return fn


@cache
def compare(name: str, dtype: np.dtype) -> Fn:
    """eq ne lt le gt ge on values of `dtype` (bfloat16 decoded first), to bool."""
    op, w = COMPARE[name], widen(dtype)

    @_device
    def fn(a: object, b: object) -> object:
        return op(w(a), w(b))

    return fn


@cache
def narrow(dtype: np.dtype) -> Fn:
    """A wide value (an accumulator, another integer) as `dtype`: integers wrap,
    bool is `!= 0`, floats round when stored (bfloat16: to its bits)."""
    if is_bf16(dtype):
        return _to_bf16
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
    if is_float(src) and dst.kind in "iu":
        info = np.iinfo(dst)
        lo, hi, flo, fhi = int(info.min), int(info.max), float(info.min), float(info.max)

        @_device
        def saturate(a: object) -> object:
            x = np.float64(w(a))
            if x != x:
                return np.int64(0)
            if x >= fhi:
                return np.int64(hi)
            if x <= flo:
                return np.int64(lo)
            return np.int64(x)

        return saturate
    store = narrow(dst)
    if not is_bf16(src) and not is_bf16(dst):
        return store  # int to int wraps; to a float, the store rounds once

    @_device
    def convert(a: object) -> object:
        return store(w(a))

    return convert
