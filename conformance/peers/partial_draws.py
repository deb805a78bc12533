"""Partial placements the DTensor sweep draws last (so a case without one is the case it
was): a Partial target, and Partial(avg) sources (docs/peers.md, "Partial targets").

DTensor's rules (torch 2.13, _redistribute.py): a mesh dim goes to Partial from
Replicate (a local partition) or stays the Partial it was (a no-op); a shard or
_StridedShard to Partial is refused, as is one reduce op to another. refir's are
the same but for avg, which it makes only from an avg source (no exact avg terms
of a replicated value exist: refir.frontends.dtensor), so an avg target is drawn
only where the source was avg there, and on every mesh dim the source was avg on
or none (refir's partial_c5: an avg reduces over all its axes or none). Avg is drawn for float dtypes over teams of
a power of two ranks (refir's avg terms: the sum's terms of n X).
"""

from __future__ import annotations

from conformance.generate import Chooser
from refir.frontends.dtensor import Partial, Placement, Replicate

SOURCE_PERCENT = 20  # of the reshardings drawn without a Partial source, those given one here
SOURCE_OPS = ("sum", "max", "min", "avg")  # avg: float dtypes, a team of a power of two (else sum)
TARGET_PERCENT = 30  # of the reshardings, those given a Partial target
AVG_PERCENT = 75  # of the cases with a Partial(sum) source, those made Partial(avg)
TARGET_OPS = ("sum", "max", "min")  # of a target made from Replicate (avg: refir refuses it)
FLOATS = ("f32", "f64", "f16", "bf16")

Pair = tuple[tuple[Placement, ...], tuple[Placement, ...]]


def draw(c: Chooser, sizes: tuple[int, ...], dtype: str, src: tuple[Placement, ...],
         dst: tuple[Placement, ...]) -> Pair:
    """Maybe a Partial source on one mesh dim, maybe a Partial target on one, then maybe every sum made avg."""
    s, d = list(src), list(dst)
    if not any(isinstance(p, Partial) for p in s) and c.maybe(SOURCE_PERCENT):
        i = c.below(len(s))
        op = c.pick(SOURCE_OPS)
        s[i] = Partial(op if op != "avg" or (dtype in FLOATS and sizes[i] & (sizes[i] - 1) == 0) else "sum")
    if c.maybe(TARGET_PERCENT):
        i = c.below(len(s))
        kinds = {p.op for p in s if isinstance(p, Partial)}
        held = [k for k, p in enumerate(s) if isinstance(p, Partial)]
        if held and not isinstance(s[i], Partial) and (kinds == {"avg"} or c.maybe(50)):  # kept as often as made
            i = c.pick(held)  # (an avg always: refir makes no avg terms of a value)
        if isinstance(s[i], Partial):
            d[i] = s[i]  # Partial -> the same Partial: DTensor's no-op
        else:
            s[i] = Replicate()  # Replicate -> Partial: DTensor refuses it from a shard
            d[i] = Partial(kinds.pop() if kinds else c.pick(TARGET_OPS))
    made = {i for i, p in enumerate(d) if isinstance(p, Partial) and s[i] != p}
    avg_ok = dtype in FLOATS and all(sizes[i] & (sizes[i] - 1) == 0 for i, p in enumerate(s) if isinstance(p, Partial))
    held = {i for i, p in enumerate(s) if isinstance(p, Partial)}
    kept = {i for i, p in enumerate(d) if isinstance(p, Partial)}
    if any(p == Partial("sum") for p in s) and not made and kept in (set(), held) and avg_ok and c.maybe(AVG_PERCENT):
        s = [Partial("avg") if p == Partial("sum") else p for p in s]
        d = [Partial("avg") if p == Partial("sum") else p for p in d]
    return tuple(s), tuple(d)


def partial_target(dst: tuple[Placement, ...]) -> bool:
    return any(isinstance(p, Partial) for p in dst)
