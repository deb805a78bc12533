"""Lowering of reshardings to and from interleaved types (docs/spec.md §3.4, §6).

Direct (`direct`): on one mesh, where the two types differ only in what one
mesh axis k cuts (k innermost on an axis of each, every other mesh axis, split
factor and the partial alike), one all_to_all over k whose blocks are runs
(refir.lowering.run_exchange); where the source is partial over k and the
target cuts by k instead, one reduce_scatter of runs. Otherwise, on one mesh,
where the source is not partial (or partial as the target is), an allgather
per mesh axis, innermost first, until each axis's mesh axes and split
factors begin the target's, then a keep_block of runs. Otherwise the source is
gathered to contiguous blocks, the contiguous part of the target reached by the
rules of refir.lowering.lower, and the rest cut locally by runs.
"""

from __future__ import annotations

from dataclasses import replace

from refir.ir import ops
from refir.ir.types import TensorType, as_shard, entries_of


def same_placement(a: TensorType, b: TensorType) -> bool:
    return a.mesh == b.mesh and a.placements() == b.placements() and (a.partial, a.partial_kind) == (b.partial,
                                                                                                     b.partial_kind)


def _without(t: TensorType, k: str) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Each axis's mesh axes and split factors but k."""
    return tuple(tuple(e for e in entries_of(a) if e[0] != k) for a in t.axes)


def _innermost(t: TensorType, k: str) -> int | None:
    """The tensor axis whose nest ends with k, if any."""
    return next((i for i, a in enumerate(t.axes) if a.dids and a.dids[-1] == k), None)


def direct(s: TensorType, d: TensorType) -> ops.AllToAll | ops.ReduceScatter | None:
    """The one collective that makes d from s where one exists (§6, the direct
    rule of interleaved types): an all_to_all over k where k is innermost on
    axis i of s and axis j of d, and the types agree but for k's entry (an
    interleaved axis's split factor may change, i == j); a reduce_scatter over
    k where s is partial over k (not avg: lowering makes an avg's terms a sum's
    first), k is innermost on axis j of d, and the types agree but for k (d
    partial over the rest of s's mesh axes, of the same kind). None: the
    general route."""
    if s.mesh != d.mesh:
        return None
    for k in dict.fromkeys(m for t in (s, d) for a in t.axes for m in a.dids):
        i, j = _innermost(s, k), _innermost(d, k)
        if j is None or _without(s, k) != _without(d, k):
            continue
        if i is not None and (s.partial, s.partial_kind) == (d.partial, d.partial_kind):
            return ops.AllToAll(k, j, i)
        rest = tuple(p for p in s.partial if p != k)
        if (i is None and k in s.partial and s.partial_kind != "avg" and d.partial == rest
                and (not rest or d.partial_kind == s.partial_kind)):
            return ops.ReduceScatter(s.partial_kind, k, j)
    return None


def gather_interleaved(cur: TensorType, plan: list) -> TensorType:
    """An allgather per mesh axis, innermost first, until no axis of `cur` is
    interleaved (each drops the innermost mesh axis of its nest, §3.4)."""
    for i in range(cur.rank):
        while cur.axes[i].split:
            ms = cur.axes[i].dids
            cur = cur.with_sharding({**cur.sharding(), i: as_shard(ms[:-1])})
            plan.append((ops.Allgather(i, ms[-1]), cur))
    return cur


def gather_to_prefix(s: TensorType, d: TensorType, plan: list) -> None:
    """Same mesh, an interleaved axis on either side (§3.4), s not partial or
    partial as d: an allgather per mesh axis, innermost first, until each
    axis's mesh axes and split factors begin d's, then a keep_block of runs
    cuts the rest; a partition last where d is partial and s not."""
    cur, moved = s, replace(d, partial=s.partial, partial_kind=s.partial_kind)
    for i in range(cur.rank):
        while (ms := entries_of(cur.axes[i])) and entries_of(d.axes[i])[:len(ms)] != ms:
            cur = cur.with_sharding({**cur.sharding(), i: as_shard(cur.axes[i].dids[:-1])})
            plan.append((ops.Allgather(i, ms[-1][0]), cur))
    if not same_placement(cur, moved):
        plan.append((ops.KeepBlock(), moved))
    if d.partial != s.partial:  # replicated -> partial: local, last
        plan.append((ops.Partition(d.partial_kind, d.partial), d))


def contiguous_part(t: TensorType) -> TensorType:
    """`t` with each interleaved axis cut only by the mesh axes before its first
    split factor (§3.4): a keep_block cuts the rest, locally, by runs."""
    sharding = {}
    for i, a in enumerate(t.axes):
        if a.shard:
            factors = a.split or (1,) * len(a.dids)
            first = next((j for j, f in enumerate(factors) if f > 1), len(factors))
            sharding[i] = as_shard(a.dids[:first])
    return t.with_sharding(sharding)


def keep_runs_last(plan: list, final: TensorType) -> TensorType:
    """The plan, which reached final's contiguous part, ends at `final`: its last
    keep_block cuts to final at once, or a keep_block of runs is added."""
    if plan and isinstance(plan[-1][0], ops.KeepBlock):
        plan[-1] = (ops.KeepBlock(), final)
    elif not plan or not same_placement(plan[-1][1], final):
        plan.append((ops.KeepBlock(), final))
    return final
