"""Error classes of the mask ops (docs/spec.md §5.9; conformance/classes.py says what a
class is): a wrong implementation of a comparison, where or a unary op that only some
values tell apart. conformance/classes.py adds them to CLASSES."""

from __future__ import annotations

import numpy as np

from conformance.error_class import ErrorClass, Site
from interp.masks import _in_f32
from refir.ir.types import FLOATS


def _strict_as_loose(s: Site) -> np.ndarray:
    a, b = s.args
    return np.asarray(np.less_equal(a, b) if s.op.name == "lt" else np.greater_equal(a, b))


def _nan_equal(s: Site) -> np.ndarray:
    """eq as !(a < b || a > b), ne as its negation: NaN compares equal to everything."""
    a, b = s.args
    unordered = ~((a < b) | (a > b))
    return np.asarray(unordered if s.op.name == "eq" else ~unordered)


def _bits_equal(s: Site) -> np.ndarray:
    """eq and ne on the bits: -0.0 differs from +0.0."""
    a, b = s.args
    same = (a == b) & (np.signbit(a) == np.signbit(b))
    return np.asarray(same if s.op.name == "eq" else ~same)


def _swapped(s: Site) -> np.ndarray:
    c, x, y = s.args
    return np.asarray(np.where(c, y, x))


def _sigmoid_by_tanh(x: np.ndarray) -> np.ndarray:
    """(1 + tanh(x / 2)) / 2: the same function, but 0 where 1 + tanh cancels (x < -40 or so)."""
    half = x.dtype.type(0.5)
    return half * (x.dtype.type(1) + np.tanh(half * x))


def _unary(fn: object) -> object:
    return lambda s: _in_f32(fn)(s.args[0])


def _row_in(rows: tuple[str, ...], dtypes: frozenset[str] | None = None) -> object:
    return lambda row, d: row in rows and (dtypes is None or d in dtypes)


def fast_tanh(x: np.ndarray) -> np.ndarray:
    """The Pade approximation x (27 + x^2) / (27 + 9 x^2), clipped: within 2% of tanh."""
    x = np.asarray(x)
    y = x * (27 + x * x) / (27 + 9 * x * x)
    return np.asarray(np.clip(y, -1, 1), dtype=x.dtype)


def rsqrt_pow(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.power(x, x.dtype.type(-0.5)))


MASK_CLASSES: tuple[ErrorClass, ...] = (
    ErrorClass("equal elements", "lt as le and gt as ge: equal elements compare true", _row_in(("lt", "gt")),
               _strict_as_loose),
    ErrorClass("nan", "eq as !(a < b || a > b): NaN compares equal", _row_in(("eq", "ne"), FLOATS), _nan_equal),
    ErrorClass("signed zero", "eq on the bits: -0.0 and +0.0 compare unequal", _row_in(("eq", "ne"), FLOATS),
               _bits_equal),
    ErrorClass("swapped", "where with its branches swapped", _row_in(("where",)), _swapped),
    ErrorClass("fast tanh", "tanh by the rational approximation x (27 + x^2) / (27 + 9 x^2)",
               _row_in(("tanh",), FLOATS), _unary(fast_tanh)),
    ErrorClass("pow", "rsqrt as pow(x, -0.5), not 1 / sqrt(x)", _row_in(("rsqrt",), FLOATS), _unary(rsqrt_pow)),
    ErrorClass("cancellation", "sigmoid as (1 + tanh(x / 2)) / 2, which cancels to 0 for large negative x",
               _row_in(("sigmoid",), FLOATS), _unary(_sigmoid_by_tanh)),
)
