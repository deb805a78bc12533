"""How far a backend's value may stray from the global reference.

DESIGN ("Numerics") fixes the slack of one float reduction of n terms:
`n * eps(dtype) * sum(|x_i|)`, none on integer-valued data that sums exactly,
none for data movement and integers. A program chains ops after reductions, so
the slack is carried forward, one rule per op, to a bound per result element:

- 0 means bit-exact (up to NaN payloads and the sign of zero);
- a finite bound applies to finite reference values; a non-finite reference
  value (NaN, an infinity) must be matched exactly;
- infinity means unconstrained: the value depends on the order of operations
  beyond what the model can bound (an overflow some order may hit, a float
  error crossing an integer cast).

Correctly rounded ops (+ - * / sqrt, conversions) add no slack to exact
operands, since every backend rounds them the same; exp and log do (GPUs give
them a few ulps).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from math import prod

import numpy as np

from interp.global_eval import eval_global
from refir import ops
from refir.program import Lit, Sym, Var
from refir.tables import registrar
from refir.types import Bindings, finfo, is_float
from refir.verify import Checked

Rule = Callable[..., np.ndarray]
BOUNDS: dict[type, Rule] = {}
TRANSCENDENTAL_ULPS = 4


rule = registrar(BOUNDS)


def reference(checked: Checked, inputs: dict[str, np.ndarray],
              bindings: Bindings) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The global value and the error bound of every value of the function."""
    func = checked.func
    every = replace(checked, func=replace(func, results=tuple(p.name for p in func.params)
                                          + tuple(e.out for e in func.eqns)))
    values = eval_global(every, inputs, bindings)
    bounds = {p.name: np.zeros(np.shape(values[p.name])) for p in func.params}
    with np.errstate(all="ignore"):
        for e in func.eqns:
            dtype = checked.types[e.out].np_dtype
            tensors = [values[a.name] for a in e.args if isinstance(a, Var)]
            xs = [_f64(_operand(a, values, bindings, tensors[0].dtype)) for a in e.args]
            bs = [bounds[a.name] if isinstance(a, Var) else np.zeros(()) for a in e.args]
            r = _f64(values[e.out])
            b = BOUNDS[type(e.op)](e.op, xs, bs, r, dtype)
            bounds[e.out] = _settle(np.broadcast_to(b, r.shape), r, dtype)
    return values, bounds


def _operand(a: object, values: dict[str, np.ndarray], bindings: Bindings, dtype: np.dtype) -> np.ndarray:
    if isinstance(a, Var):
        return values[a.name]
    value = bindings[a.name] if isinstance(a, Sym) else a.value if isinstance(a, Lit) else a
    return np.array(value).astype(dtype)


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _settle(b: np.ndarray, r: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Integers are exact or unconstrained; a float near overflow is unconstrained."""
    b = np.where(np.isnan(b), np.inf, b)
    if not is_float(dtype):
        return np.where(b > 0, np.inf, 0.0)
    return np.where(np.isfinite(r) & (np.abs(r) + b > float(finfo(dtype).max)), np.inf, b)


def eps(dtype: np.dtype) -> float:
    return float(finfo(dtype).eps) if is_float(dtype) else 0.0


def ulp(r: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """One rounding of the result (relative eps, plus the subnormal floor)."""
    if not is_float(dtype):
        return np.zeros_like(r)
    return np.where(np.isfinite(r), eps(dtype) * np.abs(r) + float(finfo(dtype).smallest_subnormal), 0.0)


def rounded(b: np.ndarray, r: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """An inexact operand makes a correctly rounded result inexact by one more rounding."""
    return np.where(b > 0, b + ulp(r, dtype), 0.0)


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


@rule(ops.Binary)
def _binary(op: ops.Binary, xs: list[np.ndarray], bs: list[np.ndarray], r: np.ndarray,
            dtype: np.dtype) -> np.ndarray:
    (a, b), (ba, bb) = xs, bs
    if op.name in ("maximum", "minimum"):
        return np.maximum(ba, bb)
    if op.name in ("add", "sub"):
        carried = ba + bb
    elif op.name == "mul":
        carried = scaled(a, bb) + scaled(b, ba) + ba * bb
    else:  # div: the divisor's error matters relative to its distance from zero
        room = np.abs(b) - bb
        carried = np.where(room > 0, (ba + scaled(r, bb)) / np.where(room > 0, room, 1.0), np.inf)
        carried = np.where((ba == 0) & (bb == 0), 0.0, carried)
    return rounded(carried, r, dtype)


@rule(ops.Unary)
def _unary(op: ops.Unary, xs: list[np.ndarray], bs: list[np.ndarray], r: np.ndarray,
           dtype: np.dtype) -> np.ndarray:
    (x,), (b,) = xs, bs
    if op.name in ("neg", "abs", "relu"):
        return b
    if op.name == "sqrt":  # |sqrt(u) - sqrt(v)| <= sqrt(|u - v|)
        return rounded(np.sqrt(b), r, dtype)
    if op.name == "exp":
        carried = scaled(r, np.expm1(b))
    else:  # log
        room = x - b
        carried = np.where(b == 0, 0.0, np.where(room > 0, -np.log1p(-b / np.where(x > 0, x, 1.0)), np.inf))
    return carried + TRANSCENDENTAL_ULPS * ulp(r, dtype)


@rule(ops.Cast)
def _cast(op: ops.Cast, xs: list[np.ndarray], bs: list[np.ndarray], r: np.ndarray,
          dtype: np.dtype) -> np.ndarray:
    return rounded(bs[0], r, dtype)  # _settle makes an inexact float cast to an integer unconstrained


@rule(ops.Permute, ops.Unsqueeze, ops.Set)
def _movement(op: object, xs: list[np.ndarray], bs: list[np.ndarray], r: np.ndarray,
              dtype: np.dtype) -> np.ndarray:
    if isinstance(op, ops.Permute):
        return np.transpose(bs[0], op.perm)
    if isinstance(op, ops.Unsqueeze):
        return np.expand_dims(bs[0], op.dims)
    return bs[0]


@rule(ops.Reduction)
def _reduction(op: ops.Reduction, xs: list[np.ndarray], bs: list[np.ndarray], r: np.ndarray,
               dtype: np.dtype) -> np.ndarray:
    (x,), (b,), dims = xs, bs, tuple(op.dims)
    if op.kind not in ("sum", "prod"):  # max, min and bitwise folds round nothing
        return np.max(b, axis=dims, initial=0.0)
    n = prod(x.shape[d] for d in dims)
    mag = finite_abs(x)
    exact_terms = np.all(exactly_integer(x, b), axis=dims)
    if op.kind == "sum":
        total = np.sum(mag, axis=dims)
        new = np.where(exact_terms & (total <= exact_limit(dtype)), 0.0, n * eps(dtype) * total)
        return np.where(total > float(finfo(dtype).max) if is_float(dtype) else False, np.inf,
                        np.sum(b, axis=dims) + new)
    # prod: relative errors add up; a partial product that may over- or
    # underflow in some order leaves the result unconstrained.
    big = np.prod(np.maximum(mag, 1.0), axis=dims)
    small = np.prod(np.where(mag > 0, np.minimum(mag, 1.0), 1.0), axis=dims)
    relative = np.sum(np.where(b == 0, 0.0, np.where(mag > b, b / np.where(mag > b, mag - b, 1.0), np.inf)),
                      axis=dims)
    bound = np.where(exact_terms & (big <= exact_limit(dtype)), 0.0, np.abs(r) * (n * eps(dtype) + relative))
    if not is_float(dtype):
        return bound
    info = finfo(dtype)
    return np.where((big > float(info.max)) | (small < float(info.tiny)), np.inf, bound)


@rule(ops.Matmul)
def _matmul(op: ops.Matmul, xs: list[np.ndarray], bs: list[np.ndarray], r: np.ndarray,
            dtype: np.dtype) -> np.ndarray:
    (a, b), (ba, bb) = xs, bs
    ma, mb = finite_abs(a), finite_abs(b)
    carried = ma @ bb + ba @ mb + ba @ bb
    total = ma @ mb
    # Output (m, n) is exact when row m of a and column n of b are integers that sum exactly.
    rows, cols = np.all(exactly_integer(a, ba), axis=-1), np.all(exactly_integer(b, bb), axis=-2)
    exact = rows[..., :, None] & cols[..., None, :] & (total <= exact_limit(dtype))
    bound = carried + np.where(exact, 0.0, a.shape[-1] * eps(dtype) * total)
    if not is_float(dtype):
        return bound
    return np.where(total > float(finfo(dtype).max), np.inf, bound)
