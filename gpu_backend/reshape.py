"""`reshape` on device buffers (ops.Reshape): numpy's C-order reshape.

A buffer dense row-major is reshaped as a view of its memory (values are never
written after they are made, so sharing is exact); any other (strided, negatively
strided, a permuted layout) is first copied row-major by copy_into, which reads any
strides. The result then takes the step's layout (a copy where it is not row-major).
"""

from __future__ import annotations

from math import prod

from gpu_backend.buffer import DeviceBuffer
from gpu_backend.kernels import copy_into
from refir.ir.types import dense_strides


def row_major(x: DeviceBuffer) -> DeviceBuffer:
    """x's elements dense row-major: x itself where they already lie so."""
    order = tuple(range(x.ndim))
    if x.size == 0 or x.is_dense(order):
        return x
    return copy_into(DeviceBuffer.empty(x.shape, x.dtype, order), x)


def reshape_buffer(x: DeviceBuffer, shape: tuple[int, ...]) -> DeviceBuffer:
    """x reshaped to `shape` in C order, row-major (a view where x is row-major)."""
    if prod(shape) != x.size:  # the verifier and check_bound make sure it never is
        raise ValueError(f"cannot reshape {x.shape} into {shape}")
    if x.size == 0:
        return DeviceBuffer.empty(shape, x.dtype, tuple(range(len(shape))))
    dense = row_major(x)
    return DeviceBuffer(dense.data, dense.offset, shape, dense_strides(shape, tuple(range(len(shape))), 1))
