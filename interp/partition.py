"""Replicated -> partial without moving data (docs/spec.md §3.3, lowering's `partition`).

On each team along the op's mesh axes, sum and prod leave the value with the
device of coordinate 0 and the kind's identity (0, 1) with the others; max and
min leave it with every device (a max of copies is the value). The terms then
fold back to the value exactly, in any order. The numpy and gpu backends both
ask `keeps` which a device is.
"""

from __future__ import annotations

import numpy as np

from interp.impls import identity
from refir.ir import ops
from refir.ir.types import TensorType

IDEMPOTENT = ("max", "min")


def keeps(op: ops.Partition, t: TensorType, device: int) -> bool:
    """Whether `device` keeps its buffer (else it holds the identity of op.kind)."""
    return op.kind in IDEMPOTENT or t.mesh.team(device, op.mesh_axes)[0] == device


def partition_block(op: ops.Partition, t: TensorType, device: int, x: np.ndarray) -> np.ndarray:
    """`device`'s term: a fresh copy of `x`, or the identity of op.kind in x's shape."""
    if keeps(op, t, device):
        return np.array(x, copy=True)
    return np.full(x.shape, identity(op.kind, x.dtype), x.dtype)
