"""Replicated -> partial on the device (lowering's `partition`, docs/spec.md §3.3): the
device that keeps the value (interp.partition.keeps) has its buffer (a view where it
lies in the result's order, else a copy), every other a fresh one filled with the
kind's identity (window_kernels.fill_view, a copy of bits)."""

from __future__ import annotations

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.impls import Order, laid_out_view, per_device
from gpu_backend.kernels.window_kernels import fill_view
from interp.impls import identity
from interp.partition import keeps
from refir.ir import ops
from refir.ir.types import TensorType


@per_device(ops.Partition)
def partition(op: ops.Partition, order: Order, t: TensorType, device: int, args: list) -> DeviceBuffer:
    (x,) = args
    if keeps(op, t, device):
        return laid_out_view(x, order)
    return fill_view(DeviceBuffer.empty(x.shape, x.dtype, order), np.asarray(identity(op.kind, x.dtype), x.dtype))
