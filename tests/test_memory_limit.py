"""A run's memory counts every device's buffers, replicas per device (docs/spec.md
§12.3, memory_c1): refused before anything is allocated, on every backend and
under MPI, with one message; within the limit, a run goes ahead."""

import re
import subprocess
import sys
import time
import tracemalloc
from math import prod
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, run_mpi

import refir
from refir.checks.footprint import RunKind, footprint, nbytes_text
from refir.checks.limits import MEMORY_C1, RUN_BYTES
from refir.errors import InputError
from refir.ir.types import local_shape
from refir.running.inputs import bind_lines, default_bindings, draw_inputs
from refir.running.prepare import lowered_of, verified

MESH4 = "mesh m = [0, 1, 2, 3]\n"
MESH2D = "mesh m = [[0, 1, 2], [3, 4, 5]]\n"  # DIDy of 2, DIDx of 3
# The issue's example: one tensor of 256 MiB, replicated on 64 devices: 16 GiB.
ISSUE = ("mesh m = [" + ", ".join(map(str, range(64))) + "]\n"
         "func main(x: f32[67108864@DIDx]) {\n  y: f32[67108864] = set(x)\n  return y\n}\n")
ALLGATHER = MESH4 + "func main(x: f32[8@DIDx, 3]) {\n  y: f32[8, 3] = set(x)\n  return y\n}\n"


SPMD = RunKind("spmd")


def measured(text: str, bindings: dict[str, int] | None = None, kind: RunKind = SPMD):
    """The program's checked form, its bindings and its footprint on `kind`'s backend (spmd)."""
    checked = verified(refir.load(text), None)
    b = default_bindings(checked, bindings)
    return checked, b, footprint(lowered_of(checked), b, kind=kind)


def refusal(fn) -> str:
    with pytest.raises(InputError) as e:
        fn()
    assert f"[{MEMORY_C1}]" in str(e.value)
    return str(e.value)


# ---- the issue's example -----------------------------------------------------------

@pytest.mark.parametrize("backend", ["spmd", "gpu"])
def test_the_issues_64_device_replication_is_refused_fast_allocating_nothing(backend, monkeypatch):
    """memory_c1: 16 GiB of replicas of a 256 MiB tensor, refused in well under
    a second with nothing allocated (the input is a zero-stride view: no 256 MiB)."""
    x = np.broadcast_to(np.float32(1), (67108864,))
    program = refir.load(ISSUE)

    def reached(*_: object) -> None:  # were the check broken, fail here rather than allocate 16 GiB
        raise AssertionError("the run went past the check")

    monkeypatch.setattr("refir.running.run_setup.shard_inputs", reached)
    monkeypatch.setattr("interp.global_eval.eval_global", reached)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        message = refusal(lambda: refir.run(program, {"x": x}, backend=backend))
        took = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert took < 0.5, took  # measured ~0.01 s on a shared 2-core machine
    assert peak < 8 << 20, peak  # a few MB of Python objects; the replicas would be 16 GiB
    total = footprint(lowered_of(verified(program, None)), {}, kind=RunKind(backend)).total
    assert total > 16 << 30
    assert message.startswith(f"this run needs {total / (1 << 30):.1f} GiB ({total} bytes) summed over every device, "
                              f"over refir's limit of 8 GiB ({8 << 30} bytes) [memory_c1]; ")
    assert ("y: f32[67108864] on m = set(x) (<text>:3:3) (replicated over 64 devices: 64 x 256 MiB) = 16 GiB"
            in message)
    assert message.endswith("(raise the limit with REFIR_MAX_RUN_BYTES=N)")
    assert "\n" not in message


def test_the_global_reference_holds_the_issues_tensor_once():
    """The global backend has no devices: it holds x and y whole, once (1 GiB
    with its scratch and the result's copy), under the limit; spmd and gpu hold
    the 64 replicas."""
    checked = verified(refir.load(ISSUE), None)
    whole = footprint(lowered_of(checked), {}, kind=RunKind("global"))
    assert whole.total == whole.whole and (768 << 20) <= whole.total <= (1 << 30) + (1 << 20)
    assert footprint(lowered_of(checked), {}).total > 16 << 30  # every backend: the replicas count


def test_the_cli_refuses_before_drawing_the_inputs(tmp_path):
    """`run` draws its inputs only after the check: the 256 MiB input (512 MiB
    while drawn) is never made."""
    path = tmp_path / "replicas.rir"
    path.write_text(ISSUE)
    child = ("import resource, sys\nfrom refir.cli import main\ncode = main(sys.argv[1:])\n"
             "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\nsys.exit(code)")
    small = tmp_path / "small.rir"
    small.write_text(ISSUE.replace("67108864", "64"))
    base = subprocess.run([sys.executable, "-c", child, "run", str(small)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    done = subprocess.run([sys.executable, "-c", child, "run", str(path)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    lines = done.stderr.splitlines()
    assert base.returncode == 0, base.stdout + base.stderr
    assert done.returncode == 2, done.stderr
    assert len(lines) == 2 and lines[0].startswith("error: this run needs") and "[memory_c1]" in lines[0], done.stderr
    # kB over a run of the same program at 64 elements (what the interpreter and its imports take
    # in this environment): far below the 256 MiB input, 512 MiB while drawn
    grown = int(lines[1]) - int(base.stderr.splitlines()[-1])
    assert grown < 100_000, (lines[1], base.stderr.splitlines()[-1])


def test_commands_that_allocate_nothing_do_not_check_it(tmp_path):
    path = tmp_path / "replicas.rir"
    path.write_text(ISSUE)
    for command in ("check", "lower"):
        done = subprocess.run([sys.executable, "-m", "refir", command, str(path)], capture_output=True, text=True,
                              timeout=120, cwd=ROOT)
        assert done.returncode == 0, (command, done.stderr)


# ---- the limit, just under and just over ----------------------------------------------

@pytest.mark.parametrize("backend", ["spmd", "global", "gpu"])
def test_a_run_at_the_limit_runs_and_one_byte_over_is_refused(monkeypatch, backend):
    checked, b, _ = measured(ALLGATHER)
    fp = footprint(lowered_of(checked), b, kind=RunKind(backend))  # what this backend holds
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    monkeypatch.setenv(RUN_BYTES.env, str(fp.total))
    got = refir.run(checked.program, {"x": x}, backend=backend)
    np.testing.assert_array_equal(got.outputs["y"], x)
    monkeypatch.setenv(RUN_BYTES.env, str(fp.total - 1))  # the same program and inputs: decided afresh
    message = refusal(lambda: refir.run(checked.program, {"x": x}, backend=backend))
    assert f"this run needs {nbytes_text(fp.total)} ({fp.total} bytes)" in message
    assert f"over refir's limit of {nbytes_text(fp.total - 1)} ({fp.total - 1} bytes)" in message
    monkeypatch.setenv(RUN_BYTES.env, str(fp.total))
    np.testing.assert_array_equal(refir.run(checked.program, {"x": x}, backend=backend).outputs["y"], x)


def test_a_bad_limit_is_an_input_error(monkeypatch):
    monkeypatch.setenv(RUN_BYTES.env, "lots")
    with pytest.raises(InputError, match="REFIR_MAX_RUN_BYTES='lots' is not a non-negative integer"):
        refir.run(ALLGATHER, {"x": np.zeros((8, 3), np.float32)})


def test_the_footprint_of_an_allgather_by_hand():
    """Four devices, blocks of 24 B gathered into 96 B replicas. At the
    allgather each device holds its 24 B block, its 96 B result and the step's
    pack (24 B) and receive (96 B) buffers: 240 B. Device 0 also ends holding
    the result, its host copy and the 96 B whole output: 288 B. 288 + 3 * 240."""
    _, _, fp = measured(ALLGATHER)
    assert fp.values["x"] == 4 * 24 and fp.values["y"] == 4 * 96
    assert fp.scratch["y"] == 4 * (24 + 96)
    assert fp.devices == 288 + 3 * 240 == fp.total
    assert fp.whole == 96 + 96 + 96 + 96  # x and y whole, set's copy, the result's copy


# ---- replication and uneven blocks -----------------------------------------------------

def test_replication_over_a_2d_mesh_counts_every_copy():
    text = MESH2D + ("func main(x: f32[6@DIDx, 4]) {\n  y: f32[6, 4] = set(x)\n"
                     "  z: f32[6@DIDx, 4@DIDy] = set(y)\n  return z\n}\n")
    _, _, fp = measured(text)
    assert fp.values["x"] == 6 * (2 * 4 * 4)  # blocks of 2 rows on 3 columns, each on both mesh rows
    assert fp.values["y"] == 6 * 96  # replicated on all six
    assert fp.values["z"] == 96  # cut six ways: no copies
    checked = verified(refir.load(text), None)
    x = np.zeros((6, 4), np.float32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(RUN_BYTES.env, "100")
        message = refusal(lambda: refir.run(checked.program, {"x": x}))
    assert "input x: f32[6@DIDx, 4] on m (blocks of up to 32 B on 6 devices, each in 2 copies) = 192 B" in message
    assert "y: f32[6, 4] on m = set(x) (<text>:3:3) (replicated over 6 devices: 6 x 96 B) = 576 B" in message


@pytest.mark.parametrize("text, name, want", [
    (MESH4 + "func main(x: f32[5@DIDx]) {\n  y = neg(x)\n  return y\n}\n", "x", 5 * 4),  # 2, 2, 1, 0
    (MESH4 + "func main(x: f32[2@DIDx]) {\n  y = neg(x)\n  return y\n}\n", "x", 2 * 4),  # 1, 1, 0, 0
    (MESH2D + "func main(x: f32[5@DIDy, 7@DIDx]) {\n  y = neg(x)\n  return y\n}\n", "x", 5 * 7 * 4),  # 3+2 by 3+3+1
    (MESH2D + "func main(x: f32[5@DIDx, 2]) {\n  y = neg(x)\n  return y\n}\n", "x", 2 * 5 * 2 * 4),  # 2, 2, 1: twice
])
def test_uneven_blocks_count_exactly(text, name, want):
    checked, b, fp = measured(text)
    t = checked.types[name]
    by_device = sum(prod(local_shape(t, b, d)) for d in t.mesh.devices) * t.np_dtype.itemsize
    assert fp.values[name] == by_device == want
    assert fp.values[name] < len(t.mesh.devices) * prod(local_shape(t, b)) * 4  # not every block the longest


# ---- a transport's buffers -------------------------------------------------------------

def test_an_allreduce_counts_every_partial_of_its_team():
    """Each of 4 devices packs its 32 B partial and receives all 4 of its team's."""
    text = MESH4 + "func main(x: f32[8, 12@DIDx]) {\n  y: f32[8] = sum(x, dims=[1])\n  return y\n}\n"
    checked, _, fp = measured(text)
    (step,) = [s for s in lowered_of(checked).steps if s.is_communication]
    assert type(step.op).__name__ == "Allreduce"
    assert fp.scratch[step.out] == 4 * (32 + 4 * 32)


def test_mpi_counts_the_windows_and_buffers_its_transport_keeps():
    """64 KiB blocks gathered into 256 KiB replicas: under MPI the window (4 x
    64 KiB a rank), result slots (4 x 256 KiB), the kept pack buffer and the
    kept result stay past the step."""
    text = MESH4 + "func main(x: f32[64@DIDx, 1024]) {\n  y: f32[64, 1024] = set(x)\n  return y\n}\n"
    checked, b, plain = measured(text)
    kept = footprint(lowered_of(checked), b, mpi=True, kind=RunKind("spmd"))
    per_rank = 4 * (64 << 10) + 4 * (256 << 10) + (64 << 10) + (256 << 10)
    assert plain.kept == 0 and kept.kept == 4 * per_rank
    assert kept.devices == plain.devices + 4 * per_rank


# ---- an upper bound of what is allocated -------------------------------------------------

BOUNDED = {
    "allgather": MESH4 + "func main(x: f32[512@DIDx, 256]) {\n  y: f32[512, 256] = set(x)\n  z = add(y, y)\n"
                         "  return z\n}\n",
    "allreduce": MESH4 + "func main(x: f32[64, 4096@DIDx]) {\n  y: f32[64] = sum(x, dims=[1])\n  return y\n}\n",
    "reduce_scatter": MESH4 + "func main(x: f32[512, 512@DIDx]) {\n  y: f32[512@DIDx] = sum(x, dims=[1])\n"
                              "  return y\n}\n",
    "matmul": MESH4 + "func main(p: f32[256, 256@DIDx], q: f32[256@DIDx, 256]) {\n  c: f32[256, 256] = matmul(p, q)\n"
                      "  return c\n}\n",
    "cast": MESH4 + "func main(x: f32[1000@DIDx, 300]) {\n  y: i32[1000@DIDx, 300] = cast(x, dtype=i32)\n"
                    "  return y\n}\n",
    "all_to_all": MESH4 + "func main(x: f32[512@DIDx, 512]) {\n  y: f32[512, 512@DIDx] layout[1, 0] = set(x)\n"
                          "  return y\n}\n",
    "mesh_2d": MESH2D + "func main(x: f32[300@DIDx, 200@DIDy]) {\n  y: f32[300, 200] = set(x)\n  w = mul(y, 2.0)\n"
                        "  return w\n}\n",
    "scatter": "mesh a = [0]\nmesh c = [0, 1, 2, 3]\nfunc main(x: f32[500, 400] on a) {\n"
               "  y: f32[500@DIDx, 400] on c = set(x)\n  return y\n}\n",
    "bf16": MESH4 + "func main(x: bf16[500@DIDx, 600]) {\n  y = exp(x)\n  z: bf16[500, 600] = set(y)\n  return z\n}\n",
}


@pytest.mark.parametrize("backend", ["spmd", "global"])
@pytest.mark.parametrize("name", sorted(BOUNDED))
def test_the_footprint_bounds_what_a_run_allocates(name, backend):
    """tracemalloc's peak over a run (numpy's buffers and Python's objects, on
    blocks of 100 KiB to 1 MiB) stays within the backend's footprint. (Not the
    gpu's here: the simulator's host-side emulation is no GPU's memory.)"""
    checked, b, fp = measured(BOUNDED[name], kind=RunKind(backend))
    inputs = draw_inputs(checked, b, 0)
    refir.run(checked.program, inputs, backend=backend)  # the memos of a first run
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        out = refir.run(checked.program, inputs, backend=backend)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak <= fp.total, (peak, fp.total)
    assert peak >= sum(x.nbytes for x in out.outputs.values()) > 0  # the measure sees what the run made


# ---- the default corpus and examples ------------------------------------------------------

def test_nothing_shipped_comes_near_the_limit():
    paths = sorted((ROOT / "conformance" / "corpus").glob("*.rir")) + sorted((ROOT / "examples").glob("*.rir"))
    paths += sorted((ROOT / "docs").rglob("*.rir"))
    assert len(paths) > 20
    for path in paths:
        checked = refir.verify(refir.load(path))
        for listed in bind_lines(path.read_text()) or [None]:  # each # bind: line (a reshape needs its own)
            b = default_bindings(checked, listed)
            assert footprint(lowered_of(checked), b).total < RUN_BYTES.default >> 10, (path, b)


# ---- under MPI ----------------------------------------------------------------------------

def test_under_mpi_every_rank_stops_with_the_one_message(tmp_path):
    """Rank 0 draws the inputs and finds the run over the limit; the other ranks,
    given none, stop with it: every rank exits 2, the message printed once."""
    path = tmp_path / "gather.rir"
    path.write_text(ALLGATHER)
    done = run_mpi(4, ["-m", "refir", "run", str(path)], timeout=90, env={RUN_BYTES.env: "500"})
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    found = re.findall(r"error: this run needs .*\[memory_c1\].*REFIR_MAX_RUN_BYTES=N\)", out)
    assert len(found) == 1, out
    assert "y: f32[8, 3] on m = set(x)" in found[0]
    assert "Traceback" not in out


def test_under_mpi_a_run_within_the_limit_runs(tmp_path):
    path = tmp_path / "gather.rir"
    path.write_text(ALLGATHER)
    checked, b, _ = measured(ALLGATHER)
    limit = footprint(lowered_of(checked), b, mpi=True).total
    done = run_mpi(4, ["-m", "refir", "run", str(path)], timeout=90, env={RUN_BYTES.env: str(limit)})
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_spec_states_the_constraint():
    spec = (ROOT / "docs" / "spec.md").read_text()
    assert f"- **{MEMORY_C1}** A run's footprint is at most `{RUN_BYTES.env}`" in spec
    assert Path(refir.__file__).parent.joinpath("checks", "footprint.py").exists()


# ---- per backend, keep="all" and everywhere ------------------------------------------------

PATTERN16K = ("mesh m = [0]\nfunc main(x: f32[16384, 16384@DIDx], w: f32[16384@DIDx, 16384], bias: f32[16384]) {\n"
              "  c: f32[16384, 16384] = matmul(x, w)\n  bb = unsqueeze(bias, dims=[0])\n"
              "  y = add(c, bb)\n  out = relu(y)\n  return out\n}\n")


def test_the_gpu_backend_is_bounded_by_what_its_kernels_hold(monkeypatch):
    """benchmarks/gpu_runs.py's 16384^3 program on one device: the numpy
    backends' float64 matmul scratch (8 GiB) and the global reference made it
    13 GiB for every backend; the gpu's kernels write the results' own buffers
    (cuBLAS takes the row-major product as it is), so its run holds 6 GiB: the
    five 1 GiB values at most four at once, x's and w's host blocks, no scratch."""
    monkeypatch.setenv("REFIR_MAX_ELEMENTS", str(1 << 29))  # x alone has 2^28 elements
    checked = verified(refir.load(PATTERN16K), None)
    b = default_bindings(checked)
    gpu = footprint(lowered_of(checked), b, kind=RunKind("gpu"))
    assert 6 << 30 <= gpu.total < (6 << 30) + (1 << 20), gpu.total  # and bias, bb: 64 KiB each
    # c~1 the local product, c its one-device allreduce (a pack and a receive buffer on either backend)
    assert gpu.scratch["c~1"] == gpu.scratch["y"] == gpu.scratch["out"] == 0 and gpu.scratch["c"] == 2 << 30
    assert footprint(lowered_of(checked), b, kind=RunKind("spmd")).scratch["c~1"] == 7 << 30  # float64 x, w, c; c
    assert footprint(lowered_of(checked), b).total > 13 << 30  # every backend (conform): as before
    x = np.broadcast_to(np.float32(1), (16384, 16384))  # zero-stride: nothing allocated

    class Reached(Exception):
        pass

    def reached(*_: object) -> None:
        raise Reached

    monkeypatch.setattr("refir.running.run_setup.shard_inputs", reached)
    with pytest.raises(Reached):  # admitted: the run goes past the check
        refir.run(checked.program, {"x": x, "w": x, "bias": x[0]}, backend="gpu")
    message = refusal(lambda: refir.run(checked.program, {"x": x, "w": x, "bias": x[0]}, backend="spmd"))
    assert "this run needs 10.0 GiB" in message


def test_the_gpu_counts_no_result_copy_but_a_reductions_partials():
    _, _, gpu = measured(BOUNDED["allreduce"], kind=RunKind("gpu"))
    _, _, spmd = measured(BOUNDED["allreduce"])
    # y~1 is each device's f32[64] partial of 256 KiB of x: 64 KiB / 16 x 8 B of partials and a counter
    assert gpu.scratch["y~1"] == 4 * (8 * (64 * 1024 // 16) + 16)
    assert spmd.scratch["y~1"] == 4 * (256 + 8 * (64 * 1024 + 64))  # its result copy and float64 accumulators


CHAIN = MESH4 + ("func main(x: f32[400@DIDx, 300]) {\n  y = exp(x)\n  z = exp(y)\n  v = exp(z)\n  w = exp(v)\n"
                 "  return w\n}\n")


def test_keep_all_holds_every_value_and_is_counted():
    """keep="all" keeps every value's buffers to the end: a run of it holds more
    than the plain footprint allows, and stays within keep's footprint."""
    checked, b, plain = measured(CHAIN)
    kept = footprint(lowered_of(checked), b, kind=RunKind("spmd", keep=True))
    # at the end: all five values of 480 000 B, the result's host copy and its whole
    assert kept.total == 7 * 400 * 300 * 4 and plain.total < 4 * 400 * 300 * 4
    inputs = draw_inputs(checked, b, 0)
    refir.run(checked.program, inputs, backend="spmd", keep="all")  # the memos of a first run
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        got = refir.run(checked.program, inputs, backend="spmd", keep="all")
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert set(got.kept) == {"x", "y", "z", "v", "w"}
    assert plain.total < peak <= kept.total, (plain.total, peak, kept.total)
    gpu = footprint(lowered_of(checked), b, kind=RunKind("gpu", keep=True))
    assert gpu.total > footprint(lowered_of(checked), b, kind=RunKind("gpu")).total  # its host copies


def test_everywhere_under_mpi_counts_the_results_on_every_rank():
    """ALLGATHER's y: every rank receives every device's 96 B block (384 B) and
    assembles the 96 B whole, beside its own 96 B block: 576 B a rank at the end."""
    checked, b, plain = measured(ALLGATHER)
    lowered = lowered_of(checked)
    assert footprint(lowered, b, mpi=True, kind=RunKind("spmd")).total == plain.total == 288 + 3 * 240
    assert footprint(lowered, b, mpi=True, kind=RunKind("spmd", everywhere=True)).total == 4 * 576
    assert footprint(lowered, b, kind=RunKind("spmd", everywhere=True)).total == plain.total  # one process: as ever
