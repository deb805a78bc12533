"""When each buffer of a lowered program is last read, and what is live at once.

`interp.spmd.execute` drops its reference to a buffer right after the last
step (or segment) that reads it, so that a backend whose buffers hold device
memory frees it then (the gpu backend's pool takes it back at once).
`largest_live` is the measure the memory target is stated in: the most bytes
of one device's tensors that are live together at any step.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from refir.ir.types import Bindings, local_shape, resolved
from refir.lowering.lower import Lowered


@dataclass(frozen=True)
class Drops:
    """When to forget each name, segment by segment (s): `taken[s]` leave the
    environment as segment s starts (its inputs no later segment reads: the
    segment's scope then holds the last reference), `before[s]` leave the scope
    at once (inputs none of its steps reads), `after_step[s][i]` after step i,
    and `unkept[s]` of the segment's outputs are never stored (nothing later
    reads them)."""

    taken: tuple[tuple[str, ...], ...]
    before: tuple[tuple[str, ...], ...]
    after_step: tuple[tuple[tuple[str, ...], ...], ...]
    unkept: tuple[tuple[str, ...], ...]


_plans: dict[int, tuple[Lowered, Drops]] = {}  # by id: refir.run reuses one Lowered per program


def drops(lowered: Lowered) -> Drops:
    """The plan for `lowered`, made once per lowered program (the last 64 kept)."""
    got = _plans.get(id(lowered))
    if got is not None and got[0] is lowered:
        return got[1]
    if len(_plans) >= 64:
        _plans.pop(next(iter(_plans)))
    plan = _plan(lowered)
    _plans[id(lowered)] = (lowered, plan)
    return plan


def _plan(lowered: Lowered) -> Drops:
    kept = {lowered.source(r) for r in lowered.results}
    last_segment: dict[str, int] = {}  # the last segment that takes the name as an input
    for s, seg in enumerate(lowered.segments):
        for name in seg.inputs:
            last_segment[name] = s
    taken, before, after_step, unkept = [], [], [], []
    for s, seg in enumerate(lowered.segments):
        outputs = set(seg.outputs)
        last_step: dict[str, int] = {}
        for i, step in enumerate(seg.steps):
            for name in step.tensor_args():
                last_step[name] = i
        per_step: list[list[str]] = [[] for _ in seg.steps]
        for i, step in enumerate(seg.steps):
            if step.out not in outputs and step.out not in last_step:
                per_step[i].append(step.out)  # read by nothing
        for name, i in last_step.items():
            if name not in outputs:
                per_step[i].append(name)
        taken.append(tuple(n for n in seg.inputs if n not in kept and last_segment[n] == s))
        before.append(tuple(n for n in seg.inputs if n not in last_step and n not in outputs))
        after_step.append(tuple(tuple(names) for names in per_step))
        unkept.append(tuple(n for n in seg.outputs if n not in kept and last_segment.get(n, -1) <= s))
    return Drops(tuple(taken), tuple(before), tuple(after_step), tuple(unkept))


def largest_live(lowered: Lowered, scalars: Bindings, device: int) -> int:
    """The most bytes of `device`'s blocks live at once as execute holds them:
    each step's operands and its result counted together."""
    types, plan = lowered.types, drops(lowered)

    def size(name: str) -> int:
        t = resolved(types[name], scalars)
        if device not in t.mesh:
            return 0
        return prod(local_shape(t, dict(scalars), device)) * t.np_dtype.itemsize

    env = {p.name for p in lowered.checked.func.params}
    peak = sum(map(size, env))
    for s, seg in enumerate(lowered.segments):
        env -= set(plan.taken[s])
        scope = set(seg.inputs) - set(plan.before[s])
        for step, dropped in zip(seg.steps, plan.after_step[s]):
            scope.add(step.out)
            peak = max(peak, sum(map(size, env | scope)))
            scope -= set(dropped)
        env |= set(seg.outputs) - set(plan.unkept[s])
    return peak
