"""Error classes: for each op, a common wrong implementation that only some
values tell apart from the spec's, and which data does.

Reaching an op is not testing it: `a * (1 / b)` agrees with `a / b` on small
integers, a cast that rounds ties away from zero agrees with nearest-even on
everything but exact ties, a max that drops a NaN coming second agrees with
one that keeps it until a NaN lies in a later block. A class is *exposed* by a
case when the wrong implementation, put in place of one equation and carried
through the rest of the program, changes a result beyond what the comparator
allows (conformance/bounds.py): then a backend with that bug fails the case.
`conform --coverage` reports, per op and operand dtype, which classes the
run's data exposed (conformance/coverage.py); the `edge` data kind
(conformance/data.py) holds a pool of values for each; the data mutants
(conformance/mutants/data.py) are some of these wrong implementations.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from conformance.cases import Case
from conformance.compare import bad_elements
from conformance.data import _narrower
from conformance.error_class import ErrorClass, Site
from conformance.mask_classes import MASK_CLASSES
from conformance.reshape_classes import RESHAPE_CLASSES
from conformance.window_classes import WINDOW_CLASSES
from interp.impls import COMBINE, cast, compute, identity, reduction, scalar_value
from interp.masks import value_dtype
from refir.ir import ops
from refir.ir.program import Lit, Sym, Var
from refir.ir.types import DTYPES, FLOATS, INTEGERS, as_dtype, axis_block, block, finfo, resolved


def _d(name: str) -> np.dtype:
    return DTYPES[name]


def _floats(rows: tuple[str, ...]) -> Callable[[str, str], bool]:
    return lambda row, dtype: row in rows and dtype in FLOATS


def _one(dtype: np.dtype) -> np.ndarray:
    return np.ones((), dtype)


# ---- elementwise -------------------------------------------------------------------------


def recip_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Division as a times the reciprocal of b, each rounded in the dtype."""
    return np.multiply(a, np.divide(_one(a.dtype), b))


def rsqrt_sqrt(x: np.ndarray) -> np.ndarray:
    """sqrt(x) as x * (1 / sqrt(x)): inexact, and NaN at 0."""
    return np.multiply(x, np.divide(_one(x.dtype), np.sqrt(x)))


def exp2_exp(x: np.ndarray) -> np.ndarray:
    """exp(x) as exp2(x * log2(e)), the product rounded in the dtype (fast-math
    __expf): the product's rounding grows with |x|."""
    scaled = as_dtype(x.astype(np.float64) * np.log2(np.e), x.dtype).astype(np.float64)
    return as_dtype(np.exp2(scaled), x.dtype)


def reduced_log(x: np.ndarray) -> np.ndarray:
    """log(x) as log(m) + e * ln 2 with m in [1, 2), each rounded in the dtype:
    below 1 the two terms cancel and the result keeps only absolute accuracy."""
    x64 = x.astype(np.float64)
    m, e = np.frexp(x64)
    d = x.dtype
    parts = as_dtype(np.log(2 * m), d).astype(np.float64) + as_dtype((e - 1) * np.log(2.0), d).astype(np.float64)
    good = np.isfinite(x64) & (x64 > 0)
    return as_dtype(np.where(good, parts, np.log(np.where(good, 1.0, x64))), d)


def ftz(x: np.ndarray) -> np.ndarray:
    tiny = float(finfo(x.dtype).tiny)
    return np.where((np.abs(x.astype(np.float64)) < tiny) & (x != 0), np.zeros((), x.dtype), x).astype(x.dtype)


def _ftz_binary(s: Site) -> np.ndarray:
    a, b = (ftz(v) for v in s.args)
    return ftz(compute(s.op, [a, b], s.dtype))


def _saturating(s: Site) -> np.ndarray:
    """Integer add, sub, mul clipped to the dtype's range instead of wrapping."""
    info = np.iinfo(s.dtype)
    a, b = (v.astype(object) for v in s.args)
    exact = {"add": a + b, "sub": a - b, "mul": a * b}[s.op.name]
    return np.clip(exact, int(info.min), int(info.max)).astype(s.dtype)


def _min_saturates(s: Site) -> np.ndarray:
    x = s.args[0]
    info = np.iinfo(x.dtype)
    return np.where(x == info.min, x.dtype.type(info.max), compute(s.op, [x], s.dtype))


# ---- reductions --------------------------------------------------------------------------


def ternary_fold(kind: str, x: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """max/min as `acc = v if v > acc else acc`, element by element: a NaN
    after the first is dropped."""
    rest = [a for a in range(x.ndim) if a not in dims]
    y = np.transpose(x, rest + list(dims)).reshape([x.shape[a] for a in rest] + [-1])
    acc = y[..., 0]
    for k in range(1, y.shape[-1]):
        v = y[..., k]
        acc = np.where(v > acc if kind == "max" else v < acc, v, acc)
    return np.asarray(acc, x.dtype)


def _blocks(s: Site) -> tuple[int, list[tuple[int, int]]] | None:
    """The first reduced axis that is sharded, and its blocks in team order."""
    t, op = s.types[0], s.op
    for d in op.dims:
        a = t.axes[d] if t is not None else None
        if a is not None and a.nested:  # a team along the nest's mesh axes, in team (mesh) order
            return d, [axis_block(t.mesh, a, int(a.extent), k) for k in t.mesh.teams(a.dids)[0]]
        if a is not None and a.shard:
            n = t.mesh.size(a.shard)
            return d, [block(int(a.extent), n, k) for k in range(n)]
    return None


def blockwise(s: Site, empty: Callable[[np.ndarray], np.ndarray] | None = None,
              combine: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None) -> np.ndarray | None:
    """The reduction device by device along its first sharded reduced axis:
    each block reduced (an empty one to `empty(identity)`), the partials
    folded in team order with `combine`."""
    cut = _blocks(s)
    if cut is None:
        return None
    d, blocks = cut
    op, x = s.op, s.args[0]
    partials = []
    for lo, hi in blocks:
        part = reduction(op, x[(slice(None),) * d + (slice(lo, hi),)])
        partials.append(empty(part) if hi == lo and empty is not None else part)
    fold = combine or COMBINE[op.kind]
    acc = partials[0]
    for p in partials[1:]:
        acc = as_dtype(np.asarray(fold(acc, p)), x.dtype)
    return acc


def _not_identity(s: Site) -> Callable[[np.ndarray], np.ndarray]:
    ident = identity(s.op.kind, s.args[0].dtype)
    wrong = s.args[0].dtype.type(0 if ident != 0 else 1)
    return lambda part: np.full_like(part, wrong)


def _empty_block(s: Site) -> np.ndarray | None:
    cut = _blocks(s)
    if cut is None or all(hi > lo for lo, hi in cut[1]):
        return None
    return blockwise(s, empty=_not_identity(s))


def _nan_later_block(s: Site) -> np.ndarray | None:
    kind = s.op.kind
    return blockwise(s, combine=lambda a, b: np.where(b > a if kind == "max" else b < a, b, a))


# ---- casts -------------------------------------------------------------------------------


def _cast_to(row: str) -> str:
    return row.removeprefix("cast to ")


def _arrives(x: np.ndarray, to: np.dtype) -> np.ndarray:
    """The value a cast rounds: a value reaches bf16 through float32 (spec section 2)."""
    if to == _d("bf16") and x.dtype not in (_d("f32"), _d("bf16")):
        return x.astype(np.float32)
    return x


def _neighbour(y: np.ndarray, step: int) -> np.ndarray:
    """The next float of y's dtype away from zero (step 1) or toward it (-1; zero stays)."""
    u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[y.dtype.itemsize]
    bits = np.ascontiguousarray(y).view(u)
    magnitude = bits & u((1 << (8 * y.dtype.itemsize - 1)) - 1)
    moved = bits + u(1) if step > 0 else np.where(magnitude == 0, bits, bits - u(1))
    return np.asarray(moved, u).view(y.dtype)


def ties_away(x: np.ndarray, to: np.dtype) -> np.ndarray:
    """Rounding to nearest with ties away from zero (bf16 as `(bits + 0x8000) >> 16`)."""
    x = _arrives(x, to)
    y = as_dtype(x, to)
    away = _neighbour(y, 1)
    xl, yl, al = (v.astype(np.longdouble) for v in (x, y, away))
    tie = np.isfinite(yl) & np.isfinite(al) & (np.abs(al) > np.abs(yl)) & (xl == (yl + al) / 2)
    return np.where(tie, away, y)


def truncating(x: np.ndarray, to: np.dtype) -> np.ndarray:
    """Rounding toward zero (dropping the low bits)."""
    x = _arrives(x, to)
    y = as_dtype(x, to)
    xl, yl = x.astype(np.longdouble), y.astype(np.longdouble)
    over = ~np.isnan(yl) & np.isfinite(xl) & (np.abs(yl) > np.abs(xl))
    return np.where(over, _neighbour(y, -1), y)


def _narrowing_float(row: str, dtype: str) -> bool:
    """A cast to a float that cannot hold every value of the operand's dtype."""
    if not row.startswith("cast to ") or _cast_to(row) not in FLOATS or dtype == "bool":
        return False
    to, src = _d(_cast_to(row)), _d(dtype)
    if dtype in FLOATS:
        return _cast_to(row) in _narrower(src)
    return np.iinfo(src).bits - (np.iinfo(src).kind == "i") > finfo(to).nmant + 1


def _double_rounding(s: Site) -> np.ndarray:
    x = s.args[0]
    via = np.float32 if x.dtype == np.float64 else np.float64
    return x.astype(via).astype(s.dtype)


def _direct_bf16(s: Site) -> np.ndarray:
    """The value rounded once, straight to bf16's 8 significant bits (ties to even),
    worked out in float64: ml-dtypes' own f64 -> bf16 cast goes through float32 in
    some versions (0.6) and not in others (0.7), so it cannot stand for either."""
    x = s.args[0].astype(np.float64)
    with np.errstate(all="ignore"):
        m, e = np.frexp(x)
        normal = np.ldexp(np.rint(np.ldexp(m, 8)), e - 8)
        tiny = np.rint(np.ldexp(x, 133)) * 2.0 ** -133  # bf16's subnormals: multiples of 2^-133
        rounded = np.where(np.abs(x) < 2.0 ** -126, tiny, normal)
        rounded = np.where(np.isfinite(x), rounded, x)
    return rounded.astype(np.float32).astype(s.dtype)  # exact: the value has bf16's precision already


def _x86_truncation(s: Site) -> np.ndarray:
    """cvttsd2si: NaN and anything beyond int64 become INT64_MIN; then wrapped into the target."""
    t = np.trunc(s.args[0].astype(np.float64))
    bad = np.isnan(t) | (t >= 2.0 ** 63) | (t < -(2.0 ** 63))
    return np.where(bad, np.iinfo(np.int64).min, np.where(bad, 0, t).astype(np.int64)).astype(s.dtype)


def _float_to_int(row: str, dtype: str) -> bool:
    return row.startswith("cast to ") and _cast_to(row) in INTEGERS and dtype in FLOATS


def _float_to_signed(row: str, dtype: str) -> bool:
    return _float_to_int(row, dtype) and _cast_to(row) != "u8"  # to u8 a negative saturates to 0 either way


def _int_narrowing(row: str, dtype: str) -> bool:
    if not (row.startswith("cast to ") and _cast_to(row) in INTEGERS and dtype in INTEGERS):
        return False
    src, to = np.iinfo(_d(dtype)), np.iinfo(_d(_cast_to(row)))
    return src.min < to.min or src.max > to.max


CLASSES: tuple[ErrorClass, ...] = (
    ErrorClass("a*(1/b)", "division as a times the reciprocal of b", _floats(("div",)),
               lambda s: recip_div(*s.args)),
    ErrorClass("flush to zero", "subnormal operands and results flushed to zero (fast-math -ftz)",
               _floats(("add", "sub", "mul", "div")), _ftz_binary),
    ErrorClass("x*rsqrt(x)", "sqrt as x times the reciprocal square root", _floats(("sqrt",)),
               lambda s: rsqrt_sqrt(s.args[0])),
    ErrorClass("exp2(x*log2 e)", "exp through exp2 of a product rounded in the dtype (fast-math __expf)",
               lambda row, d: row == "exp" and d in FLOATS - {"f16"},  # on f16 it stays within 4 ulps
               lambda s: exp2_exp(s.args[0])),
    ErrorClass("log(m)+e*ln2", "log range-reduced to [1, 2): below 1 the terms cancel", _floats(("log",)),
               lambda s: reduced_log(s.args[0])),
    ErrorClass("NaN operand", "maximum/minimum that return the number beside a NaN (fmax, fmin)",
               _floats(("maximum", "minimum")),
               lambda s: (np.fmax if s.op.name == "maximum" else np.fmin)(*s.args)),
    ErrorClass("NaN operand", "relu as x > 0 ? x : 0, which sends NaN to 0", _floats(("relu",)),
               lambda s: np.where(s.args[0] > 0, s.args[0], np.zeros((), s.dtype))),
    ErrorClass("saturation", "integer arithmetic that saturates instead of wrapping",
               lambda row, d: row in ("add", "sub", "mul") and d in INTEGERS, _saturating),
    ErrorClass("the minimum", "neg and abs of the type's minimum saturating instead of wrapping",
               lambda row, d: row in ("neg", "abs") and d in INTEGERS - {"u8"}, _min_saturates),
    ErrorClass("NaN after the first", "max/min folded as v > acc ? v : acc, dropping a NaN that comes later",
               _floats(("max", "min")), lambda s: ternary_fold(s.op.kind, s.args[0], s.op.dims)),
    ErrorClass("NaN in a later block", "partials combined across devices as p > acc ? p : acc, dropping a NaN "
               "that a device after the first holds", _floats(("max", "min")), _nan_later_block),
    ErrorClass("empty block", "a device whose block of a reduced axis is empty contributing something other "
               "than the identity", lambda row, d: row in ops.REDUCTIONS, _empty_block),
    ErrorClass("ties to even", "rounding ties away from zero (bf16 as (bits + 0x8000) >> 16)", _narrowing_float,
               lambda s: ties_away(s.args[0], s.dtype)),
    ErrorClass("rounding", "truncation of the bits a narrower float cannot hold", _narrowing_float,
               lambda s: truncating(s.args[0], s.dtype)),
    ErrorClass("double rounding", "a rounding through an intermediate type (f64 via f32, i64 via f64)",
               lambda row, d: (row, d) in (("cast to f16", "f64"), ("cast to f32", "i64")), _double_rounding),
    ErrorClass("through f32", "bf16 rounded directly, not through float32 as spec section 2 says",
               lambda row, d: row == "cast to bf16" and d in ("f64", "i32", "i64"), _direct_bf16),
    ErrorClass("toward zero", "float to integer rounding down (floor), not toward zero", _float_to_signed,
               lambda s: cast(s.op, np.floor(s.args[0].astype(np.float64)))),
    ErrorClass("saturation", "float to integer as x86 cvtt: NaN and overflow to INT64_MIN, then wrapped",
               _float_to_int, _x86_truncation),
    ErrorClass("fractions", "float to bool through an integer, which sends 0.5 and NaN to False",
               lambda row, d: row == "cast to bool" and d in FLOATS,
               lambda s: np.where(np.isnan(s.args[0]), False, np.trunc(s.args[0].astype(np.float64)) != 0)),
    ErrorClass("wrapping", "a narrowing integer cast that saturates instead of wrapping", _int_narrowing,
               lambda s: np.clip(s.args[0], np.iinfo(s.dtype).min, np.iinfo(s.dtype).max).astype(s.dtype)),
)



CLASSES += RESHAPE_CLASSES


def classes_of(row: str, dtype: str) -> list[ErrorClass]:
    return [c for c in CLASSES if c.applies(row, dtype)]


# ---- which classes a case exposes --------------------------------------------------------


def label(op: object) -> str:
    return f"cast to {op.dtype}" if isinstance(op, ops.Cast) else ops.op_name(op)


def _args(eqn: object, env: dict[str, np.ndarray], bindings: dict[str, int]) -> list:
    return [env[a.name] if isinstance(a, Var) else bindings[a.name] if isinstance(a, Sym)
            else a.value if isinstance(a, Lit) else a for a in eqn.args]


def exposed(case: Case) -> set[tuple[str, str, str]]:
    """(row, operand dtype, class) for every class this case's data exposes."""
    from conformance.bounds import reference
    from conformance.check import quiet

    checked, bindings = case.checked, case.bindings
    with quiet():
        try:
            values, bounds = reference(checked, case.inputs(), bindings)
        except Exception:
            return set()  # a case whose reference fails exposes nothing (the suite reports it)
        found: set[tuple[str, str, str]] = set()
        eqns = checked.func.eqns
        for i, e in enumerate(eqns):
            tensors = [a.name for a in (e.args[1:] if isinstance(e.op, ops.Where) else e.args) if isinstance(a, Var)]
            src, row = checked.types[tensors[0]] if tensors else checked.types[e.out], label(e.op)
            todo = [c for c in classes_of(row, src.dtype) if (row, src.dtype, c.name) not in found]
            if not todo:
                continue
            raw = _args(e, values, bindings)
            extents = isinstance(e.op, ops.Reshape)  # its symbols are extents, not values: a bool's 6 is no True
            site = Site(e.op, [a if isinstance(a, np.ndarray) or extents else scalar_value(a, src.np_dtype)
                               for a in raw],
                        [resolved(checked.types[a.name], bindings) if isinstance(a, Var) else None
                         for a in e.args], checked.types[e.out].np_dtype)
            for c in todo:
                wrong = c.value(site)
                if wrong is not None and _changes_a_result(checked, values, bounds, bindings, i,
                                                           as_dtype(np.asarray(wrong), site.dtype)):
                    found.add((row, src.dtype, c.name))
    return found


def _changes_a_result(checked: object, values: dict, bounds: dict, bindings: dict[str, int], index: int,
                      wrong: np.ndarray) -> bool:
    """Whether `wrong` in place of equation `index`, carried through the rest
    of the program, puts some result outside the comparator's bound."""
    eqns = checked.func.eqns
    out = eqns[index].out
    if not bad_elements(wrong, values[out], bounds[out]).any():
        return False
    env = dict(values)
    env[out] = wrong
    for e in eqns[index + 1:]:
        raw = _args(e, env, bindings)
        if isinstance(e.op, ops.Iota):  # no operands: nothing upstream changes it
            continue
        result = compute(e.op, raw, value_dtype(e.op, raw))
        want = checked.types[e.out].np_dtype
        env[e.out] = result if result.dtype == want else as_dtype(result, want)
    return any(bad_elements(np.asarray(env[r]), values[r], bounds[r]).any() for r in checked.func.results)


CLASSES = CLASSES + MASK_CLASSES  # comparisons, where, unary (conformance/mask_classes.py)
CLASSES = CLASSES + WINDOW_CLASSES  # slice, select, pad, cat along a sharded axis (conformance/window_classes.py)
