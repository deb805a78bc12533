"""The generator's step for the mask ops (docs/spec.md §5.9), called by
conformance/generate.py's Maker.step: a comparison of the value with a partner or
a scalar, sometimes or-ed with an iota mask of the value's own placement (uneven
blocks and all), then a where that keeps the value's dtype; or one of the unary
tanh erf sigmoid rsqrt sin cos on a float value."""

from __future__ import annotations

from typing import Any

from refir.frontends import builder
from refir.frontends.builder import Value
from refir.ir import ops
from refir.ir.types import FLOATS, TensorType


def mask_step(m: Any, x: Value, t: TensorType) -> Value:
    """m: generate.Maker (its chooser c, builder b, partner, out, relaid, layout)."""
    c = m.c
    if t.dtype in FLOATS and c.maybe(40):
        return x.unary(c.pick(ops.MASK_UNARY), **m.out(m.relaid(t)))
    lits = (0, 1) if t.dtype == "bool" else (0.5, -1.5, 2.0) if t.dtype in FLOATS else (0, 2, -1)
    other = m.partner(t) if c.maybe(50) else c.pick(lits)
    same = not isinstance(other, Value)  # a partner may shard more axes than t: then infer where's type
    args = (other, x) if c.maybe(25) else (x, other)
    k = builder.compare(c.pick(ops.COMPARISONS), *args, **m.out(None))
    rows = [i for i, a in enumerate(t.axes) if not a.broadcast]
    if rows and c.maybe(50):  # or-ed with an iota mask: t's placement, global indices on every block
        axis = c.pick(rows)
        iota_type = m.b.type(c.pick(("i32", "i64", "f32", "i8")), list(t.axes), t.mesh, m.layout(t.rank))
        i = builder.iota(m.b, iota_type, axis, **{"name": m.out(None)["name"]})
        j = i.compare(c.pick(ops.COMPARISONS), c.pick((0, 1, 2)), **m.out(None))
        k = builder.maximum(k, j, **m.out(None))
    y = m.partner(t) if c.maybe(40) else c.pick(lits)
    same = same and not isinstance(y, Value)
    branches = (y, x) if c.maybe(30) else (x, y)
    return builder.where(k, *branches, **m.out(m.relaid(t) if same else None))
