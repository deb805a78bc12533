"""Lowering of the window ops (slice, select, pad, cat; docs/spec.md §5.8).

Where the op changes only unsharded axes, each device applies it to its own
block: a local step. Along a sharded axis the op changes which device holds
what: every operand is first gathered along the axes the op changes (the
resharding rules of refir.lowering.lower: an allgather per axis), the op runs on
those whole axes, and the result is cut to its declared sharding (a keep_block:
each device keeps its block, the blocks of the result's extent, uneven ones
included)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from refir.checks.rules_window import touched
from refir.ir import ops
from refir.ir.program import Eqn, Operand, Var
from refir.ir.types import TensorType

if TYPE_CHECKING:
    from refir.lowering.lower import _Lowerer


def needs_gather(op: object, operands: list[TensorType]) -> tuple[int, ...]:
    """The operand axes to gather first: those the op changes that some operand shards."""
    moved = touched(op, operands[0])
    return tuple(i for i in moved if any(x.axes[i].shard for x in operands))


def result_axes(op: object, axes: tuple[int, ...]) -> tuple[int, ...]:
    """Where operand axes `axes` are in the result (a select's axis is gone)."""
    return () if isinstance(op, ops.Select) else axes


def lower_window(lw: _Lowerer, e: Eqn, t: TensorType) -> None:
    operands = [lw.types[a.name] for a in e.args if isinstance(a, Var)]
    gathered = needs_gather(e.op, operands)
    if not gathered:
        lw.emit(e.out, e.op, e.args, t, e)  # every device windows its own block
        return
    whole_of: dict[str, str] = {}  # an operand given twice is gathered once
    for a, x in zip(e.args, operands):
        if a.name not in whole_of:
            whole = replace(x.with_sharding({i: k for i, k in x.sharding().items() if i not in gathered}),
                            layout=None)
            whole_of[a.name] = lw.fresh(a.name, whole)
            lw.reshard(a.name, x, whole_of[a.name], whole, e)
    args: list[Operand] = [Var(whole_of[a.name]) for a in e.args]
    cut = result_axes(e.op, gathered)
    local = replace(t.with_sharding({i: k for i, k in t.sharding().items() if i not in cut}), layout=None)
    if local.sharding() == t.sharding():  # the result replicated where the op moved data
        lw.emit(e.out, e.op, tuple(args), t, e)
        return
    name = lw.fresh(e.out, local)
    lw.emit(name, e.op, tuple(args), local, e)
    lw.reshard(name, local, e.out, t, e)  # each device keeps its block
