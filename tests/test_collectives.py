"""Each communication, reached from the text: which one lowering picks, which block
every device ends up holding (hand-computed numpy slices), and its strides.

spmd runs with every rank in this process; tests/test_mpi.py runs the same
programs one rank per MPI process.
"""

import numpy as np
import pytest

import refir
from interp.collectives import exchange
from refir.ir import ops
from refir.ir.ops import op_name
from refir.ir.types import Axis, Mesh, TensorType
from refir.lowering.teams import Team, teams


def run(text, **inputs):
    """spmd, checked against the global reference bit for bit."""
    got = refir.run(text, inputs, backend="spmd")
    ref = refir.run(text, inputs, backend="global")
    for name, value in ref.outputs.items():
        assert got.outputs[name].tobytes() == value.tobytes(), name
    return got


def steps(result):
    return [op_name(s.op) for s in result.lowered.steps]


def holds(result, name, blocks, strides):
    """Device d holds exactly blocks[d], with these byte strides; no other device holds any."""
    assert set(result.shards[name]) == set(blocks)
    for d, want in blocks.items():
        got = result.shards[name][d]
        assert got.dtype == want.dtype and got.shape == want.shape, (d, got.shape, want.shape)
        assert np.array_equal(got, want), d
        assert got.strides == strides, (d, got.strides)


X43 = np.arange(12, dtype=np.float32).reshape(4, 3) + 0.5


# ---- allgather ---------------------------------------------------------------------------


@pytest.mark.parametrize("mesh", [[3], [1, 0], [2, 0, 3, 1]], ids=str)
def test_allgather(mesh):
    n = len(mesh)
    x = np.arange(2 * n * 3, dtype=np.float32).reshape(2 * n, 3)
    r = run(f"mesh m = {mesh}\nfunc main(x: f32[R@DIDx, 3]) {{\n  y: f32[R, 3] layout[1, 0] = set(x)\n"
            "  return y\n}\n", x=x)
    assert steps(r) == ["allgather"]
    assert r.lowered.steps[0].op == ops.Allgather(axis=0, mesh_axis="DIDx")
    # column-major: element (i, j) at 4 * (i + 2n * j) bytes
    holds(r, "y", {d: x for d in mesh}, (4, 4 * 2 * n))


def test_inputs_are_handed_out_in_mesh_order():
    x = np.arange(8, dtype=np.int32).reshape(4, 2)
    r = run("mesh m = [2, 0, 3, 1]\nfunc main(x: i32[4@DIDx, 2]) {\n  y = set(x)\n  return y\n}\n", x=x)
    assert steps(r) == ["copy"]  # an untyped set keeps the sharding
    holds(r, "y", {2: x[0:1], 0: x[1:2], 3: x[2:3], 1: x[3:4]}, (8, 4))
    assert r.shards["y"][3].tolist() == [[4, 5]]


# ---- gather ------------------------------------------------------------------------------


@pytest.mark.parametrize("src, dst", [([0, 1], [0]), ([0, 1], [1]), ([1, 2], [0, 2]), ([3, 1, 0], [2])], ids=str)
def test_gather(src, dst):
    x = np.arange(len(src) * 4, dtype=np.float32).reshape(len(src), 4)
    r = run(f"mesh a = {src}\nmesh b = {dst}\nfunc main(x: f32[N@DIDx, 4] on a) {{\n"
            "  y: f32[N, 4] on b = set(x)\n  return y\n}\n", x=x)
    assert steps(r) == ["gather"]
    src_t, dst_t = (r.lowered.types[n] for n in ("x", "y"))
    (team,) = teams(r.lowered.steps[0].op, src_t, dst_t)
    assert team.senders == tuple(src) and team.receivers == tuple(dst)
    holds(r, "y", {d: x for d in dst}, (16, 4))


# ---- scatter -----------------------------------------------------------------------------


@pytest.mark.parametrize("src, dst, root", [
    ([0], [0, 1], 0), ([1], [0, 1], 1), ([0, 2], [1, 2], 2), ([1], [3, 0, 2, 1], 1), ([3, 0], [1, 2], 3),
], ids=str)
def test_scatter(src, dst, root):
    n = len(dst)
    x = np.arange(n * 2 * 3, dtype=np.float32).reshape(2 * n, 3)
    r = run(f"mesh a = {src}\nmesh b = {dst}\nfunc main(x: f32[R, 3] on a) {{\n"
            "  y: f32[R@DIDx, 3] on b = set(x)\n  return y\n}\n", x=x)
    assert steps(r) == ["scatter"]
    assert r.lowered.steps[0].op == ops.Scatter(axis=0, root=root)
    holds(r, "y", {d: x[2 * k:2 * k + 2] for k, d in enumerate(dst)}, (12, 4))


def test_scatter_on_an_inner_axis_into_a_column_major_layout():
    x = np.arange(24, dtype=np.int16).reshape(4, 6)
    r = run("mesh a = [2]\nmesh b = [0, 1, 2]\nfunc main(x: i16[4, 6] on a) {\n"
            "  y: i16[4, 6@DIDx] on b layout[1, 0] = set(x)\n  return y\n}\n", x=x)
    assert steps(r) == ["scatter"]
    assert r.lowered.steps[0].op == ops.Scatter(axis=1, root=2)
    # local [4, 2], column-major: strides (2, 8) bytes
    holds(r, "y", {0: x[:, 0:2], 1: x[:, 2:4], 2: x[:, 4:6]}, (2, 8))


# ---- local slice (replicated -> sharded where every receiver holds the data) ------------


def test_slice_on_the_same_mesh():
    x = np.arange(24, dtype=np.float64).reshape(4, 6)
    r = run("mesh m = [1, 0]\nfunc main(x: f64[4, 6]) {\n  y: f64[4@DIDx, 6] = set(x)\n  return y\n}\n", x=x)
    assert steps(r) == ["keep_block"]
    holds(r, "y", {1: x[0:2], 0: x[2:4]}, (48, 8))


def test_slice_into_a_mesh_inside_the_source_mesh():
    x = np.arange(24, dtype=np.float64).reshape(4, 6)
    r = run("mesh a = [0, 1, 2, 3]\nmesh b = [2, 1]\nfunc main(x: f64[4, 6] on a) {\n"
            "  y: f64[4, 6@DIDx] on b = set(x)\n  return y\n}\n", x=x)
    assert steps(r) == ["keep_block"]
    holds(r, "y", {2: x[:, 0:3], 1: x[:, 3:6]}, (24, 8))


def test_elementwise_with_a_replicated_operand_slices_it_locally():
    x = np.arange(8, dtype=np.int32).reshape(4, 2)
    y = np.array([[100, 200], [300, 400], [500, 600], [700, 800]], np.int32)
    r = run("mesh m = [1, 0]\nfunc main(x: i32[4@DIDx, 2], y: i32[4, 2]) {\n  z = add(x, y)\n  return z\n}\n",
            x=x, y=y)
    assert steps(r) == ["keep_block", "add"]
    holds(r, "z", {1: np.array([[100, 201], [302, 403]], np.int32), 0: np.array([[504, 605], [706, 807]], np.int32)},
          (8, 4))


# ---- broadcast ---------------------------------------------------------------------------


@pytest.mark.parametrize("src, dst", [([2], [0, 1, 3]), ([0], [1]), ([1, 0], [3, 2])], ids=str)
def test_broadcast(src, dst):
    r = run(f"mesh a = {src}\nmesh b = {dst}\nfunc main(x: f32[4, 3] on a) {{\n"
            "  y: f32[4, 3] on b layout[1, 0] = set(x)\n  return y\n}\n", x=X43)
    assert steps(r) == ["broadcast"]
    assert r.lowered.steps[0].op == ops.Broadcast(root=src[0])
    holds(r, "y", {d: X43 for d in dst}, (4, 16))


# ---- send_recv ---------------------------------------------------------------------------


@pytest.mark.parametrize("src, dst", [([0], [1]), ([1], [0]), ([1, 2], [0, 1]), ([1, 2], [1, 0]),
                                      ([0, 1, 2, 3], [3, 2, 1, 0])], ids=str)
def test_send_recv(src, dst):
    n = len(src)
    x = np.arange(n * 4, dtype=np.int64).reshape(n, 4)
    r = run(f"mesh a = {src}\nmesh b = {dst}\nfunc main(x: i64[N@DIDx, 4] on a) {{\n"
            "  y: i64[N@DIDx, 4] on b = set(x)\n  return y\n}\n", x=x)
    assert steps(r) == ["send_recv"]
    pairs = teams(r.lowered.steps[0].op, r.lowered.types["x"], r.lowered.types["y"])
    assert [(t.senders, t.receivers) for t in pairs] == [((s,), (d,)) for s, d in zip(src, dst)]
    holds(r, "y", {d: x[k:k + 1] for k, d in enumerate(dst)}, (32, 8))


# ---- all_to_all --------------------------------------------------------------------------


def test_all_to_all_dispatch_and_combine():
    mesh = [2, 0, 3, 1]
    x = (np.arange(48, dtype=np.float16).reshape(4, 12) - 20) / 4
    r = run(f"mesh m = {mesh}\nfunc main(x: f16[4@DIDx, 12]) {{\n  y: f16[4, 12@DIDx] = set(x)\n"
            "  z: f16[4@DIDx, 12] = set(y)\n  return y, z\n}\n", x=x)
    assert steps(r) == ["all_to_all", "all_to_all"]
    assert r.lowered.steps[0].op == ops.AllToAll(mesh_axis="DIDx", split_axis=1, concat_axis=0)
    assert r.lowered.steps[1].op == ops.AllToAll(mesh_axis="DIDx", split_axis=0, concat_axis=1)
    holds(r, "y", {d: x[:, 3 * k:3 * k + 3] for k, d in enumerate(mesh)}, (6, 2))
    holds(r, "z", {d: x[k:k + 1] for k, d in enumerate(mesh)}, (24, 2))


# ---- allreduce, reduce, reduce_scatter ---------------------------------------------------


@pytest.mark.parametrize("kind, fold", [("sum", np.sum), ("max", np.max), ("min", np.min), ("prod", np.prod)])
def test_allreduce(kind, fold):
    mesh = [3, 1, 0, 2]
    x = np.array([[1, -2, 3], [4, 5, -6], [-7, 8, 2], [1, 1, 9]], np.int32)
    r = run(f"mesh m = {mesh}\nfunc main(x: i32[4@DIDx, 3]) {{\n  y = {kind}(x, dims=[0])\n  return y\n}}\n", x=x)
    assert steps(r) == [kind, "allreduce"]
    assert r.lowered.steps[1].op == ops.Allreduce(kind, ("DIDx",))
    holds(r, "y", {d: fold(x, axis=0).astype(np.int32) for d in mesh}, (4,))


def test_allreduce_folds_float_partials_left_to_right_in_the_result_dtype():
    x = np.array([[1e8], [1.0], [-1e8], [1.0]], np.float32)
    text = "mesh m = [1, 3, 0, 2]\nfunc main(x: f32[4@DIDx, 1]) {\n  y = sum(x, dims=[0])\n  return y\n}\n"
    # team order is mesh order: ((1e8 + 1) + -1e8) + 1 in float32 is 1
    assert refir.run(text, {"x": x}, backend="spmd").outputs["y"].tolist() == [1.0]
    # the global reference sums in float64 and rounds once
    assert refir.run(text, {"x": x}, backend="global").outputs["y"].tolist() == [2.0]


@pytest.mark.parametrize("src, dst", [([1, 0], [3]), ([0], [1, 2]), ([2, 3, 0, 1], [0, 1])], ids=str)
def test_reduce(src, dst):
    n = len(src)
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3) - 2
    r = run(f"mesh a = {src}\nmesh b = {dst}\nfunc main(x: f32[N@DIDx, 3] on a) {{\n"
            "  y: f32[3] on b = sum(x, dims=[0])\n  return y\n}\n", x=x)
    assert steps(r) == ["sum", "reduce"]
    holds(r, "y", {d: x.sum(0) for d in dst}, (4,))


def test_reduce_scatter_on_the_kept_axis():
    # S17: X [d, d, 4] sharded on axis 0, sum(0) sharded on the old axis 1
    mesh = [1, 0, 2]
    x = np.arange(36, dtype=np.int32).reshape(3, 3, 4)
    r = run(f"mesh m = {mesh}\nfunc main(x: i32[3@DIDx, 3, 4]) {{\n  y: i32[3@DIDx, 4] = sum(x, dims=[0])\n"
            "  return y\n}\n", x=x)
    assert steps(r) == ["sum", "reduce_scatter"]
    assert r.lowered.steps[1].op == ops.ReduceScatter("sum", "DIDx", 0)
    s = x.sum(0, dtype=np.int32)
    holds(r, "y", {1: s[0:1], 0: s[1:2], 2: s[2:3]}, (16, 4))


def test_reduce_scatter_noncontiguous_column_major_result():
    # S20: X [5, 3d, 7d] sharded on axis 1, sum(1) sharded on the last axis, column-major
    d = 2
    x = np.arange(5 * 3 * d * 7 * d, dtype=np.int64).reshape(5, 3 * d, 7 * d) % 3
    r = run("mesh m = [0, 1]\nfunc main(x: i64[5, 6@DIDx, 14]) {\n"
            "  y: i64[5, 14@DIDx] layout[1, 0] = sum(x, dims=[1])\n  return y\n}\n", x=x)
    assert steps(r) == ["sum", "reduce_scatter"]
    s = x.sum(1)
    # local [5, 7], column-major: strides (8, 40) bytes
    holds(r, "y", {0: s[:, 0:7], 1: s[:, 7:14]}, (8, 40))


def test_reduce_scatter_from_a_sharded_contraction():
    a = np.arange(8, dtype=np.int32).reshape(2, 4)
    w = np.arange(12, dtype=np.int32).reshape(4, 3) - 5
    r = run("mesh m = [1, 0]\nfunc main(a: i32[2, 4@DIDx], w: i32[4@DIDx, 3]) {\n"
            "  z: i32[2@DIDx, 3] = matmul(a, w)\n  return z\n}\n", a=a, w=w)
    assert steps(r) == ["matmul", "reduce_scatter"]
    z = (a @ w).astype(np.int32)
    assert z.tolist() == [[12, 18, 24], [4, 26, 48]]
    holds(r, "z", {1: z[0:1], 0: z[1:2]}, (12, 4))


# ---- 2-D meshes --------------------------------------------------------------------------

MESHES_2D = [[[0, 1], [2, 3]], [[3, 1], [0, 2]]]


@pytest.mark.parametrize("grid", MESHES_2D, ids=str)
def test_2d_allgather_along_didx_only(grid):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    r = run(f"mesh g = {grid}\nfunc main(x: f32[4@DIDy, 6@DIDx]) {{\n  y: f32[4@DIDy, 6] = set(x)\n"
            "  return y\n}\n", x=x)
    assert steps(r) == ["allgather"]
    assert r.lowered.steps[0].op == ops.Allgather(axis=1, mesh_axis="DIDx")
    # device at (row, col) of the grid holds rows 2*row .. 2*row+2
    holds(r, "y", {d: x[2 * row:2 * row + 2] for row, ds in enumerate(grid) for d in ds}, (24, 4))


@pytest.mark.parametrize("grid", MESHES_2D, ids=str)
def test_2d_allreduce_within_didx_teams(grid):
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    r = run(f"mesh g = {grid}\nfunc main(x: i32[4@DIDy, 6@DIDx]) {{\n  s = sum(x, dims=[1])\n  return s\n}}\n", x=x)
    assert steps(r) == ["sum", "allreduce"]
    assert r.lowered.steps[1].op == ops.Allreduce("sum", ("DIDx",))
    s = np.array([15, 51, 87, 123], np.int32)
    holds(r, "s", {d: s[2 * row:2 * row + 2] for row, ds in enumerate(grid) for d in ds}, (4,))


@pytest.mark.parametrize("grid", MESHES_2D, ids=str)
def test_2d_reduce_scatter_and_full_allreduce(grid):
    x = np.arange(4 * 4 * 6, dtype=np.int32).reshape(4, 4, 6)
    r = run(f"mesh g = {grid}\nfunc main(x: i32[4@DIDy, 4@DIDx, 6]) {{\n"
            "  rs: i32[4@DIDy, 6@DIDx] = sum(x, dims=[1])\n  t: i32[6] = sum(x, dims=[0, 1])\n  return rs, t\n}\n",
            x=x)
    assert steps(r) == ["sum", "reduce_scatter", "sum", "allreduce"]
    assert r.lowered.steps[1].op == ops.ReduceScatter("sum", "DIDx", 1)
    assert r.lowered.steps[3].op == ops.Allreduce("sum", ("DIDy", "DIDx"))  # a partial's mesh order
    s = x.sum(1, dtype=np.int32)
    blocks = {d: s[2 * row:2 * row + 2, 3 * col:3 * col + 3] for row, ds in enumerate(grid) for col, d in enumerate(ds)}
    holds(r, "rs", blocks, (12, 4))
    holds(r, "t", {d: x.sum((0, 1), dtype=np.int32) for d in (0, 1, 2, 3)}, (4,))


def test_2d_transposed_sharding_goes_through_allgathers_and_a_slice():
    grid = [[3, 1], [0, 2]]
    x = np.arange(16, dtype=np.int32).reshape(4, 4)
    r = run(f"mesh g = {grid}\nfunc main(x: i32[4@DIDy, 4@DIDx]) {{\n  y: i32[4@DIDx, 4@DIDy] = set(x)\n"
            "  return y\n}\n", x=x)
    assert steps(r) == ["allgather", "allgather", "keep_block"]
    blocks = {d: x[2 * col:2 * col + 2, 2 * row:2 * row + 2] for row, ds in enumerate(grid) for col, d in enumerate(ds)}
    holds(r, "y", blocks, (8, 4))


def test_2d_mesh_to_another_2d_mesh_and_to_a_1d_mesh():
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    r = run("mesh g = [[0, 1], [2, 3]]\nmesh h = [[3, 2], [1, 0]]\nmesh l = [1, 2]\n"
            "func main(x: i32[4@DIDy, 6@DIDx] on g) {\n  a: i32[4@DIDy, 6@DIDx] on h = set(x)\n"
            "  c: i32[4, 6@DIDx] on l = set(x)\n  e: i32[6] on l = sum(x, dims=[0])\n  return a, c, e\n}\n", x=x)
    assert steps(r) == ["allgather", "allgather", "keep_block", "allgather", "allgather", "keep_block",
                        "sum", "allreduce", "allgather", "broadcast"]
    holds(r, "a", {3: x[0:2, 0:3], 2: x[0:2, 3:6], 1: x[2:4, 0:3], 0: x[2:4, 3:6]}, (12, 4))
    holds(r, "c", {1: x[:, 0:3], 2: x[:, 3:6]}, (12, 4))
    holds(r, "e", {1: x.sum(0, dtype=np.int32), 2: x.sum(0, dtype=np.int32)}, (4,))


# ---- the exchange rules on their own (one team, hand-written buffers) ---------------------

M2 = Mesh("m", (2,), (0, 1))


def test_exchange_reduce_scatter_two_processes():
    # StableHLO's interpret/reduce_scatter.mlir
    src = TensorType("i64", (Axis(2), Axis(4)), M2)
    dst = TensorType("i64", (Axis(4, "DIDx"), Axis(4)), M2)
    x = {0: np.array([[1, 2, 3, 4], [5, 6, 7, 8]]), 1: np.array([[9, 10, 11, 12], [13, 14, 15, 16]])}
    team = Team((0, 1), (0, 1), (0, 1))
    got = exchange(ops.ReduceScatter("sum", "DIDx", 1), team, x, src, dst)
    assert got[0].tolist() == [[10, 12], [18, 20]]
    assert got[1].tolist() == [[14, 16], [22, 24]]


def test_exchange_scatter_reads_a_strided_buffer_logically():
    src = TensorType("f32", (Axis(4), Axis(3)), Mesh("a", (1,), (0,)))
    dst = TensorType("f32", (Axis(4, "DIDx"), Axis(3)), Mesh("b", (2,), (1, 0)))
    buf = np.asfortranarray(X43)  # strides (4, 16): rows are not contiguous
    got = exchange(ops.Scatter(0, 0), Team((0, 1), (0,), (1, 0)), {0: buf}, src, dst)
    assert got[1].tolist() == [[0.5, 1.5, 2.5], [3.5, 4.5, 5.5]]
    assert got[0].tolist() == [[6.5, 7.5, 8.5], [9.5, 10.5, 11.5]]


def test_teams_of_is_remembered_by_identity_and_follows_a_replaced_teams():
    from unittest import mock

    mesh = Mesh("m", (2, 2), (3, 1, 0, 2))
    src = TensorType("f32", (Axis(4, "DIDy"), Axis(4, "DIDx")), mesh)
    dst = TensorType("f32", (Axis(4, "DIDy"), Axis(4)), mesh)
    op = ops.Allgather(1, "DIDx")
    first = refir.lowering.teams.teams_of(0, op, src, dst)
    assert [t.devices for t in first] == [(0, 2)]
    assert refir.lowering.teams.teams_of(0, op, src, dst) is first  # the same objects: found again, not formed again
    equal = TensorType("f32", (Axis(4, "DIDy"), Axis(4, "DIDx")), Mesh("m", (2, 2), (3, 1, 0, 2)))
    # an equal type, another object: formed again, the same teams
    again = refir.lowering.teams.teams_of(0, op, equal, dst)
    assert again is not first and again == first
    swapped = [Team((2, 0), (2, 0), (2, 0))]
    with mock.patch.object(refir.lowering.teams, "teams", lambda *args: swapped):
        assert refir.lowering.teams.teams_of(0, op, src, dst) == tuple(swapped)
    assert refir.lowering.teams.teams_of(0, op, src, dst) is first
