"""The verifier's table of type rules, one per op class, and the context a rule checks an
equation in. The rules live by op family in modules of their own (op_rules, ...), each
registering with `@rule(ops.X)`; the verifier imports them all."""

from __future__ import annotations

from collections.abc import Callable

from refir.errors import VerifyError
from refir.ir import ops
from refir.ir.program import Eqn, Var
from refir.ir.tables import registrar
from refir.ir.types import Axis, TensorType, shard_text


class EqnContext:
    """Checking context of one equation: its operands' types and a `fail` helper."""

    def __init__(self, eqn: Eqn, types: dict[str, TensorType]) -> None:
        self.eqn = eqn
        self.args = [types[a.name] if isinstance(a, Var) else None for a in eqn.args]
        self.tensors = [t for t in self.args if t is not None]

    def fail(self, label: str, message: str) -> VerifyError:
        return VerifyError(self.eqn.loc, label, f"in {self.eqn.out}: {message}")


Rule = Callable[[object, EqnContext], TensorType]
INFER: dict[type, Rule] = {}


rule = registrar(INFER)


def same_extent(a: Axis, b: Axis) -> bool:
    return a.broadcast == b.broadcast and a.extent == b.extent


def placement_text(a: Axis) -> str:
    return f"sharded on {shard_text(a.shard, a.split)}" if a.shard else "replicated"


def extents_text(t: TensorType) -> str:
    return ", ".join("b" if a.broadcast else str(a.extent) for a in t.axes)


def unary_operand(c: EqnContext) -> TensorType:
    if c.args[0] is None:  # op_c2
        raise c.fail("op_c2", f"{ops.op_name(c.eqn.op)} needs a tensor operand")
    return c.args[0]


def keep_sharding(inferred: TensorType, c: EqnContext) -> TensorType:
    """Result of an op that moves no data: a declared type may change only the layout."""
    declared = c.eqn.type
    if declared is None:
        return inferred
    same_shape(declared, inferred, c)
    if declared.mesh != inferred.mesh or declared.placements() != inferred.placements():  # result_c2
        raise c.fail("result_c2", f"{ops.op_name(c.eqn.op)} gives {inferred}, declared {declared}; "
                     "a resharding needs an explicit set")
    return declared


def same_shape(declared: TensorType, inferred: TensorType, c: EqnContext) -> None:
    if declared.dtype != inferred.dtype:  # result_c1
        raise c.fail("result_c1", f"declared dtype {declared.dtype}, but the op gives {inferred.dtype}")
    if declared.rank != inferred.rank or not all(
        same_extent(a, b) for a, b in zip(declared.axes, inferred.axes)
    ):  # result_c1
        raise c.fail("result_c1", f"declared extents [{extents_text(declared)}], but the op gives "
                     f"[{extents_text(inferred)}]")
