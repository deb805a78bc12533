"""Every compute op on device buffers: one function each, in a table keyed by op
class (as interp/impls.py IMPLS), and `GpuLocal`, which runs a lowered step.

Each function returns a buffer dense in the memory order `order` of the
step's result type: a fresh one it writes, or, for the ops that only move
elements (permute, unsqueeze, set), a view of the operand's memory where the
elements already lie in that order (values are never written after they are
made, so sharing is exact). Scalar operands (symbols, literals) take the
tensor dtype exactly as interp.impls converts them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer, to_device
from gpu_backend.kernels import functions
from gpu_backend.kernels.elementwise import copy_into, elementwise
from gpu_backend.kernels.matmul_ranks import matmul_any
from gpu_backend.kernels.reduce import reduce_into
from gpu_backend.kernels.reshape import reshape_buffer
from gpu_backend.kernels.scalars import elementwise_scalar
from gpu_backend.transports.device_arrays import DeviceArrays
from interp.expand import local_extents
from interp.impls import reshape_extents, scalar_value
from interp.spmd import reshape_block, slice_block
from refir.ir import ops
from refir.ir.tables import registrar
from refir.ir.types import DTYPES, TensorType, dense_strides
from refir.lowering.lower import Step

Order = tuple[int, ...]
GpuImpl = Callable[..., DeviceBuffer]
GPU_IMPLS: dict[type, GpuImpl] = {}


impl = registrar(GPU_IMPLS)
# Ops a device makes knowing where its block lies (iota: the global indices of its block),
# called with (op, order, result type, device, the step's args).
PER_DEVICE: dict[type, Callable[..., DeviceBuffer]] = {}
per_device = registrar(PER_DEVICE)


def scalar_buffer(value: int | float, dtype: np.dtype) -> DeviceBuffer:
    """A python scalar as a 0-d device buffer of the tensor's dtype."""
    return DeviceBuffer.dense(to_device(scalar_value(value, dtype).reshape(1)), ())


@lru_cache(maxsize=64)
def _held_scalar(kind: type, exact: object, dtype: np.dtype) -> DeviceBuffer:
    """A 0-d device buffer of a literal (its type and exact value: a float's bits, so -0.0 is
    not 0.0 and a NaN is one entry) in `dtype`, uploaded once and kept (an upload waits for
    the stream: once a call it cost where's attention mask a sync a call; the conversion µs a
    call). Only `where` takes it: where reads its operands and returns a fresh buffer, so the
    held one is never written, nor seen outside."""
    if kind is bytes:  # the value's bits in dtype
        return DeviceBuffer.dense(to_device(np.frombuffer(exact, dtype).copy()), ())  # type: ignore[arg-type]
    value = struct.unpack("<d", exact)[0] if kind is float else exact  # type: ignore[arg-type]
    return DeviceBuffer.dense(to_device(scalar_value(value, dtype).reshape(1)), ())


def _held(value: object, dtype: np.dtype) -> DeviceBuffer:
    """`_held_scalar` of a literal; any other scalar (a numpy one, a 0-d array) by its bits in dtype."""
    kind = type(value)
    if kind is float:
        return _held_scalar(float, struct.pack("<d", value), dtype)
    if kind is int or kind is bool:
        return _held_scalar(kind, value, dtype)
    return _held_scalar(bytes, scalar_value(value, dtype).tobytes(), dtype)


@lru_cache(maxsize=1024)
def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """np.broadcast_shapes, kept per pair of shapes (it costs µs a call: runs repeat their shapes)."""
    return tuple(np.broadcast_shapes(a, b))


@impl(ops.Binary)
def binary(op: ops.Binary, order: Order, a: DeviceBuffer, b: DeviceBuffer) -> DeviceBuffer:
    shape = broadcast_shape(a.shape, b.shape)
    return elementwise(functions.binary(op.name, a.dtype), DeviceBuffer.empty(shape, a.dtype, order), a, b)


@impl(ops.Unary)
def unary(op: ops.Unary, order: Order, x: DeviceBuffer) -> DeviceBuffer:
    return elementwise(functions.unary(op.name, x.dtype), DeviceBuffer.empty(x.shape, x.dtype, order), x)


@impl(ops.Cast)
def cast(op: ops.Cast, order: Order, x: DeviceBuffer) -> DeviceBuffer:
    to = DTYPES[op.dtype]
    return elementwise(functions.cast(x.dtype, to), DeviceBuffer.empty(x.shape, to, order), x)


def laid_out_view(view: DeviceBuffer, order: Order) -> DeviceBuffer:
    """`view`'s elements dense in `order`: the same memory where they already
    lie so (with exactly the strides a fresh buffer in `order` has, extent-1
    axes included), else a copy. Sharing is exact: a value is never written
    after it is made (every kernel writes a buffer of its own, fresh)."""
    if view.size and view.is_dense(order):
        return DeviceBuffer(view.data, view.offset, view.shape, dense_strides(view.shape, order, 1))
    return copy_into(DeviceBuffer.empty(view.shape, view.dtype, order), view)


@impl(ops.Permute)
def permute(op: ops.Permute, order: Order, x: DeviceBuffer) -> DeviceBuffer:
    return laid_out_view(x.transpose(op.perm), order)


@impl(ops.Unsqueeze)
def unsqueeze(op: ops.Unsqueeze, order: Order, x: DeviceBuffer) -> DeviceBuffer:
    return laid_out_view(x.expand_dims(op.dims), order)


@impl(ops.Set, ops.Copy, ops.KeepBlock)
def copy(op: object, order: Order, x: DeviceBuffer) -> DeviceBuffer:
    return laid_out_view(x, order)


@impl(ops.Reshape)
def reshape(op: ops.Reshape, order: Order, x: DeviceBuffer, *values: object) -> DeviceBuffer:
    """C-order reshape to op.shape, its symbols taking `values` in order (GpuLocal
    reshapes each device's block to its block of the result instead)."""
    return laid_out_view(reshape_buffer(x, reshape_extents(op, values) if values else _extents(op.shape)), order)


@lru_cache(maxsize=1024)
def _extents(shape: tuple[object, ...]) -> tuple[int, ...]:
    """A reshape's extents where it has no symbols (µs a call: kept by its shape)."""
    return reshape_extents(ops.Reshape(shape), ())  # type: ignore[arg-type]


@impl(ops.Reduction)
def reduction(op: ops.Reduction, order: Order, x: DeviceBuffer) -> DeviceBuffer:
    shape = tuple(n for i, n in enumerate(x.shape) if i not in op.dims)
    return reduce_into(DeviceBuffer.empty(shape, x.dtype, order), x, op.dims, op.kind)


@impl(ops.Matmul)
def matmul(op: ops.Matmul, order: Order, a: DeviceBuffer, b: DeviceBuffer) -> DeviceBuffer:
    return matmul_any(order, a, b, laid_out_view)


@impl(ops.Expand)
def expand(op: ops.Expand, order: Order, x: DeviceBuffer, *extents: int) -> DeviceBuffer:
    """The b axes read with stride 0, copied into a buffer of their extents."""
    return laid_out_view(x.broadcast_to(tuple(int(n) if m == 1 else m for n, m in zip(extents, x.shape))), order)


def compute(op: object, order: Order, args: list[Any]) -> DeviceBuffer:
    """Apply `op`. A binary op's python scalar operand is a kernel argument in
    the tensor dtype (gpu_backend/kernels/scalars.py); any other becomes a device scalar
    (the scalars of ops.TAKES_EXTENTS are extents, handed as they are)."""
    tensors = [a for a in args if type(a) is DeviceBuffer]
    if len(tensors) == len(args) or isinstance(op, ops.TAKES_EXTENTS):
        return GPU_IMPLS[type(op)](op, order, *args)
    # a scalar takes its tensors' dtype (where's values', not its condition's)
    dtype = next(a for a in (args[1:] if isinstance(op, ops.Where) else args) if type(a) is DeviceBuffer).dtype
    if isinstance(op, (ops.Binary, ops.Compare)) and len(args) == 2:
        first = not isinstance(args[0], DeviceBuffer)
        x, value = (args[1], args[0]) if first else (args[0], args[1])
        if isinstance(x, DeviceBuffer) and not isinstance(value, DeviceBuffer):
            if isinstance(op, ops.Compare):
                out, fn = DeviceBuffer.empty(x.shape, np.dtype(bool), order), functions.compare(op.name, dtype)
            else:
                out, fn = DeviceBuffer.empty(x.shape, dtype, order), functions.binary(op.name, dtype)
            return elementwise_scalar(fn, out, x, value, first)
    if isinstance(op, ops.Where):
        values = [a if isinstance(a, DeviceBuffer) else _held(a, dtype) for a in args]
    else:
        values = [a if isinstance(a, DeviceBuffer) else scalar_buffer(a, dtype) for a in args]
    return GPU_IMPLS[type(op)](op, order, *values)


class GpuLocal:
    """Local steps on the device: GPU_IMPLS into the result type's layout."""

    def __init__(self, types: dict[str, TensorType]) -> None:
        self.types = types

    def __call__(self, step: Step, device: int, args: list[Any]) -> DeviceBuffer:
        if isinstance(step.op, ops.KeepBlock):  # the device's own block, as a view (runs: joined on the device)
            args = [slice_block(step, device, args[0], self.types[step.tensor_args()[0]],
                                DeviceArrays(step.type.order).concatenate)]
        if isinstance(step.op, ops.Reshape):  # its scalars are extents: the device's block's
            return laid_out_view(reshape_buffer(args[0], reshape_block(step, device, args)), step.type.order)
        if isinstance(step.op, ops.Expand):  # the extents of this device's block
            args = local_extents(step, device, args, self.types[step.tensor_args()[0]])
        if type(step.op) in PER_DEVICE:  # iota: its operands are the global extents (lowering)
            return PER_DEVICE[type(step.op)](step.op, step.type.order, step.type, device, args)
        return compute(step.op, step.type.order, args)


