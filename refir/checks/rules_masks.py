"""Type rules of the mask ops (docs/spec.md §5.9): the comparisons `eq ne lt le gt ge`,
`where` and `iota`. (The unary `tanh erf sigmoid rsqrt sin cos` are elementwise:
op_rules.) Each check cites its constraint as the spec labels it."""

from __future__ import annotations

from refir.checks.inference import EqnContext, rule
from refir.checks.op_rules import elementwise_result
from refir.checks.type_checks import check_param_extents
from refir.ir import ops
from refir.ir.program import Lit
from refir.ir.types import FLOATS, TensorType


def _float_literals(c: EqnContext, dtype: str, args: tuple) -> None:
    for a in args:
        if isinstance(a, Lit) and isinstance(a.value, float) and dtype not in FLOATS:  # elementwise_c7
            raise c.fail("elementwise_c7", f"the float literal {a.value} needs a float tensor, not {dtype}")


@rule(ops.Compare)
def _compare(op: ops.Compare, c: EqnContext) -> TensorType:
    """eq ne lt le gt ge: elementwise over operands of one dtype (any), to bool."""
    if not c.tensors:  # elementwise_c1
        raise c.fail("elementwise_c1", f"{op.name} needs at least one tensor operand")
    dtype = c.tensors[0].dtype
    return elementwise_result(c, c.tensors, c.tensors, "bool",
                              lambda: _float_literals(c, dtype, c.eqn.args))


@rule(ops.Where)
def _where(op: ops.Where, c: EqnContext) -> TensorType:
    cond, x, y = c.args
    if cond is None or cond.dtype != "bool":  # where_c1
        what = "a scalar" if cond is None else f"of dtype {cond.dtype}"
        raise c.fail("where_c1", f"where's condition must be a bool tensor, not {what}; "
                     "compare with eq, ne, lt, le, gt or ge")
    values = [t for t in (x, y) if t is not None]
    if not values:  # where_c2
        raise c.fail("where_c2", "where needs a tensor among its two values (the result's dtype)")
    dtype = values[0].dtype
    for t in values[1:]:
        if t.dtype != dtype:  # where_c2
            raise c.fail("where_c2", f"where's values differ in dtype: {dtype} and {t.dtype}; use cast")
    return elementwise_result(c, [cond, *values], values, dtype,
                              lambda: _float_literals(c, dtype, c.eqn.args[1:]))


@rule(ops.Iota)
def _iota(op: ops.Iota, c: EqnContext) -> TensorType:
    t = c.eqn.type
    if t is None:  # iota_c1
        raise c.fail("iota_c1", "iota needs a declared result type: t: i32[S@DIDx, S] on m = iota(axis=0)")
    if not 0 <= op.axis < t.rank:  # iota_c2
        raise c.fail("iota_c2", f"axis={op.axis} is not an axis of {t} (0..{t.rank - 1})")
    if t.dtype == "bool":  # iota_c3
        raise c.fail("iota_c3", "iota gives indices: an integer or float dtype, not bool")
    check_param_extents(c.eqn.out, t, c.eqn.loc, "iota result")  # type_c10
    return t
