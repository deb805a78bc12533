"""The generator's reshape (conformance/generate.py's Maker.step): a split of an
axis, a merge of two, or an extent-1 axis added or dropped, on an operand of any
sharding, one extent sometimes written -1 (numpy's inferred extent). Where the
reshape would move data (reshape_c3, reshape_c4, under any of the case's
bindings), a `set` first replicates the axes in the way, as a user writes it
(docs/spec.md §5.10)."""

from __future__ import annotations

from dataclasses import replace
from itertools import product
from typing import TYPE_CHECKING

from refir.checks.rules_reshape import block_problem, extents_of, groups
from refir.frontends.builder import Value
from refir.ir.types import Axis, Extent, TensorType

if TYPE_CHECKING:
    from conformance.generate import Maker


def draw_shape(m: Maker, t: TensorType) -> tuple[Extent, ...]:
    xs = extents_of(t)
    kind = m.c.below(3)
    if kind == 0:
        splits = [(i, f) for i, e in enumerate(xs) if isinstance(e, int) for f in range(2, e) if e % f == 0]
        if splits and t.rank < 4:
            i, f = m.c.pick(splits)  # type: ignore[misc]
            return (*xs[:i], f, xs[i] // f, *xs[i + 1:])  # type: ignore[operator]
    if kind == 1:
        merges = [i for i in range(len(xs) - 1) if isinstance(xs[i], int) and isinstance(xs[i + 1], int)
                  or xs[i] == 1 or xs[i + 1] == 1]
        if merges:
            i = m.c.pick(merges)  # type: ignore[assignment]
            a, b = xs[i], xs[i + 1]
            merged = a * b if isinstance(a, int) and isinstance(b, int) else b if a == 1 else a  # type: ignore[operator]
            return (*xs[:i], merged, *xs[i + 2:])
    ones = [i for i, (e, a) in enumerate(zip(xs, t.axes)) if e == 1 and not a.shard]
    if ones and m.c.maybe(50):
        i = m.c.pick(ones)  # type: ignore[assignment]
        return (*xs[:i], *xs[i + 1:])
    if t.rank < 4:
        i = m.c.below(len(xs) + 1)
        return (*xs[:i], 1, *xs[i:])
    return tuple(xs)


def in_the_way(t: TensorType, shape: tuple[Extent, ...], values: dict[str, tuple[int, ...]],
               cases: list[dict[str, int]] | None = None) -> set[int]:
    """The sharded operand axes that make the reshape move data, under some binding:
    every combination of the symbols' values, or the case's bindings `cases` (where
    an extent expression divides under those only)."""
    names = sorted(s for s in t.symbols() | {e for e in shape if isinstance(e, str)} if s in values)
    bindings = cases or [dict(zip(names, vs)) for vs in product(*(values[s] for s in names))]
    out: set[int] = set()
    for g in groups(t, shape):
        inside = [k for k in g.src if t.axes[k].shard]
        if not inside:
            continue
        if inside != [g.src[0]] or not g.dst or any(block_problem(t, shape, g, b) for b in bindings):
            out |= set(inside)
    return out


def inferred(t: TensorType, shape: tuple[Extent, ...]) -> TensorType:
    sharding = {g.dst[0]: t.axes[g.src[0]].shard for g in groups(t, shape) if g.src and g.dst
                and t.axes[g.src[0]].shard}
    return TensorType(t.dtype, tuple(Axis(e, sharding.get(i)) for i, e in enumerate(shape)), t.mesh)


def reshape(m: Maker, x: Value, t: TensorType) -> Value:
    shape = draw_shape(m, t)
    way = in_the_way(t, shape, m.values)
    if way:
        whole = t.with_sharding({k: v for k, v in t.sharding().items() if k not in way})
        x = x.set(**m.out(replace(whole, layout=m.layout(t.rank))))
        t = x.type
    given = list(shape)
    if given and m.c.maybe(25):  # numpy's -1 for one extent (reshape_c6: these draws make it an integer or a symbol)
        given[m.c.below(len(given))] = -1
    return x.reshape(given, **m.out(m.relaid(inferred(t, shape))))
