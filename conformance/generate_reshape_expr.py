"""The generator's reshapes of symbolic extents (issue 27; docs/spec.md §5.10,
type_c9): drawn after every other draw of a program (generate.py calls `expression_tail`
last), so older seeds' programs stay as they were and gain at most this tail's results.

A value with a symbolic axis (one of the program's, or a new input's) is split by an
integer that divides every binding (`N -> [2, N/2]`) or by a bound symbol that does
(`N -> [M, N/M]`), or two axes are merged into their product (`[N, 4] -> [4*N]`,
`[M/2, 2] -> [M]`); one extent is sometimes written -1, which the verifier infers
as that expression (reshape_c6). A sharded axis that stays outermost of its group
stays sharded where every binding's blocks split exactly; where they do not, a
`set` first replicates it (conformance/generate_reshape.py's in_the_way). The result
then goes through a permute, an elementwise op, a `set`, a reshape back to the
operand's shape or one adding an extent-1 axis (either maybe through a -1)."""

from __future__ import annotations

from dataclasses import replace
from math import gcd
from typing import TYPE_CHECKING

from conformance.generate_reshape import in_the_way, inferred
from refir.checks.rules_reshape import extents_of
from refir.frontends.builder import Value
from refir.ir.extents import ExtentExpr, Monomial, NotAnExtent, evaluate, symbols_of
from refir.ir.types import Axis, Extent, TensorType

if TYPE_CHECKING:
    from conformance.generate import Maker

Shape = tuple[Extent, ...]


def bindings(m: Maker, names: set[str] | tuple[str, ...]) -> list[dict[str, int]]:
    """The case's bindings of `names`, as generate() zips the symbols' values."""
    return [{s: m.values[s][min(i, len(m.values[s]) - 1)] for s in names} for i in range(2)]


def _symbolic(e: Extent) -> bool:
    return isinstance(e, (str, ExtentExpr))


def _quotient(top: list[Extent], under: list[Extent]) -> Extent | None:
    """The one extent of product(top) / product(under), where an expression writes it."""
    try:
        return (Monomial.of(top) / Monomial.of(under)).as_extent()
    except NotAnExtent:
        return None


def shapes(m: Maker, t: TensorType) -> list[Shape]:
    """Every split and merge of `t`'s extents this tail may draw, as result shapes."""
    xs, out = extents_of(t), []
    bound = m.bound_symbols()
    for i, e in enumerate(xs):
        if not _symbolic(e) or t.rank >= 4:
            continue
        binds = bindings(m, symbols_of(e))
        values = [evaluate(e, b) for b in binds]
        common = gcd(*values)
        parts: list[Extent] = [f for f in (2, 3, 4) if common and common % f == 0]
        parts += [s for s in bound if s not in symbols_of(e)
                  and all(b[s] and v % b[s] == 0 for v, b in zip(values, bindings(m, (*symbols_of(e), s))))]
        for f in parts:
            rest = _quotient([e], [f])
            if rest is not None:
                out += [(*xs[:i], f, rest, *xs[i + 1:]), (*xs[:i], rest, f, *xs[i + 1:])]
    for i in range(len(xs) - 1):
        if _symbolic(xs[i]) or _symbolic(xs[i + 1]):
            merged = _quotient([xs[i], xs[i + 1]], [])
            if merged is not None:
                out.append((*xs[:i], merged, *xs[i + 2:]))
    return out


def _with_minus_one(m: Maker, shape: Shape) -> list[Extent]:
    given = list(shape)
    if given and m.c.maybe(50):  # numpy's -1: the verifier infers the extent, an expression too
        given[m.c.below(len(given))] = -1
    return given


def reshape_to(m: Maker, x: Value, shape: Shape) -> Value:
    t = x.type
    way = in_the_way(t, shape, m.values, bindings(m, set(t.symbols()) | {s for e in shape for s in symbols_of(e)}))
    if way:
        whole = t.with_sharding({k: v for k, v in t.sharding().items() if k not in way})
        x = x.set(**m.out(replace(whole, layout=m.layout(t.rank))))
        t = x.type
    return x.reshape(_with_minus_one(m, shape), **m.out(m.relaid(inferred(t, shape))))


def _source(m: Maker, made: list[Value]) -> Value | None:
    symbolic = [v for v in made if any(_symbolic(a.extent) and not a.broadcast for a in v.type.axes)
                and v.type.rank < 4]
    if symbolic and m.c.maybe(60):
        return m.c.pick(symbolic)  # type: ignore[return-value]
    if not m.units:
        return None
    s = m.c.pick(sorted(m.units))
    axes = [Axis(s), *m.fresh_axes(m.c.below(3), 64 // max(m.values[s]))]  # type: ignore[arg-type]
    at = m.c.below(len(axes))
    axes.insert(at, axes.pop(0))
    return m.param(m.placed(m.c.pick(("f32", "i32", "f64", "bf16")), tuple(axes)))


def expression_tail(m: Maker, made: list[Value]) -> list[Value]:
    """Maybe a reshape with extent expressions (and a -1) and what follows it: the
    values to add to the program's results."""
    if not m.c.maybe(40):
        return []
    x = _source(m, made)
    options = shapes(m, x.type) if x is not None else []
    if x is None or not options:
        return []
    before = extents_of(x.type)
    y = reshape_to(m, x, m.c.pick(options))  # type: ignore[arg-type]
    t = y.type
    kind = m.c.below(5)
    if kind == 0:
        y = m.permute(y, t)
    elif kind == 1 and t.dtype != "bool":
        y = m.unary(y, t)
    elif kind == 2:
        y = m.set(y, t)
    elif kind == 3 or t.rank >= 4:  # back to the operand's extents, one maybe -1: a merge of the expressions
        y = reshape_to(m, y, tuple(before))
    else:  # an extent-1 axis added beside the expressions, a group of its own (a -1 may stand for either)
        at = m.c.below(t.rank + 1)
        y = reshape_to(m, y, (*extents_of(t)[:at], 1, *extents_of(t)[at:]))
    return [y]
