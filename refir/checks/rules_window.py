"""Type rules of the window ops: slice, select, pad and cat (docs/spec.md §5.8).
Each check cites its constraint as docs/spec.md labels it.

The result keeps the operand's mesh and sharding; an axis the op changes (`touched`)
stays sharded as in the operand, or may be declared replicated. Along a sharded
axis lowering gathers the axis first (refir.lowering.window)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from refir.checks.inference import EqnContext, rule, same_extent, same_shape, unary_operand
from refir.errors import InputError
from refir.ir import ops
from refir.ir.program import Func, Var
from refir.ir.types import DTYPES, FLOATS, INTEGERS, Axis, TensorType, extent_value, symbols_of


def touched(op: object, x: TensorType) -> tuple[int, ...]:
    """The operand axes whose elements the op moves: a slice's axes that keep
    less than the whole axis, a select's axis, a pad's widened axes, a cat's axis."""
    match op:
        case ops.Slice():
            return tuple(a for a, b, e, s in zip(op.axes, op.starts, op.stops, op.steps)
                         if (b, e, s) != (0, x.axes[a].extent, 1))
        case ops.Select(axis=axis) | ops.Cat(axis=axis):
            return (axis,)
        case ops.Pad():
            return tuple(i for i, (lo, hi) in enumerate(zip(op.low, op.high)) if lo or hi)
    return ()


def window_result(inferred: TensorType, moved: tuple[int, ...], c: EqnContext) -> TensorType:
    """The declared result where there is one: extents as inferred; mesh and sharding
    as inferred, but for result axes in `moved`, which may also be replicated (result_c2)."""
    declared = c.eqn.type
    if declared is None:
        return inferred
    same_shape(declared, inferred, c)
    allowed = declared.mesh == inferred.mesh and all(
        d.shard == i.shard or (k in moved and d.shard is None)
        for k, (d, i) in enumerate(zip(declared.axes, inferred.axes)))
    if not allowed:  # result_c2
        raise c.fail("result_c2", f"{ops.op_name(c.eqn.op)} gives {inferred}, declared {declared}; only an "
                     "axis the op changes may be declared replicated, any other resharding needs a set")
    return declared


def _static(x: TensorType, axis: int, label: str, what: str, c: EqnContext) -> int:
    a = x.axes[axis]
    if a.broadcast or not isinstance(a.extent, int):
        which = "a b axis" if a.broadcast else f"of symbolic extent {a.extent}"
        raise c.fail(label, f"{what} axis {axis}, which is {which}: it needs a static extent")
    return a.extent


@rule(ops.Slice)
def _slice(op: ops.Slice, c: EqnContext) -> TensorType:
    x = unary_operand(c)
    n = len(op.axes)
    if len(op.starts) != n or len(op.stops) != n or len(op.steps) != n:  # slice_c1
        raise c.fail("slice_c1", f"starts, stops, steps and axes need one entry per sliced axis "
                     f"({len(op.starts)}, {len(op.stops)}, {len(op.steps)}, {n})")
    if len(set(op.axes)) != n or not all(0 <= a < x.rank for a in op.axes):  # slice_c1
        raise c.fail("slice_c1", f"axes {list(op.axes)} must be distinct axes in 0..{x.rank - 1}")
    axes = list(x.axes)
    for a, start, stop, step in zip(op.axes, op.starts, op.stops, op.steps):
        extent = _static(x, a, "slice_c2", "slices", c)  # slice_c2
        if step < 1 or not 0 <= start <= stop <= extent:  # slice_c3
            raise c.fail("slice_c3", f"axis {a} of extent {extent}: {start}:{stop}:{step} needs "
                         f"0 <= start <= stop <= {extent} and step >= 1 (refir does not clamp)")
        axes[a] = replace(axes[a], extent=len(range(start, stop, step)))
    inferred = replace(x, axes=tuple(axes), layout=None)
    return window_result(inferred, touched(op, x), c)


@rule(ops.Select)
def _select(op: ops.Select, c: EqnContext) -> TensorType:
    x = unary_operand(c)
    if not 0 <= op.axis < x.rank:  # select_c1
        raise c.fail("select_c1", f"axis {op.axis} is not an axis of a rank-{x.rank} operand")
    a = x.axes[op.axis]
    extent = 1 if a.broadcast else a.extent
    if op.index < 0 or isinstance(extent, int) and op.index >= extent:  # select_c2
        raise c.fail("select_c2", f"index {op.index} is outside axis {op.axis} of extent {extent} "
                     f"(0..{extent - 1 if isinstance(extent, int) else str(extent) + '-1'}; refir does not wrap)")
    inferred = replace(x, axes=x.axes[:op.axis] + x.axes[op.axis + 1:], layout=None)
    return window_result(inferred, (), c)


@rule(ops.Pad)
def _pad(op: ops.Pad, c: EqnContext) -> TensorType:
    x = unary_operand(c)
    if len(op.low) != x.rank or len(op.high) != x.rank:  # pad_c1
        raise c.fail("pad_c1", f"low and high need one width per axis ({x.rank}), not "
                     f"{len(op.low)} and {len(op.high)}")
    if any(w < 0 for w in op.low + op.high):  # pad_c1
        raise c.fail("pad_c1", f"widths low={list(op.low)} high={list(op.high)} must be >= 0")
    axes = list(x.axes)
    for i in touched(op, x):
        extent = _static(x, i, "pad_c2", "pads", c)  # pad_c2
        axes[i] = replace(axes[i], extent=extent + op.low[i] + op.high[i])
    _pad_value(op.value, x.dtype, c)
    inferred = replace(x, axes=tuple(axes), layout=None)
    return window_result(inferred, touched(op, x), c)


def _pad_value(value: int | float, dtype: str, c: EqnContext) -> None:
    if isinstance(value, float) and dtype not in FLOATS:  # pad_c3
        raise c.fail("pad_c3", f"the float value {value} needs a float tensor, not {dtype}")
    if isinstance(value, int) and dtype in FLOATS and abs(value) >= 2**1024:  # pad_c3
        raise c.fail("pad_c3", f"the value {str(value)[:20]}... is beyond every float")
    if isinstance(value, int) and dtype == "bool" and value not in (0, 1):  # pad_c3
        raise c.fail("pad_c3", f"a bool tensor pads with 0 or 1, not {value}")
    if isinstance(value, int) and dtype in INTEGERS:
        info = np.iinfo(DTYPES[dtype])
        if not info.min <= value <= info.max:  # pad_c3
            raise c.fail("pad_c3", f"the value {value} is outside {dtype}'s range {info.min}..{info.max}")


@rule(ops.Cat)
def _cat(op: ops.Cat, c: EqnContext) -> TensorType:
    if len(c.tensors) != len(c.args) or len(c.tensors) < 2:  # op_c2
        raise c.fail("op_c2", "cat takes two or more tensor operands")
    first = c.tensors[0]
    if not 0 <= op.axis < first.rank:  # cat_c1
        raise c.fail("cat_c1", f"axis {op.axis} is not an axis of a rank-{first.rank} operand")
    total = 0
    for k, t in enumerate(c.tensors):
        if t.dtype != first.dtype or t.rank != first.rank or t.mesh != first.mesh:  # cat_c2
            raise c.fail("cat_c2", f"operand {k} is {t}, operand 0 {first}: cat needs one dtype, rank and mesh")
        for i, (a, b) in enumerate(zip(t.axes, first.axes)):
            if i != op.axis and not same_extent(a, b):  # cat_c2
                raise c.fail("cat_c2", f"operand {k} has extent {a} on axis {i}, operand 0 {b}: only axis "
                             f"{op.axis} may differ")
        total += _static(t, op.axis, "cat_c3", f"operand {k} joins on", c)  # cat_c3
        if t.placements() != first.placements():  # cat_c4
            raise c.fail("cat_c4", f"operand {k} is sharded as {t}, operand 0 as {first}: reshard one with set")
    axes = list(first.axes)
    axes[op.axis] = Axis(total, first.axes[op.axis].shard)
    inferred = replace(first, axes=tuple(axes), layout=None)
    return window_result(inferred, (op.axis,), c)


SELECT_C3 = "select_c3"  # an index past a symbolic extent, found when the inputs bind it


def check_select_bounds(func: Func, types: dict[str, TensorType], bindings: Mapping[str, int]) -> None:
    """select_c3: every select of an axis of symbolic extent N has index < N under
    `bindings` (an InputError naming the equation, before anything runs)."""
    for e in func.eqns:
        if isinstance(e.op, ops.Select) and isinstance(e.args[0], Var):
            a = types[e.args[0].name].axes[e.op.axis]
            n = None if isinstance(a.extent, int) or not set(symbols_of(a.extent)) <= set(bindings) else \
                extent_value(a.extent, bindings)
            if n is not None and e.op.index >= n:
                raise InputError(f"{e.loc}: in {e.out}: select index {e.op.index} is outside axis {e.op.axis} "
                                 f"of extent {a.extent}={n} [{SELECT_C3}]")
