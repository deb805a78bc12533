"""matmul of operands of different ranks on the gpu backend: which path each case
takes (gpu_backend/kernels/matmul_ranks.py `route`: one 2-D GEMM over the batch's rows,
one strided batched GEMM, or the tiled kernel), the views each GEMM is given, the
strided batched cuBLAS call's arguments (gemm.batched_call), the calls made where
cupy is there (faked here), and the values of every route under the simulator,
where the GEMM routes run the tiled kernel on the very views the GEMM takes."""

import numpy as np
import pytest
from helpers import fake_blas

from gpu_backend.buffers.buffer import DeviceBuffer, download, upload
from gpu_backend.kernels import gemm, matmul, matmul_ranks
from gpu_backend.kernels.matmul_ranks import matmul_any, promoted, route


def laid_out(view, order):
    from gpu_backend.impls import laid_out_view

    return laid_out_view(view, order)


def routed(a: DeviceBuffer, b: DeviceBuffer) -> tuple:
    xa, xb, batch = promoted(a, b)
    out = DeviceBuffer.empty((*batch, xa.shape[-2], xb.shape[-1]), a.dtype)
    return route(out, xa, xb)


def buf(shape, dtype=np.float32, reverse_first=False):
    x = np.arange(np.prod(shape), dtype=dtype).reshape(shape) % 7 - 3
    if reverse_first:  # a negative stride on the first axis: any layout must work
        x = np.ascontiguousarray(x[::-1])[::-1]
    return x, upload(x)


def layout(b: DeviceBuffer) -> tuple:
    return b.shape, b.strides


def test_a_linear_of_a_3d_input_is_one_gemm_over_its_rows():
    _, a = buf((4, 3, 5))
    _, w = buf((5, 6))
    kind, out2, a2, b2 = routed(a, w)
    assert kind == "rows"
    assert layout(a2) == ((12, 5), (5, 1)) and layout(b2) == ((5, 6), (6, 1)) and layout(out2) == ((12, 6), (6, 1))
    _, v = buf((5,))  # matrix times vector: n = 1
    kind, out2, a2, b2 = routed(a, v)
    assert kind == "rows" and layout(a2) == ((12, 5), (5, 1)) and layout(b2)[0] == (5, 1)
    assert layout(out2) == ((12, 1), (1, 1))
    _, w3 = buf((1, 5, 6))  # a weight with a batch axis of extent 1: still one matrix for all
    assert routed(a, w3)[0] == "rows"
    _, x = buf((5,))
    kind, out2, a2, _ = routed(x, w)  # vector times matrix, no batch: one row
    assert kind == "rows" and a2.shape == (1, 5)


def test_a_broadcast_2d_operand_over_a_batch_is_a_batched_gemm_at_stride_0():
    _, x = buf((5,))
    _, w = buf((4, 5, 6))
    kind, ((o3, a3, b3),) = routed(x, w)  # [K] @ [B, K, N]
    assert kind == "batched"
    assert layout(a3) == ((4, 1, 5), (0, 0, 1)) and layout(b3) == ((4, 5, 6), (30, 6, 1))
    assert layout(o3) == ((4, 1, 6), (6, 6, 1))
    _, m = buf((3, 5))
    kind, ((o3, a3, b3),) = routed(m, w)  # [M, K] @ [B, K, N]
    assert kind == "batched" and layout(a3) == ((4, 3, 5), (0, 5, 1)) and o3.strides == (18, 6, 1)
    kind, ((o3, a3, b3),) = routed(m, buf((2, 3, 5, 6))[1])  # [M, K] @ [B1, B2, K, N]: one batch of 6
    assert kind == "batched" and layout(b3) == ((6, 5, 6), (30, 6, 1)) and a3.strides[0] == 0


def test_batch_axes_at_unrelated_strides_loop_over_the_outer_ones():
    _, a4 = buf((2, 3, 4, 5))
    _, b1 = buf((2, 1, 5, 6))  # broadcast on the inner batch axis only
    kind, calls = routed(a4, b1)
    assert kind == "batched" and len(calls) == 2
    (o3, a3, b3), (p3, c3, d3) = calls
    assert layout(a3) == ((3, 4, 5), (20, 5, 1)) and layout(b3) == ((3, 5, 6), (0, 6, 1))
    assert (c3.offset - a3.offset, d3.offset - b3.offset, p3.offset - o3.offset) == (60, 30, 72)
    _, a1 = buf((1, 3, 4, 5))  # a's leading batch axis broadcast: two calls of 3, a at offsets 0 and 0
    kind, calls = routed(a1, buf((2, 3, 5, 6))[1])
    assert kind == "batched" and [c[1].offset for c in calls] == [0, 0] and calls[0][1].strides[0] == 20
    _, a65 = buf((65, 1, 1, 2))
    assert routed(a65, buf((1, 2, 2, 1))[1]) == ("tiled",)  # 65 calls: more than LOOPED_CALLS


def test_integers_and_halves_keep_the_tiled_kernel():
    _, a = buf((4, 3, 5), np.int8)
    _, w = buf((5, 6), np.int8)
    assert routed(a, w) == ("tiled",)
    _, a = buf((4, 3, 5), np.float16)
    _, w = buf((5, 6), np.float16)
    assert routed(a, w) == ("tiled",)


def test_a_batch_that_is_not_one_run_of_rows_is_batched_instead():
    _, a = buf((4, 3, 5), reverse_first=True)  # the batch axis at a negative stride
    _, w = buf((5, 6))
    kind, ((o3, a3, b3),) = routed(a, w)
    assert kind == "batched" and a3.strides == (-15, 5, 1) and b3.strides[0] == 0


CASES = [((4, 3, 5), (5, 6)), ((4, 3, 5), (5,)), ((5,), (4, 5, 6)), ((3, 5), (4, 5, 6)),
         ((2, 3, 4, 5), (2, 1, 5, 6)), ((1, 3, 4, 5), (2, 3, 5, 6)), ((3, 5), (2, 3, 5, 6)),
         ((5,), (5, 6)), ((4, 1, 5), (1, 5, 6)), ((3, 2, 4), (3, 4, 2)), ((65, 1, 1, 2), (1, 2, 2, 1))]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8])
@pytest.mark.parametrize("sa,sb", CASES)
def test_every_route_gives_numpys_values(sa, sb, dtype, reverse):
    x, a = buf(sa, dtype, reverse)
    y, b = buf(sb, dtype)
    want = (x.astype(np.int64) @ y.astype(np.int64)).astype(dtype)  # integer values: exact in any order
    got = download(matmul_any(tuple(range(want.ndim)), a, b, laid_out))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_batched_arguments_follow_the_2d_calls_per_matrix():
    gemm._calls.clear()
    blas = fake_blas(batched=True)
    count, m, k, n = 3, 4, 6, 5
    c = (1000, (count, m, n), (m * n, n, 1))
    a0 = (2000, (count, m, k), (0, k, 1))  # one a for every matrix: stride 0
    bd = (3000, (count, k, n), (k * n, n, 1))
    call = gemm.batched_call(blas, c, a0, bd, "f")
    # C^T = B^T A^T per matrix: (transb, transa, n, m, k), then b, ldb, strideB, a, lda, strideA
    assert call[1:6] == (0, 0, n, m, k) and call[7:11] == (3000, 0, n, k * n) and call[11:15] == (2000, 0, k, 0)
    assert call[16:] == (1000, 0, n, m * n, count, 68, 99)
    plain = gemm.gemm_call(blas, (1000, (m, n), (n, 1)), (2000, (m, k), (k, 1)), (3000, (k, n), (n, 1)), "f")
    assert (call[1:10], call[11:14]) == (plain[1:10], plain[10:13])  # the 2-D call's arguments per matrix
    column_b = (3000, (count, k, n), (k * n, 1, k))
    by_column = gemm.batched_call(blas, c, a0, column_b, "d")
    assert by_column[1] == 1 and by_column[9] == k and by_column[21] == 70
    assert gemm.batched_call(blas, c, (2000, (count, m, k), (-m * k, k, 1)), bd, "f") is None  # negative batch stride
    assert gemm.batched_call(blas, c, (2000, (count, m, k), (0, 2 * k, 1)), bd, "f") is None  # gapped rows: a copy
    assert gemm.batched_call(blas, (1000, (count, m, n), (n, n, 1)), a0, bd, "f") is None  # results overlap
    assert gemm.batched_call(blas, (3000 + 4 * n, (count, m, n), (m * n, n, 1)), a0, bd, "f") is None  # c overlaps b
    assert gemm.batched_call(blas, c, (2000, (m, k), (k, 1)), bd, "f") is None  # not 3-D
    blas.gemm_batched = None  # a cupy without cublasGemmStridedBatchedEx's wrapper
    assert gemm.batched_call(blas, c, a0, bd, "f") is None


class FakeCupy:
    """Just enough of cupy for matmul.py and matmul_ranks.py to take their cuBLAS paths."""


def test_with_cupy_a_linear_makes_one_gemm_and_a_broadcast_one_batched_call(monkeypatch):
    """The calls the GPU would get (cuBLAS faked: the arguments are recorded, nothing computed)."""
    blas = fake_blas(batched=True)
    made = []
    blas.gemm_ex = lambda *args: made.append(("gemm", args))
    blas.gemm_batched = lambda *args: made.append(("batched", args))
    for module in (matmul, matmul_ranks):  # a GPU with cupy
        monkeypatch.setattr(module, "SIMULATED", False)
        monkeypatch.setattr(module, "_cupy", lambda: FakeCupy)
    monkeypatch.setattr(gemm, "cublas_of", lambda cupy: blas)
    address = lambda b: ((id(b.data) << 20) + b.offset * b.data.dtype.itemsize, b.shape, b.strides)  # noqa: E731
    for module in (matmul, matmul_ranks):  # the simulator's arrays have no device address
        monkeypatch.setattr(module, "_operand", address)
    gemm._calls.clear()
    _, a = buf((4, 3, 5))
    _, w = buf((5, 6))
    matmul_any((0, 1, 2), a, w, laid_out)
    (kind, args), = made
    assert kind == "gemm" and args[1:6] == (0, 0, 6, 12, 5)  # [12, 5] @ [5, 6]: n, m, k
    made.clear()
    _, x = buf((5,))
    _, w3 = buf((4, 5, 6))
    matmul_any((0, 1), x, w3, laid_out)
    (kind, args), = made
    assert kind == "batched" and args[1:6] == (0, 0, 6, 1, 5) and args[14] == 0 and args[20] == 4  # strideA 0, 4
    made.clear()
    _, i = buf((4, 3, 5), np.int8)
    _, j = buf((5, 6), np.int8)
    np.testing.assert_array_equal(download(matmul_any((0, 1, 2), i, j, laid_out)),
                                  (np.arange(60).reshape(4, 3, 5) % 7 - 3).astype(np.int64).__matmul__(
                                      np.arange(30).reshape(5, 6) % 7 - 3).astype(np.int8))
    assert made == []  # integers: the tiled kernel, no cuBLAS
