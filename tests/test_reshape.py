"""reshape (docs/spec.md §5.10) on every backend: global, spmd, gpu (under the
simulator) and one MPI job; inferred sharding, each device's block and strides,
strided and permuted operands, declared layouts, the builder and the printer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import run_mpi

import refir
from gpu_backend.buffers.buffer import download, upload
from gpu_backend.impls import compute as gpu_compute
from gpu_backend.kernels.reshape import reshape_buffer, view_strides
from interp.impls import IMPLS
from refir.frontends.builder import Builder
from refir.ir import ops
from refir.lowering.lower import lower

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("global", "spmd", "gpu")

HEADS = """mesh m = [0, 1, 2, 3]
func main(x: f32[S, 32@DIDx]) {
  y = reshape(x, [S, 4, 8])
  return y
}
"""


def run_all(text: str, inputs: dict[str, np.ndarray], world: int = 4) -> dict[str, refir.RunResult]:
    return {b: refir.run(text, inputs, backend=b, world=world, keep="all" if b != "global" else None)
            for b in BACKENDS}


def test_a_head_split_is_local_and_each_device_holds_its_own_head():
    x = np.arange(3 * 32, dtype=np.float32).reshape(3, 32)
    checked = refir.verify(refir.parse(HEADS))
    assert str(checked.types["y"]) == "f32[S, 4@DIDx, 8] on m"
    assert [ops.op_name(s.op) for s in lower(checked).steps] == ["reshape"]  # no communication
    for b, r in run_all(HEADS, {"x": x}).items():
        assert np.array_equal(r.outputs["y"], x.reshape(3, 4, 8)), b
        for d in range(4) if b != "global" else ():
            block = r.shards["y"][d]
            assert np.array_equal(block, x.reshape(3, 4, 8)[:, d:d + 1]), (b, d)
            assert block.shape == (3, 1, 8) and block.strides == (32, 32, 4), (b, d)


def test_a_merge_of_a_sharded_outer_axis_is_local():
    text = """mesh m = [0, 1, 2, 3]
func main(x: i32[4@DIDx, 2, 3]) {
  y = reshape(x, [24])
  return y
}
"""
    x = np.arange(24, dtype=np.int32).reshape(4, 2, 3)
    assert str(refir.verify(refir.parse(text)).types["y"]) == "i32[24@DIDx] on m"
    for b, r in run_all(text, {"x": x}).items():
        assert r.outputs["y"].tolist() == list(range(24)), b
        if b != "global":
            assert [r.shards["y"][d].tolist() for d in range(4)] == [list(range(6 * d, 6 * d + 6)) for d in range(4)]


def test_uneven_blocks_that_split_exactly_leave_an_empty_block_empty():
    text = """mesh m = [0, 1, 2, 3]
func main(h: f32[9@DIDx]) {
  y = reshape(h, [3, 3])
  return y
}
"""
    h = np.arange(9, dtype=np.float32)
    for b, r in run_all(text, {"h": h}).items():
        assert np.array_equal(r.outputs["y"], h.reshape(3, 3)), b
        if b != "global":
            assert [r.shards["y"][d].shape for d in range(4)] == [(1, 3), (1, 3), (1, 3), (0, 3)], b
            assert r.shards["y"][3].strides == (12, 4), b  # refir's strides of an empty block


@pytest.mark.parametrize("view", ["fortran", "negative", "gapped"])
def test_strided_inputs_are_read_in_logical_c_order(view):
    base = np.arange(6 * 16, dtype=np.float32).reshape(6, 16) * 0.5
    x = {"fortran": np.asfortranarray(base), "negative": base[::-1, ::-1],
         "gapped": np.arange(6 * 32, dtype=np.float32).reshape(6, 32)[:, ::2]}[view]
    text = HEADS.replace("32@DIDx", "16@DIDx").replace("[S, 4, 8]", "[S, 4, 4]")
    for b, r in run_all(text, {"x": x}).items():
        assert np.array_equal(r.outputs["y"], x.reshape(6, 4, 4)), (b, view)
        if b != "global":
            assert all(r.shards["y"][d].strides == (16, 16, 4) for d in range(4)), b


def test_a_declared_layout_is_written_and_a_permuted_operand_is_copied():
    text = """mesh m = [0, 1]
func main(y: f32[4@DIDx, 6]) {
  yt: f32[6, 4@DIDx] layout[1, 0] = permute(y, [1, 0])
  r: f32[3, 2, 4@DIDx] = reshape(yt, [3, 2, 4])
  c: f32[2@DIDx, 2, 6] layout[1, 2, 0] = reshape(y, [2, 2, 6])
  return r, c
}
"""
    y = np.arange(24, dtype=np.float32).reshape(4, 6)
    for b, res in run_all(text, {"y": y}, world=2).items():
        assert np.array_equal(res.outputs["r"], y.T.reshape(3, 2, 4)), b
        assert np.array_equal(res.outputs["c"], y.reshape(2, 2, 6)), b
        if b != "global":
            assert res.shards["r"][1].shape == (3, 2, 2) and res.shards["r"][1].strides == (16, 8, 4), b
            # layout[1, 2, 0] of a [1, 2, 6] block: axis 1 outermost, then 2, then 0
            assert res.shards["c"][0].strides == (4, 24, 4), b
            assert np.array_equal(res.shards["c"][1], y.reshape(2, 2, 6)[1:]), b


def test_the_gpu_reshape_views_where_strides_allow_and_copies_where_not():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    dense = upload(x)
    view = gpu_compute(ops.Reshape((2, 12)), (0, 1), [dense])
    assert view.data is dense.data and view.strides == (12, 1)
    strided = dense.transpose((1, 0))
    copied = gpu_compute(ops.Reshape((3, "n")), (1, 0), [strided, 8])
    assert copied.data is not dense.data and copied.strides == (1, 3)
    assert np.array_equal(download(copied), x.T.reshape(3, 8))
    split = reshape_buffer(strided, (2, 3, 4))  # a split of a transposed buffer needs no copy, as in numpy
    assert split.data is dense.data and split.strides == (3, 1, 6)
    assert np.array_equal(download(split), x.T.reshape(2, 3, 4))
    laid = gpu_compute(ops.Reshape((2, 3, 4)), (0, 1, 2), [strided])  # then one copy into the step's layout
    assert laid.strides == (12, 4, 1) and np.array_equal(download(laid), x.T.reshape(2, 3, 4))


def test_the_numpy_impl_reshapes_in_c_order_whatever_the_strides():
    x = np.asfortranarray(np.arange(12).reshape(3, 4))
    assert IMPLS[ops.Reshape](ops.Reshape((2, "n")), x, 6).tolist() == np.arange(12).reshape(2, 6).tolist()
    assert IMPLS[ops.Reshape](ops.Reshape(("n", 2)), x, np.float16(6)).shape == (6, 2)  # a value in the dtype


def test_two_mesh_axes_both_sharded_split_group_by_group():
    text = (ROOT / "conformance/corpus/reshape_2d_mesh.rir").read_text()
    checked = refir.verify(refir.parse(text))
    assert str(checked.types["wh"]) == "f32[2@DIDy, 2, 2@DIDx, 4] on g"
    assert str(checked.types["xh"]) == "f32[S, 4@DIDx, 4] on g"
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    w = np.arange(32, dtype=np.float32).reshape(4, 8) - 3
    for b, r in run_all(text, {"x": x, "w": w}).items():
        assert np.array_equal(r.outputs["wh"], w.reshape(2, 2, 2, 4)), b
        if b != "global":  # device 3 (DIDy 1, DIDx 1): rows 2:4 of w, columns 4:8
            assert np.array_equal(r.shards["wh"][3], w[2:, 4:].reshape(1, 2, 1, 4)), b


def test_builder_and_printer_round_trip():
    b = Builder()
    m = b.mesh([0, 1], name="m")
    x = b.input("x", "f32", ["S", "8@DIDx"], mesh=m)
    y = x.reshape(["S", 2, 4])
    b.output(y)
    prog = b.build()
    text = refir.print_program(prog)
    assert "reshape(x, [S, 2, 4])" in text
    assert refir.parse(text) == prog
    assert str(refir.verify(prog).types[y.name]) == "f32[S, 2@DIDx, 4] on m"


def test_under_mpiexec_every_rank_agrees():
    done = run_mpi(4, ["-m", "refir", "run", str(ROOT / "conformance/corpus/reshape_head_split.rir")])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all 2 expect lines hold" in done.stdout


def test_explain_says_why_a_sharded_reshape_is_local(capsys):
    from refir.cli import main

    assert main(["explain", str(ROOT / "examples/tp_attention_heads.rir"), "--value", "qh"]) == 0
    out = capsys.readouterr().out
    assert "qh = reshape(q, [S, 4, 8])\nwhy local: reshape keeps every device's elements" in out
    assert "qh: f32[S, 4@DIDx, 8] on tp" in out


@pytest.mark.parametrize("command", ["check", "lower", "explain"])
def test_check_lower_and_explain_refuse_the_bindings_a_run_refuses(command, capsys, tmp_path):
    """reshape_c2/c4 and select_c3 wait for the bindings: a command given them
    (--bind; explain also the # bind: line) refuses them as a run does: it never
    draws, or calls local, a reshape that cuts a head in half."""
    from helpers import refused

    attention = ROOT / "examples/causal_attention.rir"
    err = refused(capsys, command, attention, "--bind", "H=6", "Q=12")  # 3 columns a device: half heads of 2
    assert "H=6, Q=12, S=3: a device's block of axis 2 (12 over 4: 3 rows of 1) is 3 elements" in err
    assert err.rstrip().splitlines()[1].endswith("the blocks do not split exactly [reshape_c4]"), err
    assert "reshape of 54 elements into 48 [reshape_c2]" in refused(capsys, command, attention, "--bind", "Q=9")
    path = tmp_path / "sel.rir"
    path.write_text("mesh m = [0, 1]\nfunc main(x: f32[N, 6]) {\n  y = select(x, axis=0, index=3)\n"
                    "  return y\n}\n")
    err = refused(capsys, command, path, "--bind", "N=3")
    assert "select index 3 is outside axis 0 of extent N=3 [select_c3]" in err
    assert main_ok(command, attention, "H=7", "Q=14")  # 4, 4, 4 and 2 columns: 2, 2, 2 and 1 whole heads


def main_ok(command: str, path: Path, *bind: str) -> bool:
    from refir.cli import main

    return main([command, str(path), "--bind", *bind]) == 0


def test_two_sharded_axes_merged_and_a_bad_builder_extent_are_refused():
    text = """mesh g = [[0, 1], [2, 3]]
func main(w: f32[2@DIDy, 4@DIDx]) {
  y = reshape(w, [8])
  return y
}
"""
    with pytest.raises(refir.RefirError) as e:
        refir.verify(refir.parse(text))
    assert e.value.label == "reshape_c3" and "axis 1 (4@DIDx) is not the outermost" in e.value.message
    assert "`w_whole: f32[2@DIDy, 4] on g = set(w)`" in e.value.message
    b = Builder()
    b.mesh([0, 1], name="m")
    x = b.input("x", "f32", [8])
    for bad in (-2, 2.5, "b"):
        with pytest.raises(refir.RefirError, match="reshape_c1"):
            x.reshape([bad, 4])


def test_view_strides_agree_with_numpy_on_strided_arrays():
    rng = np.random.default_rng(0)
    views = 0
    for _ in range(300):
        a = np.arange(24).reshape(2, 3, 4)
        a = np.transpose(a, rng.permutation(3))[tuple(slice(None, None, int(rng.choice([1, -1]))) for _ in range(3))]
        new = [(24,), (6, 4), (4, 6), (2, 12), (2, 3, 4), (4, 3, 2), (1, 24, 1), (2, 1, 3, 4)][rng.integers(8)]
        st = view_strides(a.shape, tuple(s // a.itemsize for s in a.strides), new)
        if st is not None:
            views += 1
            got = np.lib.stride_tricks.as_strided(a, new, tuple(s * a.itemsize for s in st))
            assert np.array_equal(got, a.reshape(new)), (a.strides, new, st)
    assert views > 30


def test_symbol_extents_are_never_rounded_into_the_tensor_dtype():
    text = """mesh m = [0, 1]
func main(x: f16[N]) {
  y = reshape(x, [1, N])
  return y
}
"""
    x = np.arange(2049).astype(np.float16)  # 2049 is no float16: it would round to 2048
    for b, r in run_all(text, {"x": x}, world=2).items():
        assert r.outputs["y"].shape == (1, 2049) and np.array_equal(r.outputs["y"][0], x), b
