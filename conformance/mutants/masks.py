"""Mutants of the mask ops (docs/spec.md §5.9): wrong comparisons, a where with its
branches swapped, an iota of local indices, and unary ops computed by a fast
formula beyond num_c7's bound. Each patches the spmd backend's numpy meaning
(interp/masks.py, interp/impls.py); importing this module registers them in
conformance.mutants.MUTANTS (conformance/mutants.py imports it)."""

from __future__ import annotations

from collections.abc import Iterator
from unittest import mock

import numpy as np

import interp.impls
import interp.masks
import interp.spmd
from conformance.mask_classes import fast_tanh, rsqrt_pow
from conformance.mutants.registry import mutant
from refir.ir import ops
from refir.ir.types import TensorType


@mutant("lt computed as le: equal elements compare true", by="values", needs=(ops.Compare,))
def lt_as_le() -> Iterator[None]:
    with mock.patch.dict(interp.masks.COMPARE_FNS, {"lt": np.less_equal, "gt": np.greater_equal}):
        yield


@mutant("where with its branches swapped: y where the condition holds", by="values", needs=(ops.Where,))
def where_swapped() -> Iterator[None]:
    def swapped(op: ops.Where, cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.asarray(np.where(cond, y, x))

    with mock.patch.dict(interp.impls.IMPLS, {ops.Where: swapped}):
        yield


@mutant("iota of a sharded axis gives each device its local indices, not its block's global ones",
        by="values", needs=(ops.Iota,))
def iota_local_indices() -> Iterator[None]:
    right = interp.masks.iota_block

    def local(op: ops.Iota, t: TensorType, device: int, extents: list[int]) -> np.ndarray:
        block = right(op, t, device, extents)
        first = np.take(block, [0], axis=op.axis) if block.shape[op.axis] else block
        return np.asarray(block - first + np.zeros_like(first), dtype=block.dtype)  # starts at 0 on every device

    with mock.patch.object(interp.spmd, "iota_block", local):
        yield


@mutant("tanh by a fast rational approximation (a --use_fast_math tanh), far beyond num_c7's 9 ulps",
        by="values", needs=(ops.Unary,))
def tanh_fast_approximation() -> Iterator[None]:
    with mock.patch.dict(interp.impls.UNARY_FNS, {"tanh": interp.masks._in_f32(fast_tanh)}):
        yield


@mutant("rsqrt as pow(x, -0.5): within an ulp, but not the two correct roundings num_c7 makes exact",
        by="values", needs=(ops.Unary,))
def rsqrt_as_pow() -> Iterator[None]:
    with mock.patch.dict(interp.impls.UNARY_FNS, {"rsqrt": interp.masks._in_f32(rsqrt_pow)}):
        yield
