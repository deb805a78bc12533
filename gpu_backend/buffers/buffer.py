"""Device buffers with layouts: a flat device array seen through an element
offset, a shape and element strides (any sign, zero for broadcast axes).

Views (transpose, slices, inserted axes, broadcasting) only change offset,
shape and strides; kernels read any of them. A buffer made by `empty` is dense
in the memory order it was asked for, the way refir.ir.types lays out host arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import Any

import numpy as np

from gpu_backend.buffers import memory
from gpu_backend.device import SIMULATED, cuda
from gpu_backend.launches import recording
from gpu_backend.transports import pending
from refir.ir.types import bf16, block, dense_strides, is_bf16

# numba has no bfloat16: device memory holds its bits as uint16, which is no
# refir dtype, so a uint16 device array always means bfloat16.
_BITS = np.dtype(np.uint16)
if not SIMULATED:
    from numba.cuda.cudadrv.driver import device_to_host, host_to_device


def storage(dtype: np.dtype) -> np.dtype:
    """The dtype a device array of logical `dtype` is allocated with."""
    got = _STORED.get(dtype)
    if got is None:
        got = _STORED[dtype] = _BITS if is_bf16(dtype) else np.dtype(dtype)
    return got


_STORED: dict[np.dtype, np.dtype] = {}
_dense_strides = lru_cache(maxsize=4096)(dense_strides)  # a run lays out the same shapes again and again


def to_device(x: np.ndarray) -> Any:
    """A 1-D or n-D host array on the device (bfloat16 as its bits). On a GPU, a
    C-contiguous 1-D array goes by one driver copy into fresh pooled memory
    (gpu_backend/buffers/memory.py), without numba's layout checks and host-side
    conversions (tens of µs)."""
    x = x.view(_BITS) if is_bf16(x.dtype) else x
    if recording.active is not None:
        recording.host_copy("an upload")
    pending.settle()  # the copy waits for the stream: first wait, boundedly, for queued collectives
    if SIMULATED or not x.flags.c_contiguous or x.size == 0:
        return cuda.to_device(x)
    if x.ndim == 1:
        out = memory.empty(x.size, x.dtype)
        if type(out) is memory.Memory:
            out.upload(x)
            return out
    else:
        out = cuda.device_array(x.shape, x.dtype)
    host_to_device(out, x, x.nbytes)
    return out


def to_host(a: Any) -> np.ndarray:
    """A contiguous device array's elements in a fresh host array (one driver copy on a GPU)."""
    if recording.active is not None:
        recording.host_copy("a download")
    pending.settle()
    if SIMULATED or a.size == 0:
        return np.asarray(a.copy_to_host())
    host = np.empty(a.shape, a.dtype)
    if type(a) is memory.Memory:
        a.download(host)
    else:
        device_to_host(host, a, host.nbytes)
    return host


@dataclass(frozen=True)
class DeviceBuffer:
    data: Any  # a 1-D device array: gpu_backend.buffers.memory.Memory, or numba's
    offset: int  # of element [0, ..., 0] in `data`
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements

    @property
    def dtype(self) -> np.dtype:
        """The logical dtype (bfloat16 for bits stored as uint16)."""
        d = self.data.dtype  # an np.dtype, for numba's arrays and Memory alike
        return bf16() if d.char == "H" else d  # uint16 (no refir dtype) holds the bits of bfloat16

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return prod(self.shape)

    # ---- making buffers -------------------------------------------------------------

    @staticmethod
    def empty(shape: tuple[int, ...], dtype: np.dtype, order: tuple[int, ...] | None = None) -> DeviceBuffer:
        """A fresh buffer dense in `order` (outermost axis first; row-major if None)."""
        data = memory.empty(max(prod(shape), 1), storage(dtype))
        return DeviceBuffer.dense(data, tuple(shape), order)

    @staticmethod
    def dense(data: Any, shape: tuple[int, ...], order: tuple[int, ...] | None = None) -> DeviceBuffer:
        """`data` (1-D, from its start) seen as a tensor dense in `order`."""
        shape = tuple(shape)
        order = tuple(range(len(shape))) if order is None else tuple(order)
        return DeviceBuffer(data, 0, shape, _dense_strides(shape, order, 1))

    # ---- views ----------------------------------------------------------------------

    def transpose(self, perm: tuple[int, ...]) -> DeviceBuffer:
        """Axis i of the view is axis perm[i] of this buffer."""
        return DeviceBuffer(self.data, self.offset, tuple(self.shape[p] for p in perm),
                            tuple(self.strides[p] for p in perm))

    def __getitem__(self, index: tuple[slice, ...]) -> DeviceBuffer:
        """Basic slicing, one slice per leading axis."""
        offset, shape, strides = self.offset, list(self.shape), list(self.strides)
        for axis, s in enumerate(index):
            start, stop, step = s.indices(shape[axis])
            offset += start * strides[axis] if len(range(start, stop, step)) else 0
            shape[axis] = len(range(start, stop, step))
            strides[axis] *= step
        return DeviceBuffer(self.data, offset, tuple(shape), tuple(strides))

    def take(self, axis: int, start: int, stop: int) -> DeviceBuffer:
        return self[(slice(None),) * axis + (slice(start, stop),)]

    def split(self, n: int, axis: int) -> list[DeviceBuffer]:
        """n views cut by the sharding rule: the last ones may be short or empty."""
        return [self.take(axis, *block(self.shape[axis], n, k)) for k in range(n)]

    def expand_dims(self, dims: tuple[int, ...]) -> DeviceBuffer:
        """New axes of extent 1 at positions `dims` of the result."""
        shape, strides = list(self.shape), list(self.strides)
        for d in sorted(dims):
            shape.insert(d, 1)
            strides.insert(d, 0)
        return DeviceBuffer(self.data, self.offset, tuple(shape), tuple(strides))

    def broadcast_to(self, shape: tuple[int, ...]) -> DeviceBuffer:
        """Extent-1 axes (and missing leading ones) read with stride 0."""
        lead = len(shape) - self.ndim
        strides = [0] * lead + [0 if n == 1 and m != 1 else s
                                for n, m, s in zip(self.shape, shape[lead:], self.strides)]
        return DeviceBuffer(self.data, self.offset, tuple(shape), tuple(strides))

    # ---- layout ---------------------------------------------------------------------

    def is_dense(self, order: tuple[int, ...]) -> bool:
        """Whether the elements fill data[offset:offset+size] in `order`
        (axes of extent 1 may have any stride)."""
        want = _dense_strides(self.shape, tuple(order), 1)
        return all(s == w or n == 1 for s, w, n in zip(self.strides, want, self.shape))

    def flat(self) -> Any:
        """The 1-D device array of a dense buffer's elements, in memory order."""
        return self.data[self.offset:self.offset + self.size]

    def span(self) -> tuple[int, int]:
        """The lowest and one past the highest element index the view touches."""
        if self.size == 0:
            return self.offset, self.offset
        low = self.offset + sum((n - 1) * s for n, s in zip(self.shape, self.strides) if s < 0)
        high = self.offset + sum((n - 1) * s for n, s in zip(self.shape, self.strides) if s > 0)
        return low, high + 1


# ---- host <-> device: program inputs and outputs only ------------------------------


def upload(x: np.ndarray) -> DeviceBuffer:
    """A device copy of `x` with the same strides: the memory span its elements
    cover is copied as it lies, gaps included."""
    host, offset, shape, strides = host_span(x)
    return DeviceBuffer(to_device(host), offset, shape, strides)


def host_span(x: np.ndarray) -> tuple[np.ndarray, int, tuple[int, ...], tuple[int, ...]]:
    """What `upload` copies for `x`: a 1-D host array (the span its elements
    cover, as it lies; a dense copy where no element grid expresses its
    strides), and the device buffer's offset, shape and strides over it."""
    x = np.asarray(x)
    if x.size == 0 or x.ndim == 0 or any(s % x.itemsize for s in x.strides):
        dense = np.ascontiguousarray(x)  # nothing to lay out, or strides no element grid can express
        flat = dense.reshape(-1) if dense.size else np.empty(1, x.dtype)
        return flat, 0, x.shape, _dense_strides(x.shape, tuple(range(x.ndim)), 1)
    strides = tuple(s // x.itemsize for s in x.strides)
    if x.flags.c_contiguous and min(strides) >= 0:  # its span is its elements, in order: no copy on the host
        return x.reshape(-1), 0, x.shape, strides
    corner = x[tuple(slice(n - 1, n) if s < 0 else slice(0, 1) for n, s in zip(x.shape, strides))]
    low = sum((n - 1) * s for n, s in zip(x.shape, strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(x.shape, strides) if s > 0)
    memory = np.lib.stride_tricks.as_strided(corner, shape=(high - low + 1,), strides=(x.itemsize,))
    return np.ascontiguousarray(memory), -low, x.shape, strides


def download(b: DeviceBuffer) -> np.ndarray:
    """A host copy with the buffer's own strides."""
    if b.size == 0:  # an empty block keeps its strides (refir.ir.types.empty_in_order)
        strides = tuple(s * b.dtype.itemsize for s in b.strides)
        return np.ndarray(b.shape, b.dtype, np.empty(0, b.dtype), strides=strides)
    low, high = b.span()
    return shaped(to_host(b.data[low:high]).view(b.dtype), b.offset - low, b.shape, b.strides)


def shaped(memory: np.ndarray, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """The host array `download` makes of the span it copied (`memory`, a 1-D
    array of the logical dtype): `offset`, `shape` and `strides` in elements."""
    byte_strides = tuple(s * memory.itemsize for s in strides)
    if offset == 0 and memory.size == prod(shape):  # dense row-major, most often: a reshape, if its strides agree
        reshaped = memory.reshape(shape)
        if reshaped.strides == byte_strides:
            return reshaped
    return np.lib.stride_tricks.as_strided(memory[offset:], shape=shape, strides=byte_strides)
