"""Type rules of matmul, as np.matmul defines it for operands of rank >= 1: batch
axes broadcast from the right (a missing or `b` batch axis takes the other's), a
1-D operand is promoted (a: [K] -> [1, K], b: [K] -> [K, 1]) and that axis
removed from the result. Each check cites its constraint as docs/spec.md labels it."""

from __future__ import annotations

from refir.checks.inference import (
    EqnContext,
    keep_sharding,
    placement_text,
    rule,
    same_extent,
    same_shape,
)
from refir.ir import ops
from refir.ir.types import BROADCAST, Axis, TensorType


def promoted(a: TensorType, b: TensorType) -> tuple[tuple[Axis, ...], tuple[Axis, ...]]:
    """The operands' axes as np.matmul sees them: a 1-D a gains a leading M axis,
    a 1-D b a trailing N axis (both `b`, removed from the result again)."""
    xa = (BROADCAST, *a.axes) if a.rank == 1 else a.axes
    xb = (*b.axes, BROADCAST) if b.rank == 1 else b.axes
    return xa, xb


def batch_pairs(xa: tuple[Axis, ...], xb: tuple[Axis, ...]) -> list[tuple[Axis, Axis]]:
    """The batch axes of both, aligned from the right; a missing one is `b`."""
    n = max(len(xa), len(xb)) - 2
    pad = lambda axes: (BROADCAST,) * (n - len(axes) + 2) + tuple(axes[:-2])  # noqa: E731
    return list(zip(pad(xa), pad(xb)))


def matmul_axes(a: TensorType, b: TensorType) -> tuple[Axis, ...]:
    """The result's axes (checked operands): batch axes from whichever operand
    has them whole (a's where both do), M from a, N from b."""
    xa, xb = promoted(a, b)
    batch = tuple(y if x.broadcast else x for x, y in batch_pairs(xa, xb))
    m = (xa[-2],) if a.rank > 1 else ()
    n = (xb[-1],) if b.rank > 1 else ()
    return batch + m + n


@rule(ops.Matmul)
def _matmul(op: ops.Matmul, c: EqnContext) -> TensorType:
    if len(c.tensors) != 2:  # op_c2
        raise c.fail("op_c2", "matmul takes two tensor operands")
    a, b = c.tensors
    if a.rank < 1 or b.rank < 1:  # matmul_c1
        raise c.fail("matmul_c1", f"operands need a rank of at least 1, not {a.rank} and {b.rank}")
    if a.dtype != b.dtype or a.dtype == "bool" or a.mesh != b.mesh:  # matmul_c1
        raise c.fail("matmul_c1", f"operands need one numeric dtype and one mesh "
                     f"({a.dtype} on {a.mesh.name}, {b.dtype} on {b.mesh.name})")
    xa, xb = promoted(a, b)
    ka, kb = xa[-1], xb[-2]
    if not same_extent(ka, kb):  # matmul_c2
        raise c.fail("matmul_c2", f"contracted extents differ: {ka.extent} and {kb.extent}")
    for i, (x, y) in enumerate(batch_pairs(xa, xb)):
        differ = x.extent != y.extent or (x.shard, x.split) != (y.shard, y.split)
        if not x.broadcast and not y.broadcast and differ:  # matmul_c2
            raise c.fail("matmul_c2", f"batch axis {i} differs: {x} and {y}")
    if (ka.shard, ka.split) != (kb.shard, kb.split):  # matmul_c3
        raise c.fail("matmul_c3", f"the contracted axis is {placement_text(ka)} in one operand and "
                     f"{placement_text(kb)} in the other")
    m, n = xa[-2], xb[-1]
    if set(m.dids) & set(n.dids):  # matmul_c3
        raise c.fail("matmul_c3", f"M and N are both sharded on {', '.join(sorted(set(m.dids) & set(n.dids)))}")
    axes = matmul_axes(a, b)
    shards = [d for x in axes for d in x.dids]
    if len(set(shards)) != len(shards):  # matmul_c3
        raise c.fail("matmul_c3", f"the result [{', '.join(map(str, axes))}] would have two axes "
                     "sharded on one mesh axis")
    inferred = TensorType(a.dtype, axes, a.mesh)
    if ka.shard is None or c.eqn.type is None:
        return keep_sharding(inferred, c)
    # A sharded contraction leaves partial sums: the result may be laid out anew, like a reduction.
    same_shape(c.eqn.type, inferred, c)
    return c.eqn.type
