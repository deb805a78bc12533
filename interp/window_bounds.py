"""Error bounds of the window ops (slice, select, pad, cat): they move elements,
so each result element carries its operand element's bound; pad's constant
carries a literal's (its rounding to the tensor's dtype, where the model is exact)."""

from __future__ import annotations

import numpy as np

from interp import impls
from interp.error_bounds import Operands, _exact_scalar, _literal, rule
from refir.ir import ops
from refir.ir.types import is_float


@rule(ops.Slice, ops.Select, ops.Cat)
def _moved(op: ops.Slice | ops.Select | ops.Cat, v: Operands) -> np.ndarray:
    bs = [np.broadcast_to(b, x.shape) for b, x in zip(v.bs, v.xs)]
    return np.asarray(impls.IMPLS[type(op)](op, *bs))


@rule(ops.Pad)
def _pad(op: ops.Pad, v: Operands) -> np.ndarray:
    b = np.broadcast_to(v.bs[0], v.xs[0].shape)
    edge = _literal(_exact_scalar(op.value), v.m.dtype(v.src)) if is_float(v.src) and v.m.exact else np.zeros(())
    shape = tuple(n + lo + hi for n, lo, hi in zip(b.shape, op.low, op.high))
    out = np.full(shape, float(edge))
    out[tuple(slice(lo, lo + n) for n, lo in zip(b.shape, op.low))] = b
    return out
