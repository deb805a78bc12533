"""A 2-D float matmul as the very cuBLAS call cupy's matmul makes, made directly.

cupy.matmul of two 2-D operands into a C-contiguous result goes through
cupy/_core/_routines_linalg.pyx: `dot` views a as a.T (K x M), then
`_mat_to_cublas_contiguous` picks each operand's transposition and leading
dimension from its layout (F-contiguous: as it is, lda = max(stride, K);
C-contiguous: transposed, lda = its row stride; anything else: a copy first),
and `tensordot_core_v11` calls `cublasGemmEx(handle, transb, transa, N, M, K,
1, b, ldb, a, lda, 0, c, N)` with the compute type of cupy's setting
(CUBLAS_COMPUTE_32F/64F by default) and CUBLAS_GEMM_DEFAULT_TENSOR_OP from
compute capability 8.0 on, through cupy's handle and its own gemmEx wrapper.
cuBLAS picks its kernel from exactly those arguments, so a call with other
ones may give other bits: a copy to a dense operand first changes the
transposition (T instead of N) and with it the kernel, which is why an
earlier direct call differed from cupy's. `gemm_call` works the arguments
out exactly as cupy does, and answers None wherever cupy would do anything
else (a copy, a temporary result, a 1 x 1 result, a batch, a setting it
does not mirror); matmul.py then keeps cupy's matmul. Made this way the call
costs a few µs of host time instead of cupy's 20-70.

`batched_call` makes the strided batched form of the same call
(cublasGemmStridedBatchedEx: each operand's matrices at one batch stride, 0
for an operand broadcast over the batch), for matmuls of operands of
different ranks (gpu_backend/kernels/matmul_ranks.py) whose batch axes
coalesce to one: the same transpositions and leading dimensions per matrix.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np


class Cublas:
    """cupy's cuBLAS entry points and the constants its matmul uses."""

    def __init__(self, cupy: Any) -> None:
        from cupy._core import _routines_linalg as linalg
        from cupy_backends.cuda.api import runtime
        from cupy_backends.cuda.libs import cublas

        self.gemm_ex = cublas.gemmEx  # cupy's wrapper: sets the handle's stream to cupy's current one, as cupy's call
        # the same for a batch at constant strides (0: broadcast); None in a cupy without it (then cupy's matmul)
        self.gemm_batched = getattr(cublas, "gemmStridedBatchedEx", None)
        self.handle = cupy.cuda.device.get_cublas_handle
        self.linalg = linalg
        self.types = {"f": runtime.CUDA_R_32F, "d": runtime.CUDA_R_64F}
        self.chars = {t: c for c, t in self.types.items()}
        self.computes = {("f", "COMPUTE_TYPE_DEFAULT"): cublas.CUBLAS_COMPUTE_32F,
                         ("d", "COMPUTE_TYPE_DEFAULT"): cublas.CUBLAS_COMPUTE_64F}
        capability = int(cupy.cuda.device.get_compute_capability())
        self.usable = capability >= 50 and not runtime.is_hip
        self.algo = cublas.CUBLAS_GEMM_DEFAULT_TENSOR_OP if capability >= 80 else cublas.CUBLAS_GEMM_DEFAULT
        # alpha = 1, beta = 0 in host memory (cuBLAS's default pointer mode), kept alive here
        self.scalars = {c: (np.ones(1, c), np.zeros(1, c)) for c in "fd"}

    def compute_type(self, char: str) -> int | None:
        """cuBLAS's compute type for cupy's current setting (None: one not mirrored here)."""
        setting = self.linalg.compute_type_to_str(self.linalg.get_compute_type(_DTYPES[char]))
        return self.computes.get((char, setting))


_DTYPES = {c: np.dtype(c) for c in "fd"}


@cache
def cublas_of(cupy: Any) -> Cublas | None:
    try:
        found = Cublas(cupy)
    except (ImportError, AttributeError):  # a cupy built otherwise: its matmul as it is
        return None
    return found if found.usable else None


def contiguous(shape: tuple[int, ...], strides: tuple[int, ...], fortran: bool) -> bool:
    """cupy's C (or, with `fortran`, F) contiguity flag, strides in elements:
    axes of extent 1 may have any stride."""
    want = 1
    for n, s in (zip(shape, strides) if fortran else zip(reversed(shape), reversed(strides))):
        if n != 1:
            if s != want:
                return False
            want *= n
    return True


def _operand(shape: tuple[int, int], strides: tuple[int, int], trans: int, k: int) -> tuple[int, int] | None:
    """cupy's _mat_to_cublas_contiguous: (transposition, leading dimension), None where it would copy."""
    if contiguous(shape, strides, fortran=True):
        return trans, max(strides[1], k)
    if contiguous(shape, strides, fortran=False):
        return 1 - trans, strides[0]
    return None


def _span(address: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    low = address + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0) * itemsize
    high = address + (sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) + 1) * itemsize
    return low, high


def gemm_call(blas: Cublas, c: tuple[int, tuple, tuple], a: tuple[int, tuple, tuple], b: tuple[int, tuple, tuple],
              char: str) -> tuple[Any, ...] | None:
    """The arguments of cupy's cublasGemmEx for c = a @ b, each operand as
    (address of element [0, 0], shape, strides in elements), or None where
    cupy's matmul would not make exactly this one call. Worked out once per
    operands (pooled blocks come back at the same addresses run after run);
    cupy's compute type and this thread's handle are read at every call."""
    compute = blas.compute_type(char)
    key = (c, a, b, char, compute)
    got = _calls.get(key, False)
    if got is False:
        if len(_calls) >= CALLS_KEPT:
            _calls.clear()
        got = _calls[key] = _arguments(blas, c, a, b, char, compute)
    return None if got is None else (blas.handle(), *got)


_calls: dict[tuple[Any, ...], tuple[Any, ...] | None] = {}
CALLS_KEPT = 256


def _overlaps(c: tuple[int, tuple, tuple], a: tuple[int, tuple, tuple], b: tuple[int, tuple, tuple],
              size: int) -> bool:
    """Whether c's memory meets a's or b's (cupy's may_share_bounds: it computes into a
    temporary and copies, which a direct call would not)."""
    out = _span(*c, size)
    return any(low < out[1] and out[0] < high for low, high in (_span(*a, size), _span(*b, size)))


def _arguments(blas: Cublas, c: tuple[int, tuple, tuple], a: tuple[int, tuple, tuple],
               b: tuple[int, tuple, tuple], char: str, compute: int | None) -> tuple[Any, ...] | None:
    """gemm_call's arguments after the handle."""
    (ca, cs, cst), (aa, ash, ast), (ba, bsh, bst) = c, a, b
    if len(ash) != 2 or len(bsh) != 2 or len(cs) != 2 or char not in blas.types or compute is None:
        return None
    (m, k), n = ash, bsh[1]
    if m * n * k == 0 or (m == 1 and n == 1) or not contiguous(cs, cst, fortran=False):
        return None  # zeros, a dot product, a temporary result: cupy's own ways
    transa = _operand((k, m), (ast[1], ast[0]), 0, k)  # dot sees a as a.T
    transb = _operand(bsh, bst, 1, k)
    if transa is None or transb is None:
        return None
    if _overlaps(c, a, b, np.dtype(char).itemsize):
        return None
    one, zero = blas.scalars[char]
    dtype = blas.types[char]
    return (transb[0], transa[0], n, m, k, one.ctypes.data, ba, dtype, transb[1],
            aa, dtype, transa[1], zero.ctypes.data, ca, dtype, n, compute, blas.algo)


def batched_call(blas: Cublas, c: tuple[int, tuple, tuple], a: tuple[int, tuple, tuple],
                 b: tuple[int, tuple, tuple], char: str) -> tuple[Any, ...] | None:
    """The arguments of cublasGemmStridedBatchedEx for c[i] = a[i] @ b[i], each operand
    (address of element [0, 0, 0], shape [batch, rows, cols], strides in elements), a
    batch stride 0 where an operand is broadcast; None where a matrix is not as cuBLAS
    takes it (gemm_call's rules per matrix), a batch stride is negative, or c overlaps
    an operand. Kept per operands, as gemm_call's."""
    if getattr(blas, "gemm_batched", None) is None:
        return None
    compute = blas.compute_type(char)
    key = ("batched", c, a, b, char, compute)
    got = _calls.get(key, False)
    if got is False:
        if len(_calls) >= CALLS_KEPT:
            _calls.clear()
        got = _calls[key] = _batched_arguments(blas, c, a, b, char, compute)
    return None if got is None else (blas.handle(), *got)


def _batched_arguments(blas: Cublas, c: tuple[int, tuple, tuple], a: tuple[int, tuple, tuple],
                       b: tuple[int, tuple, tuple], char: str, compute: int | None) -> tuple[Any, ...] | None:
    (ca, cs, cst), (aa, ash, ast), (ba, bsh, bst) = c, a, b
    if len(ash) != 3 or len(bsh) != 3 or len(cs) != 3 or char not in blas.types or compute is None:
        return None
    count, (m, k), n = cs[0], ash[1:], bsh[2]
    if count * m * n * k == 0 or min(cst[0], ast[0], bst[0]) < 0 or cst[0] < m * n:
        return None
    if not contiguous(cs[1:], cst[1:], fortran=False):
        return None
    transa = _operand((k, m), (ast[2], ast[1]), 0, k)
    transb = _operand(bsh[1:], bst[1:], 1, k)
    if transa is None or transb is None:
        return None
    if _overlaps(c, a, b, np.dtype(char).itemsize):
        return None
    one, zero = blas.scalars[char]
    dtype = blas.types[char]
    return (transb[0], transa[0], n, m, k, one.ctypes.data, ba, dtype, transb[1], bst[0],
            aa, dtype, transa[1], ast[0], zero.ctypes.data, ca, dtype, n, cst[0], count, compute, blas.algo)
