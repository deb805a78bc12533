"""Type rules of expand: numpy's broadcast_to of `b` axes, materialized (nvFuser's
expand). Each check cites its constraint as docs/spec.md labels it."""

from __future__ import annotations

from dataclasses import replace

from refir.checks.inference import EqnContext, keep_sharding, rule, same_shape, unary_operand
from refir.ir import ops
from refir.ir.program import Lit, Sym
from refir.ir.types import Axis, TensorType


def target_extents(c: EqnContext, x: TensorType) -> list[int | str]:
    """The extents after the operand: one per axis, each a literal >= 0 or a symbol (expand_c1)."""
    given = c.eqn.args[1:]
    if len(given) != x.rank:  # expand_c1
        raise c.fail("expand_c1", f"expand takes one extent per axis of its operand: {x.rank}, not {len(given)}")
    out: list[int | str] = []
    for g in given:
        if isinstance(g, Sym):
            out.append(g.name)
        elif isinstance(g, Lit) and isinstance(g.value, int) and g.value >= 0:
            out.append(g.value)
        else:  # expand_c1
            raise c.fail("expand_c1", f"an extent of expand is a non-negative integer or a symbol, not {g}")
    return out


@rule(ops.Expand)
def _expand(op: ops.Expand, c: EqnContext) -> TensorType:
    x = unary_operand(c)
    extents = target_extents(c, x)
    axes = []
    for i, (a, n) in enumerate(zip(x.axes, extents)):
        if not a.broadcast and a.extent != n:  # expand_c2
            raise c.fail("expand_c2", f"axis {i} is {a.extent}, not b: it keeps its extent, it cannot become {n}")
        axes.append(Axis(n) if a.broadcast else a)
    inferred = replace(x, axes=tuple(axes), layout=None)
    declared = c.eqn.type
    if declared is None:
        return inferred
    same_shape(declared, inferred, c)
    # A declared result may shard an expanded axis: each device makes its own block (local).
    grown = {i: declared.axes[i].shard for i, a in enumerate(x.axes) if a.broadcast and declared.axes[i].shard}
    if grown:  # anything else a declared type changes is result_c2's, as for any local op
        inferred = inferred.with_sharding({**x.sharding(), **grown})
    return keep_sharding(inferred, c)
