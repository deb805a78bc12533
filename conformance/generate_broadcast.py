"""The generator's broadcasting ops (conformance/generate.py's Maker.step): `expand`
of an operand's `b` axes to concrete extents (static or a bound symbol; the
expanded axes replicated or, declared, sharded on mesh axes the operand leaves
free: docs/spec.md §5.4.1), and `matmul` of the value with a new input of any
rank (numpy's batch broadcasting, §5.6): the value as either operand, the other
1-D or with fewer, as many or more batch axes, a batch axis `b` on either side,
new axes sharded on free mesh axes, the contraction sharded alike in both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from conformance.generate_budget import BUDGET, STATIC
from refir.checks.rules_matmul import matmul_axes
from refir.frontends.builder import Value
from refir.ir.types import BROADCAST, DIDS, Axis, Extent, TensorType

if TYPE_CHECKING:
    from conformance.generate import Maker

Step = Callable[[Value, TensorType], Value]
MAX_RANK = 4


def broadcast_menu(m: Maker, t: TensorType) -> list[Step]:
    """The broadcasting ops that can take an operand of type `t`."""
    menu: list[Step] = []
    if any(a.broadcast for a in t.axes) or t.rank < MAX_RANK:
        menu.append(lambda x, t: expand(m, x, t))
    if t.rank and t.dtype != "bool":  # twice: its forms are many (ranks, batch broadcasting, sides)
        menu += [lambda x, t: matmul(m, x, t)] * 2
    return menu


def _spare(m: Maker, t: TensorType, used: set[str]) -> list[str]:
    return [d for d in DIDS[:t.mesh.ndim] if d not in used]


def _maybe_shard(m: Maker, a: Axis, mesh_t: TensorType, used: set[str], percent: int) -> Axis:
    """Shard a new (not `b`) axis on a mesh axis nothing else uses, sometimes."""
    spare = _spare(m, mesh_t, used)
    if a.broadcast or not spare or not m.c.maybe(percent):
        return a
    did = m.c.pick(spare)
    used.add(did)
    return replace(a, shard=did)


# ---- expand ----------------------------------------------------------------------------


def expand(m: Maker, x: Value, t: TensorType) -> Value:
    """Every `b` axis of x to an extent (an unsqueeze first where x has none)."""
    if not any(a.broadcast for a in t.axes):
        at = m.c.below(t.rank + 1)
        x = x.unsqueeze([at], **m.out(None))
        t = x.type
    rest = m.size(tuple(a for a in t.axes if not a.broadcast))
    extents: list[Extent] = []
    for a in t.axes:
        if not a.broadcast:
            extents.append(a.extent)
            continue
        room = max(1, BUDGET // rest)
        symbols = [s for s in m.bound_symbols() if max(m.values[s]) <= room]
        e = m.c.pick(symbols) if symbols and m.c.maybe(40) else m.c.pick([e for e in STATIC if e <= room] or [1])
        rest *= m.largest(e)
        extents.append(e)
    axes = tuple(Axis(e) if a.broadcast else a for a, e in zip(t.axes, extents))
    inferred = replace(t, axes=axes, layout=None)
    declared = m.relaid(inferred)
    if m.c.maybe(60):  # expanded axes sharded: each device makes only its own block
        used = {a.shard for a in t.axes if a.shard}
        grown = tuple(_maybe_shard(m, b, t, used, 70) if a.broadcast else b for a, b in zip(t.axes, axes))
        if grown != axes:
            declared = m.b.type(t.dtype, grown, t.mesh, m.layout(t.rank))
    given = [m.b.sym(e) if isinstance(e, str) else e for e in extents]
    return x.expand(given, **m.out(declared))


# ---- matmul ----------------------------------------------------------------------------


def _fresh(m: Maker, known: list[tuple[Axis, ...]]) -> Axis:
    """A new axis whose extent keeps every tensor of `known` (with it) within the budget."""
    room = max(1, BUDGET // max(m.size(axes) for axes in known))
    return m.fresh_axes(1, room)[0]


def matmul(m: Maker, x: Value, t: TensorType) -> Value:
    """x times a new input w, or w times x: w's rank drawn (1 to 4), its batch axes
    aligned with x's from the right, each the same as x's, `b`, or new where x's is
    `b` or x has none there."""
    c = m.c
    first = not c.maybe(30)  # x as a (simplest) or as b
    k = t.axes[0] if t.rank == 1 else t.axes[-1] if first else t.axes[-2]
    xbatch = t.axes[:-2]
    used = {a.shard for a in t.axes if a.shard}
    # w's rank: 2 (simplest), 1 (a vector), or with batch axes (as many as the result allows)
    most = MAX_RANK - max(0, t.rank - 2) if t.rank >= 2 else MAX_RANK
    ranks = [2, 1] + list(range(3, most + 1))
    wrank = ranks[c.below(len(ranks))]
    k_w = Axis(k.extent, k.shard) if not k.broadcast else BROADCAST
    if wrank == 1:
        w_axes: tuple[Axis, ...] = (k_w,)
    else:
        new = _fresh(m, [t.axes, (k_w,)])  # w's own N (x as a) or M (x as b)
        new = _maybe_shard(m, new, t, used, 30)
        nb = wrank - 2
        wbatch: list[Axis] = []
        for i in range(nb):  # right-aligned with x's batch axes
            j = len(xbatch) - nb + i
            mine = xbatch[j] if j >= 0 else None
            if mine is not None and not mine.broadcast and not c.maybe(25):
                wbatch.append(mine)  # the same axis: extent and sharding
            elif mine is not None and not mine.broadcast or c.maybe(20):
                wbatch.append(BROADCAST)  # w broadcasts against x
            else:  # x lacks it or has it `b`: w's own batch axis, x broadcasts
                grown = _fresh(m, [t.axes + tuple(wbatch) + (new,), (*wbatch, k_w, new)])
                wbatch.append(_maybe_shard(m, grown, t, used, 30))
        w_axes = (*wbatch, k_w, new) if first else (*wbatch, new, k_w)
    w = m.param(m.b.type(t.dtype, w_axes, t.mesh, m.layout(len(w_axes))))
    a, b = (x, w) if first else (w, x)
    axes = matmul_axes(a.type, b.type)
    declared = None
    if k.shard and c.maybe(60):  # partial sums may land anywhere, as after a reduction
        declared = m.placed(t.dtype, tuple(replace(e, shard=None) for e in axes), m.other_mesh(t.mesh))
    elif c.maybe(40):
        declared = m.b.type(t.dtype, axes, t.mesh, m.layout(len(axes)))
    return a.matmul(b, **m.out(declared))
