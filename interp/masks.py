"""The numpy meaning of the mask ops (docs/spec.md §5.9): comparisons, where, iota, and
the unary `tanh erf sigmoid rsqrt sin cos`. The unary ops compute f16 and bf16 in
float32 and round once, as today's unary ops do; f32 and f64 in their own dtype."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from interp.impls import UNARY_FNS, cast, impl
from refir.ir import ops
from refir.ir.types import Bindings, TensorType, as_dtype, axis_block, extent_value, is_bf16

Fn = Callable[[np.ndarray], np.ndarray]

COMPARE_FNS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
               "gt": np.greater, "ge": np.greater_equal}


def _in_f32(fn: Fn) -> Fn:
    """fn on x's dtype; f16 and bf16 computed in float32 and rounded once."""

    def apply(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.dtype == np.float16 or is_bf16(x.dtype):
            return as_dtype(fn(x.astype(np.float32)), x.dtype)
        return np.asarray(fn(x))

    return apply


def _sigmoid(x: np.ndarray) -> np.ndarray:
    one = x.dtype.type(1)
    return one / (one + np.exp(-x))  # nvFuser's and torch's formula, in x's dtype


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return x.dtype.type(1) / np.sqrt(x)  # two correct roundings: every backend's bits


_ERF64 = np.frompyfunc(math.erf, 1, 1)  # numpy has no erf: C's erf, in float64


def _erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 (C99's, as Python's math gives it), rounded once to x's dtype."""
    return np.asarray(_ERF64(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


MASK_UNARY_FNS: dict[str, Fn] = {
    "tanh": _in_f32(np.tanh), "erf": _in_f32(_erf), "sigmoid": _in_f32(_sigmoid),
    "rsqrt": _in_f32(_rsqrt), "sin": _in_f32(np.sin), "cos": _in_f32(np.cos),
}


def value_dtype(op: object, args: list[Any]) -> np.dtype:
    """The dtype a scalar operand takes: the tensors' (where's values', not its condition's)."""
    tensors = [a for a in (args[1:] if isinstance(op, ops.Where) else args) if isinstance(a, np.ndarray)]
    return tensors[0].dtype


@impl(ops.Compare)
def compare(op: ops.Compare, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray(COMPARE_FNS[op.name](a, b))


@impl(ops.Where)
def where(op: ops.Where, cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.asarray(np.where(cond, x, y))


def iota_values(axis: int, dtype: str, shape: tuple[int, ...], start: int) -> np.ndarray:
    """An array of `shape` whose elements are start + their index along `axis`,
    (dtype: a refir name) converted as cast from i64 converts (integers wrap, floats round to nearest)."""

    index = np.arange(start, start + shape[axis], dtype=np.int64)
    index = np.broadcast_to(index.reshape([-1 if i == axis else 1 for i in range(len(shape))]), shape)
    return cast(ops.Cast(dtype), np.array(index))


def iota_global(op: ops.Iota, t: TensorType, bindings: Bindings) -> np.ndarray:
    shape = tuple(1 if a.broadcast else extent_value(a.extent, bindings) for a in t.axes)
    return iota_values(op.axis, t.dtype, shape, 0)


def iota_block_of(op: ops.Iota, t: TensorType, device: int, extents: list[int]) -> tuple[tuple[int, ...], int]:
    """`device`'s block of an iota of global `extents`: its shape, and the global index
    its first element has along op.axis (every backend cuts the block here)."""
    shape, start = [], 0
    for i, (a, n) in enumerate(zip(t.axes, extents)):
        lo, hi = axis_block(t.mesh, a, n, device)
        shape.append(hi - lo)
        if i == op.axis:
            start = lo
    return tuple(shape), start


def iota_block(op: ops.Iota, t: TensorType, device: int, extents: list[int]) -> np.ndarray:
    """`device`'s block of an iota of global `extents`: the global indices of its block."""
    shape, start = iota_block_of(op, t, device, extents)
    return iota_values(op.axis, t.dtype, shape, start)


UNARY_FNS.update(MASK_UNARY_FNS)  # interp.impls' unary table
