"""Device memory as a raw pointer: what a DeviceBuffer holds on a GPU with the pool.

A numba `DeviceNDArray` costs tens of µs of Python to make (shape checks, a
dummy array, a context lookup, pointer objects), and the gpu backend made one
for every result, slice and view. `Memory` is a 1-D array of device memory
seen as an integer pointer, a length and a dtype, with the few operations the
backend uses (slices, dtype views, the CUDA array interface, one driver call
per copy to or from the host); `empty` takes its block from the pool
(gpu_backend/buffers/pool.py) directly, and every view of one block holds one `Lease`,
which gives the block back when the last view is gone, as numba's pointer
counting does. Kernel launches pack it without asking numba
(gpu_backend/launches/launch.py); cupy, nccl4py and torch read its array interface.

Without the pool (the simulator, or REFIR_GPU_POOL=0) `empty` returns numba's
own device array, so everything that reads `.data` takes either.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

import numpy as np

from gpu_backend.buffers import pool

_pool: Any = None  # the current context's pool, found on first use (after the device is chosen)


class Lease:
    """One block taken from the pool, given back when the last Memory on it goes."""

    __slots__ = ("pool", "block", "size")

    def __init__(self, pool: Any, block: Any, size: int) -> None:
        self.pool, self.block, self.size = pool, block, size

    def __del__(self) -> None:
        try:
            self.pool.give(self.block, self.size)
        except Exception:  # at interpreter exit the pool may be gone already
            pass


class Memory:
    """`size` elements of `dtype` at device address `ptr`, kept alive by `lease`."""

    __slots__ = ("ptr", "size", "dtype", "lease")
    ndim = 1  # numba sees a foreign array (its CUDA array interface), not one of its own

    def __init__(self, ptr: int, size: int, dtype: np.dtype, lease: Any) -> None:
        self.ptr, self.size, self.dtype, self.lease = ptr, size, dtype, lease

    @property
    def shape(self) -> tuple[int]:
        return (self.size,)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def is_c_contiguous(self) -> bool:
        return True

    def __getitem__(self, s: slice) -> Memory:
        start, stop, step = s.indices(self.size)
        if step != 1:
            raise ValueError("Memory takes contiguous slices only")
        n = max(0, stop - start)
        return Memory(self.ptr + start * self.dtype.itemsize, n, self.dtype, self.lease)

    def view(self, dtype: Any) -> Memory:
        """The same bytes as elements of `dtype` (whole elements only)."""
        dtype = np.dtype(dtype)
        nbytes = self.nbytes
        if nbytes % dtype.itemsize:
            raise ValueError(f"{nbytes} bytes are no whole number of {dtype} elements")
        return Memory(self.ptr, nbytes // dtype.itemsize, dtype, self.lease)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": (self.size,), "strides": None, "typestr": self.dtype.str,
                "data": (self.ptr, False), "version": 3}

    def upload(self, host: np.ndarray) -> None:
        """Copy the C-contiguous `host` (of at most this many bytes) here: one driver call."""
        copies = _host_copies()
        if copies is None:
            from numba.cuda.cudadrv.driver import driver, host_pointer

            driver.cuMemcpyHtoD(self.ptr, host_pointer(host, readonly=True), host.nbytes)
            return
        _checked("cuMemcpyHtoD", copies[0](self.ptr, copies[2](host, readonly=True), host.nbytes))

    def download(self, host: np.ndarray) -> None:
        """Copy this memory into the C-contiguous, writable `host` (as many bytes as it holds)."""
        copies = _host_copies()
        if copies is None:
            from numba.cuda.cudadrv.driver import driver, host_pointer

            driver.cuMemcpyDtoH(host_pointer(host), self.ptr, host.nbytes)
            return
        _checked("cuMemcpyDtoH", copies[1](copies[2](host), self.ptr, host.nbytes))

    def packed(self) -> tuple[int, ...]:
        """The kernel arguments numba passes for a 1-D C-contiguous array:
        meminfo, parent, size, itemsize, data, shape, strides (bytes)."""
        itemsize = self.dtype.itemsize
        return (0, 0, self.size, itemsize, self.ptr, self.size, itemsize)


@cache
def _host_copies() -> tuple[Any, Any, Any] | None:
    """The driver's synchronous host copies (cuMemcpyHtoD_v2, cuMemcpyDtoH_v2: the
    functions numba's wrappers reach, on the same legacy default stream), called
    through ctypes: numba's wrapper and cuda-bindings' argument conversion cost
    µs a copy, and a run makes one per input and result. None without the
    driver library (numba's own call then). The third: numba's host_pointer (a
    host array's address, writable unless `readonly`)."""
    try:
        from numba.cuda.cudadrv.driver import host_pointer

        lib = ctypes.CDLL("libcuda.so.1")
        up, down = lib.cuMemcpyHtoD_v2, lib.cuMemcpyDtoH_v2
    except (OSError, AttributeError, ImportError):
        return None
    up.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    down.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
    up.restype = down.restype = ctypes.c_int
    return up, down, host_pointer


def _checked(what: str, rc: int) -> None:
    if rc:
        from gpu_backend.launches.driver_launch import LaunchError, error_name

        raise LaunchError(f"{what}: {error_name(rc)} ({rc})")


def set_pool(given: Any) -> None:
    """Use `given` for `empty` (None: find the current context's again on next use)."""
    global _pool
    _pool = given


def empty(size: int, dtype: np.dtype) -> Any:
    """`size` elements (at least one) of fresh device memory: a Memory from the
    pool where there is one, else numba's device array."""
    global _pool
    if _pool is None:
        _pool = pool.current() or False
    if _pool is False:
        from gpu_backend.device import cuda

        return cuda.device_array(size, dtype)
    nbytes = max(size, 1) * dtype.itemsize
    block, klass = _pool.take(nbytes)
    return Memory(block.device_pointer_value, size, dtype, Lease(_pool, block, klass))


pool.on_reset.append(lambda: set_pool(None))  # the pool's context is gone: find the next one's
