"""Results the gpu backend shares instead of copying: ops that only move
elements, where the elements already lie in the result's order, and a
communication within a team of one device. Values are never written after
they are made, so the shared memory must hold exactly the copy's bits, laid
out with exactly the strides a fresh buffer in that order has."""

from __future__ import annotations

import numpy as np
import pytest

import refir
from gpu_backend.buffers.buffer import DeviceBuffer, download, upload
from gpu_backend.impls import compute
from gpu_backend.transports.in_process import DeviceInProcess, LaidOut
from refir.ir import ops
from refir.ir.types import Axis, Mesh, TensorType, dense_strides

X = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5


def shares(a: DeviceBuffer, b: DeviceBuffer) -> bool:
    return a.data is b.data


@pytest.mark.parametrize("op, order, want, shared", [
    (ops.Unsqueeze((0,)), (0, 1, 2), X[None], True),
    (ops.Unsqueeze((2,)), (0, 1, 2), X[:, :, None], True),
    (ops.Permute((1, 0)), (1, 0), X.T, True),  # row-major x is column-major x.T
    (ops.Permute((1, 0)), (0, 1), X.T, False),
    (ops.Copy(), (0, 1), X, True),
    (ops.Copy(), (1, 0), X, False),
])
def test_moves_share_memory_only_where_the_elements_lie_in_order(op, order, want, shared):
    x = upload(X)
    got = compute(op, order, [x])
    assert shares(got, x) == shared
    assert got.strides == dense_strides(got.shape, order, 1)  # extent-1 axes included
    host = download(got)
    assert host.shape == want.shape and np.array_equal(host, want)


def test_a_gapped_block_is_copied():
    x = upload(X[:, :2])  # rows keep the stride of 4: not dense
    got = compute(ops.Copy(), (0, 1), [x])
    assert not shares(got, x) and np.array_equal(download(got), X[:, :2])


def test_a_team_of_one_hands_back_its_own_block_and_lays_out_the_rest():
    mesh = Mesh("m", (1,), (0,))
    src = TensorType("f32", (Axis(3), Axis(4)), mesh, partial=("DIDx",), partial_kind="sum")
    op = ops.Allreduce("sum", ("DIDx",))
    x = upload(X)
    row_major = LaidOut(DeviceInProcess(1)).communicate(op, src, TensorType("f32", (Axis(3), Axis(4)), mesh), {0: x})
    assert row_major[0] is x
    column_major = TensorType("f32", (Axis(3), Axis(4)), mesh, layout=(1, 0))
    moved = LaidOut(DeviceInProcess(1)).communicate(op, src, column_major, {0: x})[0]
    assert not shares(moved, x) and moved.strides == (1, 3) and np.array_equal(download(moved), X)


def test_a_whole_run_on_one_device_agrees_bit_for_bit_with_spmd():
    program = refir.load("""mesh m = [0]
func main(x: f32[M, K@DIDx], w: f32[K@DIDx, N], bias: f32[N]) {
  c: f32[M, N] = matmul(x, w)
  bb: f32[b, N] = unsqueeze(bias, dims=[0])
  y = add(c, bb)
  t: f32[N, M] = permute(y, [1, 0])
  out = relu(t)
  return out, bb
}
""")
    rng = np.random.default_rng(0)
    inputs = {"x": rng.integers(-3, 4, (4, 6)).astype(np.float32), "w": rng.integers(-3, 4, (6, 5)).astype(np.float32),
              "bias": rng.integers(-3, 4, 5).astype(np.float32)}
    for _ in range(2):  # the second run takes the kept step facts
        got, want = refir.run(program, inputs, backend="gpu"), refir.run(program, inputs, backend="spmd")
        for name in ("out", "bb"):
            assert np.array_equal(got.outputs[name].view(np.uint32), want.outputs[name].view(np.uint32))
            assert got.shards[name][0].strides == want.shards[name][0].strides
