"""The numerics model's rules, one per op, carried forward to a bound per element.

`propagate` walks a function's equations over the global values of every
value (the reference's), and gives each element a bound under a Model
(interp/numerics.py says which error each model measures):

- 0 means bit-exact (up to NaN payloads and the sign of zero);
- a finite bound applies to finite reference values; a non-finite reference
  value (NaN, an infinity) must be matched exactly;
- infinity means unconstrained: the value depends on the order of operations
  beyond what the model can bound (an overflow some order may hit, a float
  error crossing an integer cast).

docs/spec.md §10 states every rule (`num_c*` against the reference, `num_x*`
against exact arithmetic). Each rule sees the operands' reference values `xs`,
their bounds `bs`, and, against exact arithmetic, `rs`: how far each reference
value may itself be from exact (its magnitude is only known to within that).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from math import prod

import numpy as np

from interp import numerics as nx
from interp.global_eval import eval_global
from interp.impls import scalar_value
from interp.numerics import TRANSCENDENTAL_ULPS, Model, eps, exact_limit, exactly_integer, finite_abs, gamma, ulp
from interp.partial_bounds import PartialTerms
from refir.checks.verifier import Checked
from refir.ir import ops
from refir.ir.program import Lit, Sym, Var
from refir.ir.tables import registrar
from refir.ir.types import DTYPES, Bindings, finfo, is_float


@dataclass(frozen=True)
class Operands:
    xs: list[np.ndarray]  # reference values, float64
    bs: list[np.ndarray]  # their bounds under the model
    rs: list[np.ndarray]  # how far each reference value is from exact (zeros against the reference)
    r: np.ndarray  # the reference result, float64
    rr: np.ndarray  # how far r is from exact, where known (the expression's model)
    dtype: np.dtype  # the result's dtype in the program
    src: np.dtype  # the first tensor operand's dtype
    m: Model

    def rounded(self, carried: np.ndarray) -> np.ndarray:
        return nx.rounding(self.m, carried, self.r, self.rr, self.dtype)

    def ulps(self, k: int, carried: np.ndarray) -> np.ndarray:
        """k ulps of a transcendental result: a backend's from the reference's,
        or the reference's (the expression's) own from the exact value."""
        if not self.m.exact:
            return k * ulp(self.r, self.dtype)
        return k * ulp(np.abs(self.r) + self.rr + carried, self.m.dtype(self.dtype))


Rule = Callable[[object, Operands], np.ndarray]
BOUNDS: dict[type, Rule] = {}
rule = registrar(BOUNDS)


def every_value(checked: Checked, inputs: dict[str, np.ndarray], bindings: Bindings) -> dict[str, np.ndarray]:
    """The global value of every parameter and equation of the function."""
    func = checked.func
    every = replace(checked, func=replace(func, results=tuple(p.name for p in func.params)
                                          + tuple(e.out for e in func.eqns)))
    return eval_global(every, inputs, bindings)


def propagate(checked: Checked, values: dict[str, np.ndarray], bindings: Bindings, m: Model,
              radius: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The bound of every value of the function under `m`, given the global
    value of each (`values`). `radius`: each value's REFERENCE bound, for the
    expression's model (the reference model is its own radius)."""
    func = checked.func
    bounds = {p.name: _param_bound(values[p.name], m) for p in func.params}
    own = radius is None
    radius = bounds if own else radius
    partials = PartialTerms(checked, values, bindings) if not m.exact else None  # CONFORM: terms round
    with np.errstate(all="ignore"):
        if partials:
            partials.start()
        for e in func.eqns:
            dtype = checked.types[e.out].np_dtype
            src = _scalar_dtype(e, values, dtype)
            xs, bs, rs = [], [], []
            for a in e.args:
                if isinstance(a, Var):
                    xs.append(_f64(values[a.name]))
                    bs.append(bounds[a.name])
                    rs.append(radius[a.name] if m.exact else np.zeros(()))
                else:  # a literal or symbol, rounded to the tensor dtype
                    value = bindings[a.name] if isinstance(a, Sym) else a.value if isinstance(a, Lit) else a
                    xs.append(_f64(scalar_value(value, src)))
                    exact = _exact_scalar(value) if is_float(src) and m.exact else None
                    bs.append(np.zeros(()) if exact is None else _literal(exact, m.dtype(src)))
                    rs.append(np.zeros(()) if exact is None else _literal(exact, src))
            r = _f64(values[e.out])
            rr = np.zeros(r.shape) if own else radius[e.out]
            b = BOUNDS[type(e.op)](e.op, Operands(xs, bs, rs, r, rr, dtype, src, m))
            if partials:
                b = partials.bound(e, np.broadcast_to(b, r.shape), bounds)
            bounds[e.out] = nx.settle(np.broadcast_to(b, r.shape), r, m.dtype(dtype))
    return bounds


def _scalar_dtype(e: object, values: dict[str, np.ndarray], dtype: np.dtype) -> np.dtype:
    """The dtype a scalar operand of `e` takes: its tensors' (where's values'; iota has none)."""
    args = e.args[1:] if isinstance(e.op, ops.Where) else e.args  # type: ignore[attr-defined]
    return next((values[a.name].dtype for a in args if isinstance(a, Var)), dtype)


def _param_bound(x: np.ndarray, m: Model) -> np.ndarray:
    """An input is exact, unless an expression rounds it to a narrower dtype."""
    if m.precision is None or not is_float(x.dtype):
        return np.zeros(np.shape(x))
    return nx.representation_error(x, m.precision)


def _exact_scalar(value: object) -> np.ndarray:
    """A literal's or symbol's own value, which the program rounds to its tensor's dtype."""
    try:
        return np.array(float(value))  # type: ignore[arg-type]
    except OverflowError:  # an integer past float64: no float is near it
        return np.array(np.nan)


def _literal(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if not is_float(dtype):
        return np.zeros(())
    if np.isinf(value):  # inf and -inf are exact in every float dtype
        return np.zeros(())
    return nx.representation_error(value, dtype) if np.isfinite(value) else np.array(np.inf)


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _mag(x: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The most |exact value| can be, given the reference value x within r of it."""
    return np.abs(x) + r


@rule(ops.Binary)
def _binary(op: ops.Binary, v: Operands) -> np.ndarray:
    (a, b), (ba, bb), (ra, rb) = v.xs, v.bs, v.rs
    if op.name in ("maximum", "minimum"):
        return np.maximum(ba, bb)
    if op.name in ("add", "sub"):
        carried = ba + bb
    elif op.name == "mul":
        carried = nx.scaled(_mag(a, ra), bb) + nx.scaled(_mag(b, rb), ba) + ba * bb
    else:  # div: the divisor's error matters relative to its distance from zero
        low = np.abs(b) - rb  # the least |exact divisor|
        room = low - bb
        quotient = np.abs(v.r) if not v.m.exact else _mag(a, ra) / np.where(low > 0, low, 1.0)
        carried = np.where(room > 0, (ba + nx.scaled(quotient, bb)) / np.where(room > 0, room, 1.0), np.inf)
        carried = np.where((ba == 0) & (bb == 0), 0.0, carried)
    return v.rounded(carried)


# Unary ops whose bound a family module states (name -> bound of (name, operands)).
UNARY_BOUNDS: dict[str, Callable[[str, Operands], np.ndarray]] = {}


@rule(ops.Unary)
def _unary(op: ops.Unary, v: Operands) -> np.ndarray:
    (x,), (b,), (rx,) = v.xs, v.bs, v.rs
    if op.name in ("neg", "abs", "relu"):
        return b
    if op.name == "sqrt":  # |sqrt(u) - sqrt(w)| <= sqrt(|u - w|)
        return v.rounded(np.sqrt(b))
    if op.name in UNARY_BOUNDS:  # tanh erf sigmoid rsqrt sin cos (interp/mask_bounds.py): num_c7, num_x10
        return UNARY_BOUNDS[op.name](op.name, v)
    k = TRANSCENDENTAL_ULPS
    if op.name == "exp":  # |exp(u) - exp(w)| <= exp(w) expm1(|u - w|)
        top = np.abs(v.r) if not v.m.exact else np.abs(v.r) * (1 + 2 * k * eps(v.dtype)) * np.exp(rx)
        carried = nx.scaled(top, np.expm1(b))
    else:  # log
        low = x - rx
        room = low - b
        carried = np.where(b == 0, 0.0, np.where(room > 0, -np.log1p(-b / np.where(low > 0, low, 1.0)), np.inf))
    return carried + v.ulps(k, carried)


@rule(ops.Cast)
def _cast(op: ops.Cast, v: Operands) -> np.ndarray:
    (x,), (b,), (rx,) = v.xs, v.bs, v.rs
    if not v.m.exact:  # settle makes an inexact float cast to an integer unconstrained
        return v.rounded(b)
    to = DTYPES[op.dtype]
    if not is_float(to):  # truncation (or != 0) is decided where every value near x gives one integer
        if not is_float(v.src):
            return b
        width = b + rx
        if to.kind == "b":
            decided = (np.abs(x) > width) | np.isnan(x)
        else:
            decided = np.trunc(x - width) == np.trunc(x + width)
        return np.where((width == 0) | decided, 0.0, np.inf)
    d = v.m.dtype(to)
    if nx.holds(d, v.m.dtype(v.src)):  # a widening cast is exact
        return b
    if not is_float(v.src):  # an integer rounds only beyond the dtype's exact integers
        return np.where(np.abs(x) <= exact_limit(d), b, v.rounded(b))
    return v.rounded(b)


@rule(ops.Permute, ops.Unsqueeze, ops.Expand, ops.Set)
def _movement(op: object, v: Operands) -> np.ndarray:
    if isinstance(op, ops.Permute):
        return np.transpose(v.bs[0], op.perm)
    if isinstance(op, ops.Unsqueeze):
        return np.expand_dims(v.bs[0], op.dims)
    if isinstance(op, ops.Expand):
        return np.broadcast_to(v.bs[0], np.shape(v.r))
    return v.bs[0]


@rule(ops.Reshape)
def _reshape(op: ops.Reshape, v: Operands) -> np.ndarray:
    return np.reshape(v.bs[0], v.r.shape)  # moves elements exactly: each keeps its bound


@rule(ops.Reduction)
def _reduction(op: ops.Reduction, v: Operands) -> np.ndarray:
    (x,), (b,), (rx,), dims, dtype = v.xs, v.bs, v.rs, tuple(op.dims), v.dtype
    if op.kind not in ("sum", "prod"):  # max, min and bitwise folds round nothing
        return np.max(b, axis=dims, initial=0.0)
    n = prod(x.shape[d] for d in dims)
    mag = finite_abs(x) + rx
    exact_terms = np.all(exactly_integer(x, b + rx), axis=dims)
    d = v.m.dtype(dtype)  # the dtype whose range and exact integers count
    limit = exact_limit(d)
    over = (lambda t: t > float(finfo(d).max)) if is_float(d) else (lambda t: np.zeros(np.shape(t), bool))
    if op.kind == "sum":
        total = np.sum(mag + b, axis=dims) if v.m.exact else np.sum(mag, axis=dims)
        new = _fresh(v, n, n - 1, total)
        return np.where(over(total), np.inf,
                        np.sum(b, axis=dims) + np.where(exact_terms & (total <= limit), 0.0, new))
    # prod: relative errors add up; a partial product that may over- or
    # underflow in some order leaves the result unconstrained.
    big = np.prod(np.maximum(mag, 1.0), axis=dims)
    small = np.prod(np.where(mag > 0, np.minimum(finite_abs(x) - rx, 1.0), 1.0), axis=dims)
    low = finite_abs(x) - rx if v.m.exact else mag
    relative = np.sum(np.where(b == 0, 0.0, np.where(low > b, b / np.where(low > b, low - b, 1.0), np.inf)),
                      axis=dims)
    if not v.m.exact:
        bound = np.abs(v.r) * (n * eps(dtype) + relative)
    else:  # |prod e| <= prod(|x| + rx); prod(1 + rho_i) - 1 <= expm1(sum rho_i)
        top = np.prod(mag, axis=dims)
        carried = nx.scaled(top, np.expm1(relative))
        bound = carried + _fresh(v, n, n - 1, top * np.exp(relative))
    bound = np.where(exact_terms & (big <= limit), 0.0, bound)
    if not is_float(dtype):
        return bound
    return np.where(over(big) | (small < float(finfo(d).tiny)), np.inf, bound)


def _fresh(v: Operands, terms: int, roundings: int, total: np.ndarray) -> np.ndarray:
    """What a reduction's own roundings add: `roundings` of them, in some order,
    on `terms` terms whose magnitudes sum to `total` (a product: `total` is its
    magnitude, and each rounding is relative to it)."""
    dtype = v.dtype
    if not v.m.exact:  # num_c3: any order, n * eps * sum |x_i|
        return terms * eps(dtype) * total
    if not is_float(dtype):
        return np.zeros(np.shape(total))
    if v.m.wide:  # num_x3: in float64 (numpy's order), then one rounding to the dtype
        return gamma(roundings, np.dtype(np.float64)) * total + v.rounded(np.zeros(np.shape(total)))
    return gamma(roundings, v.m.dtype(dtype)) * total  # num_x7: the expression's, any order in its dtype


@rule(ops.Matmul)
def _matmul(op: ops.Matmul, v: Operands) -> np.ndarray:
    (a, b), (ba, bb), (ra, rb) = v.xs, v.bs, v.rs
    if np.ndim(a) == 1 or np.ndim(b) == 1:  # np.matmul's promotion of a 1-D operand, undone after
        return _matmul_promoted(op, v)
    ma, mb = finite_abs(a) + ra, finite_abs(b) + rb
    carried = ma @ bb + ba @ mb + ba @ bb
    total = (ma + ba) @ (mb + bb) if v.m.exact else ma @ mb
    # Output (m, n) is exact when row m of a and column n of b are integers that sum exactly.
    rows, cols = np.all(exactly_integer(a, ba + ra), axis=-1), np.all(exactly_integer(b, bb + rb), axis=-2)
    exact = rows[..., :, None] & cols[..., None, :] & (total <= exact_limit(v.m.dtype(v.dtype)))
    k = a.shape[-1]
    bound = carried + np.where(exact, 0.0, _fresh(v, k, k, total))  # k products and k - 1 additions
    if not is_float(v.dtype):
        return bound
    return np.where(total > float(finfo(v.m.dtype(v.dtype)).max), np.inf, bound)


def _matmul_promoted(op: ops.Matmul, v: Operands) -> np.ndarray:
    """The bound of a matmul with a 1-D operand: that of its promoted 2-D form,
    the promoted axis dropped after (as np.matmul drops it)."""
    one_a, one_b = np.ndim(v.xs[0]) == 1, np.ndim(v.xs[1]) == 1

    def lift_result(x: np.ndarray) -> np.ndarray:
        x = np.broadcast_to(x, np.shape(v.r))
        if one_a:
            x = np.expand_dims(x, -1 if one_b else x.ndim - 1)
        return np.expand_dims(x, -1) if one_b else x

    def lift(pair: list[np.ndarray]) -> list[np.ndarray]:
        a, b = (np.broadcast_to(x, np.shape(ref)) for x, ref in zip(pair, v.xs))
        return [a[None, :] if one_a else a, b[:, None] if one_b else b]

    lifted = replace(v, xs=lift(v.xs), bs=lift(v.bs), rs=lift(v.rs), r=lift_result(v.r), rr=lift_result(v.rr))
    out = _matmul(op, lifted)
    if one_a:
        out = out[..., 0, :]
    return out[..., 0] if one_b else out
