"""What may read or make an interleaved axis (docs/spec.md §3.4, interleave_c1).

A device's part of an interleaved axis is several runs of it, not one block.
Ops that act on each element (or each row) alike, reductions, permutes and
`set` treat it as any sharded axis. An op that needs a device's part to be one
block of the axis (a reshape, a window op over the axis, a matmul contracting
it, an iota, an expand that grows a b axis into it) is refused at its equation,
naming the `set` to a contiguous sharding to insert first.
"""

from __future__ import annotations

from dataclasses import replace

from refir.checks.inference import EqnContext
from refir.checks.rules_matmul import promoted
from refir.errors import VerifyError
from refir.ir import ops
from refir.ir.program import Var
from refir.ir.types import TensorType, shard_text


def contiguous(t: TensorType) -> TensorType:
    """`t` with every interleaved axis cut into contiguous blocks over the same mesh axes."""
    return replace(t, axes=tuple(replace(a, split=()) for a in t.axes))


def _axes(op: object, x: TensorType) -> list[int]:
    """The axes of operand x the op needs as one block per device."""
    match op:
        case ops.Reshape():
            return list(range(x.rank))
        case ops.Slice(axes=axes):
            return list(axes)
        case ops.Select(axis=axis) | ops.Cat(axis=axis):
            return [axis]
        case ops.Pad(low=low, high=high):
            return [i for i, (lo, hi) in enumerate(zip(low, high)) if lo or hi]
    return []


def check_interleaved(op: object, c: EqnContext) -> None:
    """interleave_c1: the operands' and the declared result's interleaved axes."""
    for arg, x in zip(c.eqn.args, c.args):
        if x is None or not x.interleaved():
            continue
        bad = [i for i in _axes(op, x) if x.axes[i].split]
        if isinstance(op, ops.Matmul) and len(c.tensors) == 2:
            a, b = c.tensors
            xa, xb = promoted(a, b)
            if xa[-1].split or xb[-2].split:
                bad = [x.rank - 1 if x is a else max(x.rank - 2, 0)]
        if bad and isinstance(arg, Var):
            i = bad[0]
            raise _refused(c, f"{ops.op_name(op)} needs axis {i} of {arg.name} as one block per device, but it "
                           f"is interleaved on {shard_text(x.axes[i].shard, x.axes[i].split)}; insert `set` of "
                           f"{arg.name} to {contiguous(x)} (contiguous blocks) first")
    declared = c.eqn.type
    if declared is None or not declared.interleaved():
        return
    if isinstance(op, (ops.Reshape, ops.Iota)) or (isinstance(op, ops.Expand) and c.args[0] is not None and any(
            a.split and i < c.args[0].rank and c.args[0].axes[i].broadcast for i, a in enumerate(declared.axes))):
        raise _refused(c, f"{ops.op_name(op)} makes each device's part as one block, but the result is declared "
                       f"{declared}; declare it {contiguous(declared)} and insert a `set` to the interleaved type")


def _refused(c: EqnContext, message: str) -> VerifyError:
    return c.fail("interleave_c1", message)
