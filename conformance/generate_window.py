"""The generator's window ops (slice, select, pad, cat; docs/spec.md §5.8): each
draws its choices on an operand of type `t` and makes one equation through the
builder, as conformance/generate.py's own ops do. Sharded operand axes are
windowed as often as unsharded ones: the gathered path is what needs testing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from conformance.generate_budget import BUDGET, STATIC
from refir.frontends import builder
from refir.frontends.builder import Value
from refir.ir.types import FLOATS, Axis, TensorType

if TYPE_CHECKING:
    from conformance.generate import Maker

Step = Callable[[Value, TensorType], Value]


def window_menu(g: Maker, t: TensorType) -> list[Step]:
    """The window ops that can take an operand of type `t`."""
    static = [i for i, a in enumerate(t.axes) if isinstance(a.extent, int) and not a.broadcast]
    menu: list[Step] = []
    if t.rank:
        menu.append(lambda x, t: select(g, x, t))
    if static:
        menu += [lambda x, t: slice_(g, x, t, static), lambda x, t: pad(g, x, t, static),
                 lambda x, t: cat(g, x, t, static)]
    return menu


def _declared(g: Maker, t: TensorType, moved: int | None) -> TensorType | None:
    """The inferred type, or with a layout, or the moved axis declared replicated."""
    if moved is not None and t.axes[moved].shard and g.c.maybe(30):
        return g.b.type(t.dtype, tuple(replace(a, shard=None) if i == moved else a for i, a in enumerate(t.axes)),
                        t.mesh, g.layout(t.rank))
    return g.relaid(t)


def slice_(g: Maker, x: Value, t: TensorType, static: list[int]) -> Value:
    a = g.c.pick(static)
    n = t.axes[a].extent
    assert isinstance(n, int)
    start = g.c.below(n)  # at least one element: the other ops' budgets divide by extents
    stop = start + 1 + g.c.below(n - start)
    step = 1 + g.c.below(3)
    axes = list(t.axes)
    axes[a] = replace(axes[a], extent=len(range(start, stop, step)))
    whole = len(range(start, stop, step)) == n  # the whole axis: nothing moves, nothing may be declared anew
    declared = _declared(g, replace(t, axes=tuple(axes), layout=None), None if whole else a)
    if a == 0 and g.c.maybe(50):  # the leading axis, as x[b:e:s] writes it
        return x.slice([start], [stop], [step], **g.out(declared))
    return x.slice([start], [stop], [step], axes=[a], **g.out(declared))


def select(g: Maker, x: Value, t: TensorType) -> Value:
    a = g.c.below(t.rank)
    e = t.axes[a]
    n = 1 if e.broadcast else e.extent if isinstance(e.extent, int) else min(g.values[e.extent])
    if n == 0:  # nothing to select (a symbol bound to 0)
        return x.set(**g.out(None))
    kept = replace(t, axes=t.axes[:a] + t.axes[a + 1:], layout=None)
    return x.select(a, g.c.below(n), **g.out(g.relaid(kept)))


def pad(g: Maker, x: Value, t: TensorType, static: list[int]) -> Value:

    a = g.c.pick(static)
    lo, hi = g.c.below(3), g.c.below(3)
    axes = list(t.axes)
    axes[a] = replace(axes[a], extent=axes[a].extent + lo + hi)  # type: ignore[operator]
    if g.size(tuple(axes)) > BUDGET:
        lo = hi = 0
        axes = list(t.axes)
    values = ((0, 1.5, -0.0, 3) if t.dtype in FLOATS else (0, 1) if t.dtype == "bool"
              else (0, 7, 1) if t.dtype == "u8" else (0, -1, 7))
    low, high = [0] * t.rank, [0] * t.rank
    low[a], high[a] = lo, hi
    declared = _declared(g, replace(t, axes=tuple(axes), layout=None), a if lo or hi else None)
    return x.pad(low, high, g.c.pick(values), **g.out(declared))


def cat(g: Maker, x: Value, t: TensorType, static: list[int]) -> Value:
    """x and a new input sharded alike (or x itself), along a static axis."""

    a = g.c.pick(static)
    rest = g.size(tuple(b for i, b in enumerate(t.axes) if i != a))
    room = [e for e in STATIC if (t.axes[a].extent + e) * rest <= BUDGET]  # type: ignore[operator]
    if not room or g.c.maybe(20):
        y = x
    else:
        axes = tuple(Axis(g.c.pick(room), b.shard) if i == a else b for i, b in enumerate(t.axes))
        y = g.param(g.b.type(t.dtype, axes, t.mesh, g.layout(t.rank)))
    if y is x and 2 * g.size(t.axes) > BUDGET:  # x with itself would pass the budget (tests/test_conformance.py)
        return x.set(**g.out(None))
    operands = [y, x] if g.c.maybe(30) else [x, y]
    total = sum(v.type.axes[a].extent for v in operands)  # type: ignore[misc]
    joined = replace(t, axes=tuple(replace(b, extent=total) if i == a else b for i, b in enumerate(t.axes)),
                     layout=None)
    return builder.cat(operands, a, **g.out(_declared(g, joined, a)))
