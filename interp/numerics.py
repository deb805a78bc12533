"""The numerics model's arithmetic: what one rounding costs, in each of its two uses.

A bound is carried forward one rule per op (interp/error_bounds.py) under a
`Model` that says what it measures:

- `CONFORM`: how far a conforming backend's value may stray from the global
  reference (docs/spec.md §10, `num_c1`..`num_c6`). A correctly rounded op on
  exact operands costs nothing: every backend rounds it alike.
- `REFERENCE`: how far the global reference is from exact real arithmetic on
  the inputs (`num_x1`..`num_x6`): every rounding counts, half an ulp of the
  result's dtype for a correctly rounded op; sums and products run in float64
  and round once, as interp/impls.py computes them.
- `expression(dtype)`: how far an expect expression evaluated in `dtype` is
  from exact arithmetic, taking it to compute the program's ops with every
  float rounded in `dtype` (`num_x7`), its reductions in any order.

An expect line then holds when `|got - want| <= CONFORM + REFERENCE +
expression` (`num_x8`): got is within CONFORM of the reference, the reference
within REFERENCE of the exact value, and want within the expression's bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refir.ir.types import as_dtype, finfo, is_float

TRANSCENDENTAL_ULPS = 4  # exp and log, on a GPU or in numpy


@dataclass(frozen=True)
class Model:
    exact: bool = False  # against exact arithmetic, not against the reference
    precision: np.dtype | None = None  # exact: every float rounds in this dtype (an expect expression's)

    def dtype(self, dtype: np.dtype) -> np.dtype:
        """The dtype a float result rounds in under this model."""
        return self.precision if self.precision is not None and is_float(dtype) else dtype

    @property
    def wide(self) -> bool:
        """Whether sums and products accumulate in float64 and round once (the reference)."""
        return self.exact and self.precision is None


CONFORM = Model()
REFERENCE = Model(exact=True)


def expression(dtype: np.dtype) -> Model:
    return Model(exact=True, precision=np.dtype(dtype))


def eps(dtype: np.dtype) -> float:
    return float(finfo(dtype).eps) if is_float(dtype) else 0.0


def ulp(r: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """One rounding of the result (relative eps, plus the subnormal floor)."""
    if not is_float(dtype):
        return np.zeros_like(r)
    return np.where(np.isfinite(r), eps(dtype) * np.abs(r) + float(finfo(dtype).smallest_subnormal), 0.0)


def half_ulp(m: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Half the spacing of `dtype`'s floats in the binade of |m|: the most a
    round-to-nearest to a value of magnitude |m| moves it (a value rounded up
    to a power of two moved at most half the spacing below it, less still)."""
    if not is_float(dtype):
        return np.zeros(np.shape(m))
    info = finfo(dtype)
    m = np.abs(np.asarray(m, dtype=np.float64))
    _, e = np.frexp(np.where(np.isfinite(m) & (m > 0), m, 1.0))  # m = f * 2**e, f in [0.5, 1)
    spacing = np.maximum(float(info.eps) * np.ldexp(1.0, e - 1), float(info.smallest_subnormal))
    return np.where(np.isfinite(m), 0.5 * np.where(m > 0, spacing, float(info.smallest_subnormal)), 0.0)


def gamma(n: int | np.ndarray, dtype: np.dtype) -> np.ndarray:
    """gamma_n = n u / (1 - n u), u = eps / 2: the relative error of n roundings
    in a row (a sum of n + 1 terms in any order); infinite once n u >= 1."""
    nu = np.asarray(n, dtype=np.float64) * eps(dtype) / 2
    return np.where(nu < 1, nu / np.where(nu < 1, 1 - nu, 1.0), np.inf)


def rounding(m: Model, carried: np.ndarray, r: np.ndarray, rr: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The bound of a correctly rounded result `r` whose unrounded value is
    within `carried` of its operands' exact one (`rr`: how far r itself may be
    from exact, known only in the expression's model)."""
    if not m.exact:  # an inexact operand makes the result inexact by one more rounding
        return np.where(carried > 0, carried + ulp(r, dtype), 0.0)
    d = m.dtype(dtype)
    # The reference rounds its own value w into r: |r - w| <= half an ulp in r's binade.
    # The expression's value lies within rr + carried of r. A bf16 is reached through
    # float32 (types.as_dtype): (1 + eps) covers the first rounding.
    mag = np.abs(r) if m.precision is None else (np.abs(r) + rr + carried) * (1 + eps(d))
    return carried + half_ulp(mag, d) * (1 + eps(d))


def holds(wide: np.dtype, narrow: np.dtype) -> bool:
    """Whether `wide` holds every value of the float or integer dtype `narrow` exactly."""
    if not is_float(wide):
        return wide == narrow
    if is_float(narrow):
        a, b = finfo(wide), finfo(narrow)
        return a.nmant >= b.nmant and a.maxexp >= b.maxexp and a.minexp <= b.minexp
    bits = 1 if narrow.kind == "b" else 8 * narrow.itemsize - (narrow.kind == "i")
    return finfo(wide).nmant + 1 >= bits


def representation_error(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """|x - x rounded to dtype| (0 where it is exact or not finite), in float64."""
    x = np.asarray(x)
    if not is_float(dtype) or holds(dtype, x.dtype):
        return np.zeros(x.shape)
    with np.errstate(all="ignore"):
        wide = x.astype(np.float64)
        err = np.abs(wide - as_dtype(x, dtype).astype(np.float64))
    return np.where(np.isfinite(err), err, np.where(np.isfinite(wide), np.inf, 0.0))


def scaled(m: np.ndarray, b: np.ndarray) -> np.ndarray:
    """m * b, where an exact operand (b == 0) contributes nothing even if m is infinite."""
    return np.where(b == 0, 0.0, np.abs(m) * b)


def finite_abs(x: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(x), np.abs(x), 0.0)


def exactly_integer(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (b == 0) & np.isfinite(x) & (x == np.round(x))


def exact_limit(dtype: np.dtype) -> float:
    """Integers of at most this magnitude are exact in the dtype."""
    return 2.0 ** (finfo(dtype).nmant + 1) if is_float(dtype) else np.inf


def settle(b: np.ndarray, r: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Integers are exact or unconstrained; a float near overflow is unconstrained."""
    b = np.where(np.isnan(b), np.inf, b)
    if not is_float(dtype):
        return np.where(b > 0, np.inf, 0.0)
    return np.where(np.isfinite(r) & (np.abs(r) + b > float(finfo(dtype).max)), np.inf, b)
