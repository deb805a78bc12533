"""matmul: [..., M, K] x [..., K, N] -> [..., M, N], batch axes equal.

On a real GPU, float32 and float64 go to cuBLAS through cupy when cupy is
installed: the very cublasGemmEx call cupy's matmul makes, made directly
(gpu_backend/kernels/gemm.py) where cupy would make just that call, else cupy's matmul
on zero-copy views of our buffers (any strides); everything else, and
everything under the simulator, uses the tiled kernel here: square tiles of A
and B staged in shared memory, accumulated in float64 (floats) or int64
(integers, which then wrap when stored), as interp/impls.py defines matmul.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from math import prod
from typing import Any

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.buffers.memory import Memory
from gpu_backend.device import MATMUL_TILE, SIMULATED, blocks_for, cuda
from gpu_backend.kernels import gemm
from gpu_backend.kernels.functions import accumulator, narrow
from gpu_backend.kernels.strides import Arr, Ints, padded, unravel
from gpu_backend.launches import recording
from gpu_backend.launches.launch import launch


@cache
def _tiled(to_acc: Callable, store: Callable, acc_type: type) -> Callable:
    side, tile_shape = MATMUL_TILE, (MATMUL_TILE, MATMUL_TILE)

    @cuda.jit
    def kernel(c: Arr, c_off: int, c_batch: Ints, c_m: int, c_n: int, a: Arr, a_off: int, a_batch: Ints,
               a_m: int, a_k: int, b: Arr, b_off: int, b_batch: Ints, b_k: int, b_n: int, batch: Ints,
               n_batch: int, m: int, n: int, k: int) -> None:
        sa = cuda.shared.array(tile_shape, acc_type)
        sb = cuda.shared.array(tile_shape, acc_type)
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
    """A zero-copy view of device memory in the CUDA array interface (cupy reads it)."""

    def __init__(self, view: tuple[int, tuple[int, ...], tuple[int, ...], str]) -> None:
        address, shape, strides, typestr = view
        self.__cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": typestr,
                                         "data": (address, False), "version": 3}


# cupy arrays over views seen before, by (address, shape, byte strides, dtype): a
# cupy array made from the array interface costs tens of µs, and pooled blocks
# come back at the same addresses run after run. A view only names an address
# range (cupy does not own it), so an old entry is right for any live buffer at
# that address; the cache is dropped whole when full.
_views: dict[tuple[int, tuple[int, ...], tuple[int, ...], str], Any] = {}
VIEWS_KEPT = 256


def _as_cupy(cupy: Any, b: DeviceBuffer) -> Any:
    data = b.data
    dtype = data.dtype  # float32 or float64: the stored dtype is the logical one
    itemsize = dtype.itemsize
    base = data.ptr if type(data) is Memory else data.__cuda_array_interface__["data"][0]
    key = (base + b.offset * itemsize, b.shape, tuple([s * itemsize for s in b.strides]), dtype.str)
    got = _views.get(key)
    if got is None:
        if len(_views) >= VIEWS_KEPT:
            _views.clear()
        got = _views[key] = cupy.asarray(_CudaArray(key))
    return got


@cache
def _cupy() -> Any:
    try:
        import cupy
    except ImportError:
        return None
    return cupy


@cache
def _core_matmul(cupy: Any) -> Callable:
    """The function cupy.matmul hands its operands to. cupy.matmul is a
    generalized ufunc (cupy/_core/_gufuncs.py) whose Python front works out
    dtypes, core axes and broadcasting, then, with no dtype loops registered,
    calls its own `_func(a, b, out=out)` with the operands untouched when they
    are at least 2-D with equal batch axes and `out` is of the result's shape,
    as matmul's always are here. Calling that function directly makes the same
    cuBLAS call (the same bits: benchmarks/HISTORY.md, `smallrun`) without
    tens of µs of that front. A cupy built otherwise keeps cupy.matmul."""
    front = cupy.matmul
    core = getattr(front, "_func", None)
    plain = (getattr(front, "_supports_batched", False) and getattr(front, "_supports_out", False)
             and not getattr(getattr(front, "_ops_register", None), "_ops", True))
    return core if core is not None and plain else front


def matmul_into(out: DeviceBuffer, a: DeviceBuffer, b: DeviceBuffer, library: bool = True) -> DeviceBuffer:
    """out = a @ b; `library=False` keeps to the numba kernel."""
    cupy = _cupy() if library and not SIMULATED and a.data.dtype.char in "fd" else None
    if cupy is None or out.size == 0:
        return tiled_matmul(out, a, b)
    blas = gemm.cublas_of(cupy)
    call = None if blas is None else gemm.gemm_call(blas, _operand(out), _operand(a), _operand(b), a.data.dtype.char)
    if call is not None:
        blas.gemm_ex(*call)  # type: ignore[union-attr]
        if recording.active is not None:  # replayed as it is, while cupy's compute type stays (replay.py)
            recording.note(blas.gemm_ex, *call)  # type: ignore[union-attr]
            recording.active.gemms.append((call[8], call[17]))
        return out
    recording.taint("cupy's matmul")  # its copies and temporaries are cupy's own memory
    library_matmul(cupy, _as_cupy(cupy, a), _as_cupy(cupy, b), _as_cupy(cupy, out))
    return out


def _operand(b: DeviceBuffer) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(address of element [0, ...], shape, strides in elements), as gemm.gemm_call takes it."""
    data = b.data
    base = data.ptr if type(data) is Memory else data.__cuda_array_interface__["data"][0]
    return base + b.offset * data.dtype.itemsize, b.shape, b.strides


def library_matmul(cupy: Any, a: Any, b: Any, out: Any) -> None:
    """out = a @ b on cupy arrays, through cupy's own matmul function."""
    _core_matmul(cupy)(a, b, out=out)
