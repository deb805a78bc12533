"""What both device transports build on: the buffers a communication
receives (`received`: filled with the sentinel where it is armed), and
interp.collectives' array operations on device buffers (`DeviceArrays`: a
concatenation and a fold are kernels, a split is views). The in-process
transport (in_process.py) runs interp.collectives.exchange with them; the rank
transport (rank_transport.py) folds gathered partials with them.
"""

from __future__ import annotations

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer, upload
from gpu_backend.kernels import functions
from gpu_backend.kernels.elementwise import copy_into, elementwise
from interp import sentinel

Buffers = dict[int, DeviceBuffer]
_SENTINELS: dict[np.dtype, DeviceBuffer] = {}  # one element of each dtype's sentinel, on the device


def received(shape: tuple[int, ...], dtype: np.dtype, order: tuple[int, ...] | None = None) -> DeviceBuffer:
    """DeviceBuffer.empty for what a communication writes: filled with the
    sentinel first where it is armed (interp/sentinel.py), by a copy kernel
    from one element kept on the device (no upload per buffer)."""
    out = DeviceBuffer.empty(shape, dtype, order)
    if sentinel.armed() and out.size:
        one = _SENTINELS.get(np.dtype(dtype))
        if one is None:
            one = _SENTINELS[np.dtype(dtype)] = upload(sentinel.value(dtype).reshape(1))
        copy_into(out, one.broadcast_to(out.shape) if out.ndim else DeviceBuffer(one.data, one.offset, (), ()))
    return out


class DeviceArrays:
    """interp.collectives.Arrays on the device; new buffers are dense in `order`."""

    def __init__(self, order: tuple[int, ...]) -> None:
        self.order = order

    def concatenate(self, xs: list[DeviceBuffer], axis: int) -> DeviceBuffer:
        shape = list(xs[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        out = received(tuple(shape), xs[0].dtype, self.order)
        start = 0
        for x in xs:
            copy_into(out.take(axis, start, start + x.shape[axis]), x)
            start += x.shape[axis]
        return out

    def split(self, x: DeviceBuffer, n: int, axis: int) -> list[DeviceBuffer]:
        return x.split(n, axis)

    def fold(self, kind: str, parts: list[DeviceBuffer]) -> DeviceBuffer:
        """Left to right in team order, in the parts' own dtype (interp.impls.fold)."""
        out = received(parts[0].shape, parts[0].dtype, self.order)
        if len(parts) == 1:
            return copy_into(out, parts[0])
        combine = functions.binary(functions.COMBINE[kind], parts[0].dtype)
        elementwise(combine, out, parts[0], parts[1])
        for p in parts[2:]:
            elementwise(combine, out, out, p)
        return out
