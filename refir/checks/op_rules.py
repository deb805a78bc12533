"""Type rules of today's source ops: elementwise, cast, permute, unsqueeze, reductions
and set (matmul's are in rules_matmul). Each check cites its constraint as docs/spec.md labels it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from refir.checks.inference import (
    EqnContext,
    keep_sharding,
    rule,
    same_extent,
    same_shape,
    unary_operand,
)
from refir.ir import ops
from refir.ir.program import Lit
from refir.ir.types import BROADCAST, FLOATS, INTEGERS, Axis, TensorType, shard_text


@rule(ops.Binary, ops.Unary)
def _elementwise(op: ops.Binary | ops.Unary, c: EqnContext) -> TensorType:
    if not c.tensors:  # elementwise_c1
        raise c.fail("elementwise_c1", f"{op.name} needs at least one tensor operand")
    dtype = c.tensors[0].dtype
    return elementwise_result(c, c.tensors, c.tensors, dtype, lambda: _elementwise_dtype(op, dtype, c))


def elementwise_result(c: EqnContext, tensors: list[TensorType], typed: list[TensorType], dtype: str,
                       check: Callable[[], None]) -> TensorType:
    """An elementwise result of `dtype` over `tensors` (elementwise_c3..c5); `typed`, the
    operands that must share one dtype (elementwise_c2); `check`, the op's own dtype rules."""
    first = tensors[0]
    for t in typed[1:]:
        if t.dtype != typed[0].dtype:  # elementwise_c2
            raise c.fail("elementwise_c2", f"operands differ in dtype: {typed[0].dtype} and {t.dtype}; "
                         "use cast")
    for t in tensors[1:]:
        if t.rank != first.rank:  # elementwise_c3
            raise c.fail("elementwise_c3", f"operands differ in rank: {first.rank} and {t.rank}; "
                         "use unsqueeze")
        if t.mesh != first.mesh:  # elementwise_c4
            raise c.fail("elementwise_c4", f"operands live on meshes {first.mesh.name!r} and "
                         f"{t.mesh.name!r}; move one with set")
    axes = []
    for i in range(first.rank):
        column = [t.axes[i] for t in tensors if not t.axes[i].broadcast]
        for a in column[1:]:
            if a.extent != column[0].extent:  # elementwise_c3
                raise c.fail("elementwise_c3", f"axis {i} has extents {column[0].extent} and "
                             f"{a.extent}; only b axes broadcast")
        shards = {(a.shard, a.split) for a in column if a.shard}  # split factors too (§3.4)
        if len(shards) > 1:  # elementwise_c5
            raise c.fail("elementwise_c5", f"axis {i} is sharded on "
                         f"{' and '.join(sorted(shard_text(*s) for s in shards))}")
        shard, split = shards.pop() if shards else (None, ())
        axes.append(Axis(column[0].extent, shard, split=split) if column else BROADCAST)
    check()
    inferred = TensorType(dtype, tuple(axes), first.mesh)
    declared = c.eqn.type
    if declared is None:
        return inferred
    same_shape(declared, inferred, c)
    if declared.mesh != inferred.mesh:  # elementwise_c4
        raise c.fail("elementwise_c4", f"the result is on mesh {declared.mesh.name!r}, the operands "
                     f"on {inferred.mesh.name!r}; move them with set")
    for t in tensors:
        for i, (a, r) in enumerate(zip(t.axes, declared.axes)):
            if a.shard and (a.shard, a.split) != (r.shard, r.split):  # elementwise_c5
                raise c.fail("elementwise_c5", f"an operand has axis {i} sharded on {shard_text(a.shard, a.split)} "
                             "but the result has it "
                             f"{'on ' + shard_text(r.shard, r.split) if r.shard else 'replicated'}; "
                             "reshard with set")
    return declared


def _elementwise_dtype(op: ops.Binary | ops.Unary, dtype: str, c: EqnContext) -> None:
    if op.name in ("div", "exp", "log", "sqrt", *ops.MASK_UNARY) and dtype not in FLOATS:  # elementwise_c6
        raise c.fail("elementwise_c6", f"{op.name} needs a float dtype, not {dtype}")
    if dtype == "bool" and op.name not in ("maximum", "minimum"):  # elementwise_c6
        raise c.fail("elementwise_c6", f"{op.name} is not defined on bool")
    for a in c.eqn.args:
        if isinstance(a, Lit) and isinstance(a.value, float) and dtype not in FLOATS:  # elementwise_c7
            raise c.fail("elementwise_c7", f"the float literal {a.value} needs a float tensor, "
                         f"not {dtype}")



@rule(ops.Cast)
def _cast(op: ops.Cast, c: EqnContext) -> TensorType:
    return keep_sharding(replace(unary_operand(c), dtype=op.dtype, layout=None), c)


@rule(ops.Permute)
def _permute(op: ops.Permute, c: EqnContext) -> TensorType:
    x = unary_operand(c)
    if sorted(op.perm) != list(range(x.rank)):  # permute_c1
        raise c.fail("permute_c1", f"{list(op.perm)} is not a permutation of 0..{x.rank - 1}")
    return keep_sharding(replace(x, axes=tuple(x.axes[p] for p in op.perm), layout=None), c)


@rule(ops.Unsqueeze)
def _unsqueeze(op: ops.Unsqueeze, c: EqnContext) -> TensorType:
    x = unary_operand(c)
    rank = x.rank + len(op.dims)
    if len(set(op.dims)) != len(op.dims) or not all(0 <= d < rank for d in op.dims):  # unsqueeze_c1
        raise c.fail("unsqueeze_c1", f"dims {list(op.dims)} must be distinct positions in 0..{rank - 1}")
    rest = iter(x.axes)
    axes = tuple(BROADCAST if i in op.dims else next(rest) for i in range(rank))
    return keep_sharding(replace(x, axes=axes, layout=None), c)


@rule(ops.Reduction)
def _reduction(op: ops.Reduction, c: EqnContext) -> TensorType:
    x = unary_operand(c)
    if len(set(op.dims)) != len(op.dims) or not all(0 <= d < x.rank for d in op.dims):  # reduce_c1
        raise c.fail("reduce_c1", f"dims {list(op.dims)} must be distinct axes in 0..{x.rank - 1}")
    if op.kind in ("band", "bor", "bxor") and x.dtype not in INTEGERS | {"bool"}:  # reduce_c2
        raise c.fail("reduce_c2", f"{op.kind} needs an integer or bool dtype, not {x.dtype}")
    if op.kind in ("sum", "prod") and x.dtype == "bool":  # reduce_c2
        raise c.fail("reduce_c2", f"{op.kind} is not defined on bool; use max or min")
    kept = tuple(a for i, a in enumerate(x.axes) if i not in op.dims)
    inferred = TensorType(x.dtype, kept, x.mesh)
    if c.eqn.type is None:
        return inferred
    same_shape(c.eqn.type, inferred, c)
    return c.eqn.type


@rule(ops.Set)
def _set(op: ops.Set, c: EqnContext) -> TensorType:
    x = unary_operand(c)
    if c.eqn.type is None:
        return replace(x, layout=None)
    if c.eqn.type.dtype != x.dtype or c.eqn.type.rank != x.rank or not all(
        same_extent(p, q) for p, q in zip(c.eqn.type.axes, x.axes)
    ):  # set_c1
        raise c.fail("set_c1", f"set keeps dtype and extents: {x} cannot become {c.eqn.type}")
    return c.eqn.type
