"""slice, select, pad and cat (docs/spec.md §5.8) on every backend: numpy's meaning,
which steps are local and which gather a sharded axis, uneven blocks of the
result, gpu kernels on strided and negatively strided operands, the printer and
builder, the nvFuser importer, explain, the mutants, and a run under mpiexec."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import ROOT, run_mpi
from test_gpu_kernels import strided

import refir
from gpu_backend.buffers.buffer import download, upload
from gpu_backend.impls import GPU_IMPLS
from interp.impls import IMPLS
from refir.cli import main
from refir.errors import InputError
from refir.frontends import builder
from refir.frontends.builder import Builder
from refir.frontends.nvfuser import import_nvfuser
from refir.ir import ops
from refir.ir.types import DTYPES, dense_strides
from refir.lowering.lower import lower
from refir.text.printer import print_program

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
CORPUS = ROOT / "conformance" / "corpus"
SHARDED = """mesh m = [3, 1, 0, 2]

func main(x: f32[7@DIDx, 4], y: f32[2@DIDx, 4]) {
  s = slice(x, starts=[1], stops=[7], steps=[2])
  r: f32[3, 4] = slice(x, starts=[4], stops=[7])
  l = slice(x, starts=[1], stops=[4], axes=[1])
  c = select(x, axis=0, index=6)
  p = pad(x, low=[1, 0], high=[3, 0], value=-0.0)
  j = cat(x, y, axis=0)
  return s, r, l, c, p, j
}
"""


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.integers(-9, 9, (7, 4)).astype(np.float32), "y": rng.integers(-9, 9, (2, 4)).astype(np.float32)}


def _want(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    return {"s": x[1:7:2], "r": x[4:7], "l": x[:, 1:4], "c": x[6],
            "p": np.pad(x, [(1, 3), (0, 0)], constant_values=-0.0), "j": np.concatenate([x, y])}


@pytest.mark.parametrize("backend", ["global", "spmd", "gpu"])
def test_every_backend_gives_numpys_windows(backend):
    inputs = _inputs()
    got = refir.run(refir.parse(SHARDED), inputs, backend=backend)
    for name, want in _want(**inputs).items():
        assert got.outputs[name].shape == want.shape, name
        assert np.array_equal(got.outputs[name], want), name
    assert np.signbit(got.outputs["p"][0]).all()  # -0.0 pads as -0.0, bit for bit
    if backend != "global":  # the result's blocks are cut afresh: 3 rows over 4 devices, 1 1 1 0
        assert {d: b.shape for d, b in got.shards["s"].items()} == {3: (1, 4), 1: (1, 4), 0: (1, 4), 2: (0, 4)}
        assert {d: b.shape for d, b in got.shards["j"].items()} == {3: (3, 4), 1: (3, 4), 0: (3, 4), 2: (0, 4)}
        assert all(b.shape == (3, 4) for b in got.shards["r"].values())  # declared replicated


def test_a_window_of_an_unsharded_axis_is_local_and_one_of_a_sharded_axis_gathers():
    lowered = lower(refir.verify(refir.parse(SHARDED)))
    made = {}
    for step in lowered.steps:
        made.setdefault(step.eqn.out, []).append(ops.op_name(step.op))
    assert made["l"] == ["slice"]  # axis 1 is whole on every device
    assert made["s"] == ["allgather", "slice", "keep_block"]
    assert made["r"] == ["allgather", "slice"]  # declared replicated: nothing to cut after
    assert made["c"] == ["allgather", "select"]
    assert made["p"] == ["allgather", "pad", "keep_block"]
    assert made["j"] == ["allgather", "allgather", "cat", "keep_block"]


def test_explain_shows_the_gather_a_window_needs_and_its_bytes(capsys):
    path = CORPUS / "window_sharded.rir"
    assert main(["explain", str(path), "--value", "x~1"]) == 0
    out = capsys.readouterr().out
    assert "x~1 = allgather(x, axis=0, mesh_axis=DIDx)" in out
    assert "lowered from s = slice(x, starts=[1], stops=[6], steps=[2])" in out
    assert "3      0 1 2   [6:7, 0:4]     16" in out  # the short last block: one row of 4 floats


def _gpu(op: object, order: tuple[int, ...], *xs: np.ndarray) -> np.ndarray:
    out = GPU_IMPLS[type(op)](op, order, *[upload(x) for x in xs])
    host = download(out)
    assert host.strides == dense_strides(host.shape, order, host.itemsize)  # dense in the asked layout
    return host


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(f"u{x.itemsize}")


@pytest.mark.parametrize("dtype", ["f32", "bf16", "i8", "bool", "f64"])
def test_gpu_windows_read_strided_and_negatively_strided_operands(dtype):
    rng = np.random.default_rng(7)
    x = strided(rng, (5, 4, 3), DTYPES[dtype])
    y = strided(rng, (5, 2, 3), DTYPES[dtype])
    # the operands really are strided: gaps or permuted axes, and a negative step
    assert not x.flags.c_contiguous and not y.flags.c_contiguous
    assert any(s < 0 for s in x.strides + y.strides), (x.strides, y.strides)
    value = 1 if dtype == "bool" else 7
    cases = [
        (ops.Slice((0, 2), (1, 0), (5, 3), (2, 2)), (x,)),
        (ops.Slice((1,), (3,), (3,), (1,)), (x,)),  # an empty window
        (ops.Select(1, 3), (x,)),
        (ops.Select(2, 0), (x,)),
        (ops.Pad((0, 2, 1), (1, 0, 2), value), (x,)),
        (ops.Cat(1), (x, y, x)),
    ]
    for op, args in cases:
        want = IMPLS[type(op)](op, *args)
        for order in ((0, 1, 2)[:want.ndim], tuple(reversed(range(want.ndim)))):
            got = _gpu(op, order, *args)
            assert got.shape == want.shape, (op, order)
            assert np.array_equal(_bits(got), _bits(want)), (op, order)  # bit for bit


def test_the_text_round_trips_and_the_builder_writes_the_same_program():
    text = """mesh m = [0, 1]

func main(x: f32[6@DIDx, 4] on m) {
  s: f32[3@DIDx, 4] on m = slice(x, starts=[1], stops=[6], steps=[2])
  t: f32[6@DIDx, 2] on m = slice(x, starts=[0], stops=[2], axes=[1])
  c: f32[6@DIDx] on m = select(x, axis=1, index=2)
  p: f32[6@DIDx, 5] on m = pad(x, low=[0, 1], high=[0, 0], value=-0.0)
  j: f32[9@DIDx, 4] on m = cat(x, s, axis=0)
  return s, t, c, p, j
}
"""
    parsed = refir.parse(text)
    assert print_program(parsed) == text
    assert refir.parse(print_program(parsed)) == parsed
    b = Builder()
    m = b.mesh([0, 1], name="m")
    x = b.input("x", "f32", ["6@DIDx", 4], mesh=m)
    s = x.slice([1], [6], [2], name="s")
    t = x.slice([0], [2], axes=[1], name="t")
    c = x.select(1, 2, name="c")
    p = x.pad([0, 1], [0, 0], value=-0.0, name="p")
    j = builder.cat([x, s], 0, name="j")
    b.output(s, t, c, p, j)
    assert print_program(b.build()) == text


NVFUSER = """Inputs:
  T0_g_float[ideviceIdx.x0{8}, iS1{6}] (DeviceMesh{0 1})
Outputs:
  T2_g_float[ideviceIdx.x4{8}] (DeviceMesh{0 1})
  T5_g_float[ideviceIdx.x9{8}, iS10{9}] (DeviceMesh{0 1})

%kernel_math {
T1_l_float[ideviceIdx.x2{8}, iS3{3}] (DeviceMesh{0 1})
   = slice( T0_g_float[ideviceIdx.x0{8}, iS1{6}] (DeviceMesh{0 1}), { {0, 8, 1} {1, 6, 2} } )
T2_g_float[ideviceIdx.x4{8}] (DeviceMesh{0 1})
   = select( T0_g_float[ideviceIdx.x0{8}, iS1{6}] (DeviceMesh{0 1}), axis = iS1{6}, index = 2 )
T3_l_float[ideviceIdx.x5{8}, iS6{9}] (DeviceMesh{0 1})
   = pad( T0_g_float[ideviceIdx.x0{8}, iS1{6}] (DeviceMesh{0 1}), {0, 0, 0, 3} )
T4_l_float[ideviceIdx.x7{8}, iS8{9}] (DeviceMesh{0 1})
   = pad( T1_l_float[ideviceIdx.x2{8}, iS3{3}] (DeviceMesh{0 1}), {0, 0, 6, 0} )
T5_g_float[ideviceIdx.x9{8}, iS10{9}] (DeviceMesh{0 1})
   = cat( T3_l_float[ideviceIdx.x5{8}, iS6{9}] (DeviceMesh{0 1}),
          T4_l_float[ideviceIdx.x7{8}, iS8{9}] (DeviceMesh{0 1}), 1 )
} // %kernel_math
"""


def test_the_importer_maps_nvfusers_printed_windows():
    imported = import_nvfuser(NVFUSER, "dump.txt")
    text = imported.text
    eqns = [line.strip() for line in text.splitlines() if line.startswith("  T") and " = " in line]
    assert eqns == [
        "T1: f32[8@DIDx, 3] on m = slice(T0, starts=[1], stops=[6], steps=[2], axes=[1])",
        "T2: f32[8@DIDx] on m = select(T0, axis=1, index=2)",
        "T3: f32[8@DIDx, 9] on m = pad(T0, low=[0, 0], high=[0, 3])",
        "T4: f32[8@DIDx, 9] on m = pad(T1, low=[0, 6], high=[0, 0])",
        "T5: f32[8@DIDx, 9] on m = cat(T0, T1, axis=1)",
    ]
    assert "nvFuser prints no pad value: T3 pads with 0" in text
    x = np.arange(48, dtype=np.float32).reshape(8, 6)
    got = refir.run(imported.program, {"T0": x}, backend="spmd").outputs
    assert np.array_equal(got["T5"], np.concatenate([x, x[:, 1:6:2]], axis=1))
    with pytest.raises(refir.RefirError, match="T4 is padded by \\[0, 5\\] below, not by 6 on axis 1 alone"):
        import_nvfuser(NVFUSER.replace("{0, 0, 6, 0}", "{0, 0, 5, 1}"), "dump.txt")


@pytest.mark.parametrize("backend", ["spmd", "gpu"])
def test_select_c3_past_a_symbolic_extent_on_every_backend(backend):
    text = "mesh m = [0, 1]\nfunc main(x: f32[N@DIDx, 3]) {\n  y = select(x, axis=0, index=4)\n  return y\n}\n"
    with pytest.raises(InputError, match=r"<text>:3:3: in y: select index 4 is outside axis 0 of extent N=4 "
                       r"\[select_c3\]"):
        refir.run(refir.parse(text), {"x": np.zeros((4, 3), np.float32)}, backend=backend)
    got = refir.run(refir.parse(text), {"x": np.arange(15, dtype=np.float32).reshape(5, 3)}, backend=backend)
    assert got.outputs["y"].tolist() == [12, 13, 14]


def test_the_window_mutants_are_killed(capsys):
    names = ["slice_off_by_one", "slice_step_ignored", "cat_order_swapped", "select_from_the_end",
             "pad_value_zero", "window_on_the_local_block"]
    main(["conform", "--cases", "0", "--no-mpi", *[a for n in names for a in ("--mutant", n)]])
    out = capsys.readouterr().out
    assert "6 mutants, 6 killed" in out, out


def test_the_window_corpus_agrees_under_mpiexec():
    files = sorted(str(p) for p in CORPUS.glob("window_*.rir"))
    done = run_mpi(4, ["-m", "refir", "conform", "--cases", "0", "--backend", "spmd", *files], timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all backends agree" in done.stdout, done.stdout


def test_trace_shows_each_device_gathering_then_keeping_its_block(capsys):
    assert main(["trace", str(CORPUS / "window_cat_even.rir"), "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "x~1 = allgather(x, axis=0, mesh_axis=DIDx)\n  lowered from j = cat(x, y, axis=0)" in out
    assert "j~1 = cat(x~1, y~1, axis=0)" in out and "j = keep_block(j~1)" in out


def test_explain_says_why_a_window_step_is_local(capsys):
    assert main(["explain", str(CORPUS / "window_cat_even.rir"), "--value", "j~1"]) == 0
    out = capsys.readouterr().out
    assert "j~1 = cat(x~1, y~1, axis=0)\n  lowered from j = cat(x, y, axis=0)" in out
    assert "why local: cat changes only axes each device holds whole (spec §5.8)" in out
