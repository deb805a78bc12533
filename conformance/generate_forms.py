"""The generator's resharding tail (conformance/generate.py's `generate`, drawn
last): `set` chains between every pair of sharding forms, on meshes of their own.

A form is one row of FORMS: replicated, sharded on one mesh axis, nested over two
or three mesh axes in any order (spec §3.2), or partial of a kind over one or more
mesh axes, maybe sharded (or nested) on the others (§3.3). The tail declares one
or two meshes (1-D, 2-D or 3-D, device ids a permutation of 4), an input of a
drawn source form (or, for a partial, two inputs combined as §3.3 allows: a sum
plus a sum, a sum times a replicated value or a literal, a prod times a prod, the
max of a max and a replicated value), then one to three
`set`s, each to a drawn form on the same mesh or (forms that are not partial,
partial_c5) the other: partial -> nested -> replicated and so on. Extents are
the generator's (even or not over the nest).

It is drawn after every draw of the rest of the program and is off on the
simplest draw, so the programs of existing seeds keep their every equation and
input, and a shrunk case sheds the tail first.

The fifth row, interleaved (§3.4: an axis over one mesh axis or a nest of them,
some with split factors, `E@DIDx:3`, `E@(DIDy:2,DIDx)`), is drawn by a second
tail of its own (meshes f2, f3), drawn after the first: the first tail draws
from the four rows before it exactly as it did, so a seed's program keeps every
equation of its first tail too, and may grow by the second. The second tail's
chains pass through interleaved values (from and to each form), and its
partials may be interleaved on their other mesh axes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from math import prod
from typing import TYPE_CHECKING

from conformance.generate_budget import BUDGET, STATIC
from refir.frontends import builder
from refir.frontends.builder import Value
from refir.ir.types import DIDS, FLOATS, Axis, Mesh, ShardSpec, TensorType, as_shard, dids_of

if TYPE_CHECKING:
    from conformance.generate import Maker

PERCENT = 50  # of programs that get a tail
INTERLEAVED_PERCENT = 50  # of programs that get the second tail, through interleaved values
SPLITS = (2, 3, 4)  # a split factor that must be 2 or more; one that may be 1 is drawn from (1, 2)
# The second tail's extents: STATIC's, and those whose runs under DIDx:2 and DIDx:3 over 2
# or 3 devices are as long but not the same rows (5, 12, 13: split_factor_off_by_one shows there).
SPLIT_STATIC = (*STATIC, 5, 7, 12, 13)
# By rank; half the time the first shape (every axis 2 or more). Every mesh lies within
# 4 devices, as the rest of the generator's (an MPI run of 4 ranks runs every program):
# a 3-D mesh has an axis of 1, so a nest of three cuts over two (the corpus's 2x2x2
# programs, nested_3d and mesh3d_every_axis, cut over three).
MESHES = (((4,), (3,), (2,)), ((2, 2), (1, 3), (2, 1)), ((2, 2, 1), (1, 2, 2), (2, 1, 2)))
MAX_SETS = 3

# sharding, partial mesh axes, partial kind, and each interleaved axis's split factors (one per mesh axis)
Placement = tuple[dict[int, ShardSpec], tuple[str, ...], str, dict[int, tuple[int, ...]]]


@dataclass(frozen=True)
class Source:
    """What a form's placement is drawn against: dtype, axes, mesh, and the source
    value's type where the form is a `set`'s target (None: an input's form)."""

    dtype: str
    axes: tuple[Axis, ...]
    mesh: Mesh
    of: TensorType | None = None
    interleave: bool = False  # the second tail's: the interleaved row is drawn, and partials may be interleaved


@dataclass(frozen=True)
class Form:
    name: str
    fits: Callable[[Source], bool]  # whether the form exists there (and, as a target, is a valid set)
    is_of: Callable[[TensorType], bool]  # the form of a type (the rows exclude each other)
    place: Callable[[Maker, Source], Placement]
    other_mesh: bool = True  # whether a set may reach it on another mesh


def _axes_free(s: Source) -> list[int]:
    return [i for i, a in enumerate(s.axes) if not a.broadcast]


def _dids(mesh: Mesh) -> list[str]:
    return list(DIDS[:mesh.ndim])


def _shard_some(m: Maker, s: Source, dids: list[str], taken: set[int], percent: int) -> dict[int, ShardSpec]:
    """Mesh axes `dids` shard free axes (one each, or two of them nested on one axis), sometimes."""
    out: dict[int, ShardSpec] = {}
    left = [d for d in dids]
    while left and m.c.maybe(percent):
        free = [i for i in _axes_free(s) if i not in taken and i not in out]
        if not free:
            break
        k = 1 + (m.c.below(len(left)) if len(left) > 1 else 0)
        order = m.c.permutation(len(left))[:k]
        out[m.c.pick(free)] = as_shard(tuple(left[j] for j in order))  # type: ignore[arg-type]
        left = [d for j, d in enumerate(left) if j not in order]
    return out


def _splits(m: Maker, n: int) -> tuple[int, ...]:
    """Split factors for a nest of n mesh axes, one of them (drawn) 2 or more."""
    at = m.c.below(n)
    return tuple(m.c.pick(SPLITS) if j == at else m.c.pick((1, 2)) for j in range(n))


def _some_splits(m: Maker, sharding: dict[int, ShardSpec], percent: int) -> dict[int, tuple[int, ...]]:
    """Split factors for some of the sharded axes (in axis order), each with `percent`."""
    return {i: _splits(m, len(dids_of(sharding[i]))) for i in sorted(sharding) if m.c.maybe(percent)}


def _sharded(m: Maker, s: Source) -> Placement:
    return {m.c.pick(_axes_free(s)): m.c.pick(_dids(s.mesh))}, (), "", {}  # type: ignore[dict-item]


def _nested(m: Maker, s: Source) -> Placement:
    dids = _dids(s.mesh)
    order = m.c.permutation(len(dids))
    k = 2 + m.c.below(len(dids) - 1)
    nest = tuple(dids[j] for j in order[:k])
    i = m.c.pick(_axes_free(s))
    rest = [d for d in dids if d not in nest]
    return {i: nest, **_shard_some(m, s, rest, {i}, 40)}, (), "", {}  # type: ignore[dict-item]


def _interleaved(m: Maker, s: Source) -> Placement:
    """An axis over one to all mesh axes in a drawn order, split factors on some; the
    other mesh axes shard other axes sometimes, interleaved or not."""
    dids = _dids(s.mesh)
    order = m.c.permutation(len(dids))
    nest = tuple(dids[j] for j in order[:1 + m.c.below(len(dids))])
    i = m.c.pick(_axes_free(s))
    rest = [d for d in dids if d not in nest]
    others = _shard_some(m, s, rest, {i}, 40)
    splits = {i: _splits(m, len(nest)), **_some_splits(m, others, 40)}
    return {i: as_shard(nest), **others}, (), "", splits  # type: ignore[dict-item]


def kinds(dtype: str, mesh: Mesh, dids: tuple[str, ...], of: TensorType | None) -> list[str]:
    """The partial kinds a value of `dtype` may have over `dids` (partial_c2), and,
    as a set's target from `of`, may become (partial_c5)."""
    if of is not None and of.partial:
        if of.partial_kind == "avg" and set(dids) != set(of.partial):
            return []  # an avg is reduced over all its mesh axes or none, and none made anew
        return [of.partial_kind] if of.partial_kind in kinds(dtype, mesh, dids, None) else []
    out = ["max", "min"] if dtype == "bool" else ["sum", "prod", "max", "min"]
    team = prod(mesh.size(d) for d in dids)
    if dtype in FLOATS and not team & (team - 1) and of is None:  # avg: made only as an input
        out.append("avg")
    return out


def _partial_axes(m: Maker, s: Source) -> tuple[str, ...]:
    dids = _dids(s.mesh)
    if s.of is not None and s.of.partial_kind == "avg":
        return s.of.partial
    order = m.c.permutation(len(dids))
    chosen = {dids[j] for j in order[:1 + m.c.below(len(dids))]}
    return tuple(d for d in DIDS[::-1] if d in chosen)  # mesh order


def _partial(m: Maker, s: Source) -> Placement:
    dids = _partial_axes(m, s)
    kind = m.c.pick(kinds(s.dtype, s.mesh, dids, s.of))
    rest = [d for d in _dids(s.mesh) if d not in dids]
    if not s.interleave:
        return _shard_some(m, s, rest, set(), 50), dids, kind, {}  # type: ignore[return-value]
    sharding = _shard_some(m, s, rest, set(), 80)  # the second tail's: mostly interleaved on the other mesh axes
    return sharding, dids, kind, _some_splits(m, sharding, 75)  # type: ignore[return-value]


def _partial_fits(s: Source) -> bool:
    if s.of is not None and s.of.partial and s.of.partial_kind == "avg":  # its mesh axes, on its mesh only
        return all(s.mesh.has(d) for d in s.of.partial) and bool(kinds(s.dtype, s.mesh, s.of.partial, s.of))
    return any(kinds(s.dtype, s.mesh, (d,), s.of) for d in _dids(s.mesh))


def _nest_of(t: TensorType) -> bool:
    return any(a.nested for a in t.axes)


FORMS: tuple[Form, ...] = (  # simplest first: the draw 0 is replicated
    Form("replicated", lambda s: True, lambda t: not t.sharding() and not t.partial, lambda m, s: ({}, (), "", {})),
    Form("sharded", lambda s: bool(_axes_free(s)),
         lambda t: bool(t.sharding()) and not _nest_of(t) and not t.partial and not t.interleaved(), _sharded),
    Form("nested", lambda s: s.mesh.ndim >= 2 and bool(_axes_free(s)),
         lambda t: _nest_of(t) and not t.partial and not t.interleaved(), _nested),
    Form("partial", _partial_fits, lambda t: bool(t.partial), _partial, other_mesh=False),
    Form("interleaved", lambda s: bool(_axes_free(s)), lambda t: t.interleaved() and not t.partial, _interleaved),
)
NAMES = tuple(f.name for f in FORMS)
NESTED, PARTIAL, INTERLEAVED = FORMS[-3:]
CONTIGUOUS = FORMS[:-1]  # the first tail's rows (its draws as before the interleaved row)


def rows(s: Source) -> list[Form]:
    """The forms that exist at `s`, of the tail that draws there."""
    return [f for f in (FORMS if s.interleave else CONTIGUOUS) if f.fits(s)]


def drawn_form(m: Maker, forms: list[Form], interleave: bool, of: TensorType | None = None) -> Form:
    """One of `forms`; in the second tail interleaved two times in six (one from an
    interleaved `of`), partial (itself mostly interleaved there) and nested (the
    rarest, as meshes of one axis have none) one in six each, where they are among
    `forms`, else any."""
    if not interleave:
        return m.c.pick(forms)  # type: ignore[return-value]
    favoured = {1: INTERLEAVED, 2: INTERLEAVED if of is None or not of.interleaved() else None,
                3: PARTIAL, 4: NESTED}.get(m.c.below(6))
    return favoured if favoured in forms else m.c.pick(forms)  # type: ignore[return-value]


def form_of(t: TensorType) -> str:
    (name,) = [f.name for f in FORMS if f.is_of(t)]
    return name


def is_resharding(s: TensorType, d: TensorType) -> bool:
    """Whether a set from s to d moves data (split factors count: `7@DIDx:2 -> 7@DIDx` does)."""
    return (s.mesh, s.placements(), s.partial, s.partial_kind) != (d.mesh, d.placements(), d.partial, d.partial_kind)


# ---- the tail ------------------------------------------------------------------------


def draw_mesh(m: Maker, index: int) -> Mesh:
    shapes = m.c.pick(MESHES)
    shape = shapes[m.c.below(len(shapes)) if m.c.maybe(50) else 0]
    ids = m.c.permutation(4)
    return m.b.mesh(list(ids[:prod(shape)]), name=f"f{index}", shape=shape)  # type: ignore[arg-type]


def typed(m: Maker, s: Source, p: Placement) -> TensorType:
    sharding, dids, kind, splits = p
    axes = tuple(replace(a, shard=sharding.get(i), split=splits.get(i, ())) for i, a in enumerate(s.axes))
    return m.b.type(s.dtype, axes, s.mesh, m.layout(len(axes)), (kind, dids) if dids else None)


def source_value(m: Maker, s: Source) -> Value:
    """An input of a drawn form; a partial sometimes made of two inputs, as §3.3 allows."""
    t = typed(m, s, drawn_form(m, rows(s), s.interleave).place(m, s))
    x = m.param(t)
    if not t.partial or not m.c.maybe(40):
        return x
    plain = replace(t, partial=(), partial_kind="", layout=None)
    if t.partial_kind in ("sum", "avg"):
        how = m.c.below(3)
        if how == 0:  # a sum plus (minus) a sum over the same mesh axes
            y = m.param(replace(t, layout=m.layout(t.rank)))
            return builder.binary(m.c.pick(("add", "sub")), x, y, **m.out(None))
        if how == 1:  # times a replicated value
            y = m.param(replace(plain, axes=tuple(replace(a, shard=None) for a in t.axes)))
            return builder.binary("mul", *((x, y) if m.c.maybe(50) else (y, x)), **m.out(None))
        lit = m.c.pick((2.0, -1.5, 0.5)) if t.dtype in FLOATS else m.c.pick((2, -1, 3))
        return builder.binary("mul", x, lit, **m.out(None))
    if t.partial_kind == "prod":
        return builder.binary("mul", x, m.param(replace(t, layout=None)), **m.out(None))
    y = m.param(plain)  # max (min) with a value that is not partial
    return builder.binary("maximum" if t.partial_kind == "max" else "minimum", x, y, **m.out(None))


def target(m: Maker, x: Value, meshes: list[Mesh], interleave: bool = False) -> TensorType:
    """A drawn form's type for `set(x)`: on x's mesh, or another (where the form may be);
    in the second tail, mostly interleaved or partial (drawn_form)."""
    t = x.type
    mesh = m.c.pick([t.mesh] + [k for k in meshes if k != t.mesh])
    s = Source(t.dtype, tuple(replace(a, shard=None) for a in t.axes), mesh, t, interleave)
    forms = [f for f in rows(s) if (mesh == t.mesh or f.other_mesh)
             and not (mesh == t.mesh and f.is_of(t) and f.name == "replicated")]
    for _ in range(3):  # a set that moves nothing is a copy, not a resharding: draw again, a few times
        got = typed(m, s, drawn_form(m, forms, interleave, t).place(m, s))
        if is_resharding(t, got):
            break
    return got


def tail_axes(m: Maker, rank: int, static: tuple[int, ...] = STATIC) -> tuple[Axis, ...]:
    """Static extents, or symbols the program's inputs bind already: a tail adds no
    binding, so a seed's program keeps its cases (one per binding)."""
    room, axes = BUDGET, []
    symbols = m.bound_symbols()
    for _ in range(rank):
        fit = [e for e in symbols if max(m.values[e]) <= room]
        e = m.c.pick(fit) if fit and m.c.maybe(40) else m.c.pick([e for e in static if e <= room])
        room //= max(1, m.largest(e))
        axes.append(Axis(e))
    return tuple(axes)


def forms_tail(m: Maker) -> list[Value]:
    """The tails' results: the first's, then the second's (interleaved), or none (the simplest draw)."""
    return _tail(m, False) + _tail(m, True)


def _tail(m: Maker, interleave: bool) -> list[Value]:
    c = m.c
    if not c.maybe(INTERLEAVED_PERCENT if interleave else PERCENT):
        return []
    first = 2 if interleave else 0
    meshes = [draw_mesh(m, first)] + ([draw_mesh(m, first + 1)] if c.maybe(40) else [])
    dtype = c.pick(("f32", "i32", "f64", "bool", "f16", "i64", "bf16", "u8"))
    axes = tail_axes(m, 1 + c.below(3), SPLIT_STATIC if interleave else STATIC)
    x = source_value(m, Source(dtype, axes, meshes[0], interleave=interleave))
    out = []
    for _ in c.items(1, MAX_SETS, 40):
        x = x.set(**m.out(target(m, x, meshes, interleave)))
        out.append(x)
    return [v for v in out[:-1] if c.maybe(30)] + [out[-1]]
