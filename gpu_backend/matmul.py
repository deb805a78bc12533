"""matmul: [..., M, K] x [..., K, N] -> [..., M, N], batch axes equal.

On a real GPU, float32 and float64 go to cuBLAS through cupy when cupy is
installed (zero-copy views of our buffers, any strides); everything else, and
everything under the simulator, uses the tiled kernel here: square tiles of A
and B staged in shared memory, accumulated in float64 (floats) or int64
(integers, which then wrap when stored), as interp/impls.py defines matmul.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from math import prod
from typing import Any

import numpy as np

from gpu_backend.buffer import DeviceBuffer
from gpu_backend.device import MATMUL_TILE, SHARED_ASKS, SIMULATED, blocks_for, cuda
from gpu_backend.functions import accumulator, narrow
from gpu_backend.kernels import Arr, Ints, padded, unravel
from gpu_backend.launch import launch


@cache
def _tiled(to_acc: Callable, store: Callable, acc_type: type) -> Callable:
    side, tile_shape = MATMUL_TILE, (MATMUL_TILE, MATMUL_TILE)

    @cuda.jit
    def kernel(c: Arr, c_off: int, c_batch: Ints, c_m: int, c_n: int, a: Arr, a_off: int, a_batch: Ints,
               a_m: int, a_k: int, b: Arr, b_off: int, b_batch: Ints, b_k: int, b_n: int, batch: Ints,
               n_batch: int, m: int, n: int, k: int) -> None:
        for _ in range(SHARED_ASKS):
            sa = cuda.shared.array(tile_shape, acc_type)
            sb = cuda.shared.array(tile_shape, acc_type)
            cuda.syncthreads()
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        zero = to_acc(0)
        tiles_m = (m + side - 1) // side
        tiles_n = (n + side - 1) // side
        for t in range(cuda.blockIdx.x, n_batch * tiles_m * tiles_n, cuda.gridDim.x):
            bi = t // (tiles_m * tiles_n)
            row = (t // tiles_n) % tiles_m * side + ty
            col = t % tiles_n * side + tx
            ao = a_off + unravel(bi, batch, a_batch)
            bo = b_off + unravel(bi, batch, b_batch)
            acc = zero
            for k0 in range(0, k, side):
                sa[ty, tx] = to_acc(a[ao + row * a_m + (k0 + tx) * a_k]) if row < m and k0 + tx < k else zero
                sb[ty, tx] = to_acc(b[bo + (k0 + ty) * b_k + col * b_n]) if k0 + ty < k and col < n else zero
                cuda.syncthreads()
                for kk in range(side):
                    acc += sa[ty, kk] * sb[kk, tx]
                cuda.syncthreads()
            if row < m and col < n:
                c[c_off + unravel(bi, batch, c_batch) + row * c_m + col * c_n] = store(acc)

    return kernel


def tiled_matmul(out: DeviceBuffer, a: DeviceBuffer, b: DeviceBuffer) -> DeviceBuffer:
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = padded(a.shape[:-2], 1)
    if out.size == 0:
        return out
    acc_dtype, to_acc = accumulator(a.dtype)
    tiles = prod(batch) * -(-m // MATMUL_TILE) * -(-n // MATMUL_TILE)
    launch(_tiled(to_acc, narrow(a.dtype), acc_dtype.type), blocks_for(tiles, 1), (MATMUL_TILE, MATMUL_TILE),
        out.data, out.offset, padded(out.strides[:-2], 0), out.strides[-2], out.strides[-1],
        a.data, a.offset, padded(a.strides[:-2], 0), a.strides[-2], a.strides[-1],
        b.data, b.offset, padded(b.strides[:-2], 0), b.strides[-2], b.strides[-1],
        batch, prod(batch), m, n, k)
    return out


class _CudaArray:
    """A zero-copy view of a buffer in the CUDA array interface (cupy reads it)."""

    def __init__(self, b: DeviceBuffer) -> None:
        base = b.data.__cuda_array_interface__["data"][0]
        self.__cuda_array_interface__ = {
            "shape": b.shape, "strides": tuple(s * b.dtype.itemsize for s in b.strides),
            "typestr": b.dtype.str, "data": (base + b.offset * b.dtype.itemsize, False), "version": 3,
        }


def _cupy() -> Any:
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def matmul_into(out: DeviceBuffer, a: DeviceBuffer, b: DeviceBuffer, library: bool = True) -> DeviceBuffer:
    """out = a @ b; `library=False` keeps to the numba kernel."""
    cupy = _cupy() if library and not SIMULATED and a.dtype in (np.float32, np.float64) else None
    if cupy is None or out.size == 0:
        return tiled_matmul(out, a, b)
    cupy.matmul(cupy.asarray(_CudaArray(a)), cupy.asarray(_CudaArray(b)), out=cupy.asarray(_CudaArray(out)))
    return out
