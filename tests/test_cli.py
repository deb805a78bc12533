"""`python -m refir run|check|lower`: output, files, and errors, alone and under
`mpiexec -n 4` (every rank exits, non-zero, within seconds, with no traceback)."""

import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import ROOT, needs_shared, run_mpi, shared_example

import refir
from refir.explain.lowered_listing import format_lowered
from refir.lowering.lower import lower
from refir.running.inputs import draw_inputs

BY_NAME = {n: shared_example(n) for n in ("scatter_after_permute", "layouts", "collectives", "global_extent")}
SPEC_EXAMPLE = """\
mesh m = [0, 1]

func main(x: f32[6, 8@DIDx], y: f32[8, 6] layout[1, 0]) {
  xt: f32[8@DIDx, 6] layout[1, 0] = permute(x, [1, 0])
  s = add(xt, y)
  return s
}
# expect: s = x.T + y
"""


def cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "refir", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def one_paragraph_error(stderr):
    """`error: ...` once, no blank line inside, no traceback."""
    assert stderr.startswith("error: "), stderr
    assert [line for line in stderr.splitlines() if line.startswith("error: ")] == [stderr.splitlines()[0]], stderr
    assert "\n\n" not in stderr.strip() and "Traceback" not in stderr, stderr
    return stderr


# ---- check and lower ------------------------------------------------------------------------


def test_check_prints_every_inferred_type(tmp_path):
    path = tmp_path / "spec.rir"
    path.write_text(SPEC_EXAMPLE)
    done = cli("check", path)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == f"""\
mesh m = [0, 1]

func main(x: f32[6, 8@DIDx] on m, y: f32[8, 6] on m layout[1, 0]) {{
  xt: f32[8@DIDx, 6] on m layout[1, 0] = permute(x, [1, 0])
  s: f32[8@DIDx, 6] on m = add(xt, y)
  return s
}}
{path}: ok
"""


def test_check_reports_a_verify_error_at_its_place(tmp_path):
    path = tmp_path / "bad.rir"
    path.write_text(SPEC_EXAMPLE.replace("permute(x, [1, 0])", "permute(x, [1, 1])"))
    done = cli("check", path)
    assert done.returncode == 2 and done.stdout == ""
    assert one_paragraph_error(done.stderr) == (
        f"error: {path}:4:3\n"
        "      xt: f32[8@DIDx, 6] layout[1, 0] = permute(x, [1, 1])\n"
        "      ^\n"
        "verify error [permute_c1]: in xt: [1, 1] is not a permutation of 0..1\n"
    )


def test_run_reports_a_parse_error_at_its_place(tmp_path):
    path = tmp_path / "bad.rir"
    path.write_text(SPEC_EXAMPLE.replace("s = add(xt, y)", "s = add(xt, y))"))
    done = cli("run", path)
    assert done.returncode == 2 and done.stdout == ""
    assert one_paragraph_error(done.stderr) == (
        f"error: {path}:5:17\n      s = add(xt, y))\n                    ^\n"
        "parse error: expected an equation result or 'return', found ')'\n"
    )


@needs_shared
def test_lower_prints_segments_with_local_shapes_and_strides():
    path = BY_NAME["scatter_after_permute"]
    done = cli("lower", path)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == format_lowered(lower(refir.verify(refir.load(path)))) + "\n"
    assert "        local [4, 3, 3] strides [3, 12, 1] on devices (0)\n" in done.stdout
    assert "  segment 1 (scatter): inputs t2 -> outputs t3\n" in done.stdout


# ---- run: inputs, outputs, bindings --------------------------------------------------------


@needs_shared
@pytest.mark.parametrize("backend", ["spmd", "global"])
def test_run_reads_inputs_and_writes_global_outputs(tmp_path, backend):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    y = rng.standard_normal((8, 6)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x, y=y)
    done = cli("run", BY_NAME["layouts"], "--inputs", tmp_path / "in.npz", "--out", tmp_path / "out.npz",
               "--backend", backend)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"{BY_NAME['layouts']}: main on {backend}"
    assert "g: f32[8, 6] on m layout[1, 0] = shape (8, 6)" in done.stdout
    assert done.stdout.endswith(f"all 1 expect lines hold\nwrote {tmp_path / 'out.npz'}\n")
    with np.load(tmp_path / "out.npz") as out:
        assert out.files == ["g"]
        assert out["g"].dtype == np.float32 and np.array_equal(out["g"], x.T + y)


@needs_shared
def test_run_draws_inputs_from_seed_and_bindings(tmp_path):
    path = BY_NAME["collectives"]
    done = cli("run", path, "--seed", 3, "--bind", "R=8", "C=8", "P=4", "--out", tmp_path / "out.npz")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"{path}: main on spmd (C=8, P=4, R=8)"
    checked = refir.verify(refir.load(path))
    inputs = draw_inputs(checked, {"R": 8, "C": 8, "P": 4}, 3)
    with np.load(tmp_path / "out.npz") as out:
        assert sorted(out.files) == ["cols", "full", "part", "total"]
        assert np.array_equal(out["full"], inputs["x"]) and np.array_equal(out["cols"], inputs["x"])
        assert np.array_equal(out["total"], inputs["y"].sum((0, 1))) and out["part"].shape == (8, 8)


@needs_shared
def test_run_uses_the_programs_bind_line(tmp_path):
    path = tmp_path / "bound.rir"
    path.write_text(BY_NAME["global_extent"].read_text() + "# bind: D=12\n")
    done = cli("run", path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"{path}: main on spmd (D=12)"


def test_a_failing_expect_line_exits_1(tmp_path):
    path = tmp_path / "wrong.rir"
    path.write_text(SPEC_EXAMPLE.replace("# expect: s = x.T + y", "# expect: s = x.T - y"))
    done = cli("run", path)
    assert done.returncode == 1
    assert f"FAILED {path}:8:1: s != x.T - y (" in done.stdout
    assert " elements outside the bound; worst s[" in done.stdout
    assert "expect lines hold" not in done.stdout


# ---- bad input: alone ----------------------------------------------------------------------

BAD = {
    "wrong_shape": ({"x": ((6, 9), "f4"), "y": ((8, 6), "f4")},
                    "error: axis 1 of input 'x' has extent 9, but x: f32[6, 8@DIDx] on m declares 8@DIDx\n"),
    "wrong_dtype": ({"x": ((6, 8), "f8"), "y": ((8, 6), "f4")},
                    "error: input 'x' has dtype float64, but x: f32[6, 8@DIDx] on m needs float32\n"),
    "missing_input": ({"x": ((6, 8), "f4")},
                      "error: missing input 'y': main takes y: f32[8, 6] on m layout[1, 0] (inputs given: x)\n"),
}
OUTSIDE = """\
mesh m = [0, 5]
func main(x: f32[4@DIDx]) {
  y = neg(x)
  return y
}
"""
OUTSIDE_ERROR = "error: mesh 'm' names device 5, outside a world of 4 ranks (run with --world 6 or mpirun -n 6)\n"


def bad_inputs(tmp_path, name):
    arrays, _ = BAD[name]
    path = tmp_path / f"{name}.npz"
    np.savez(path, **{k: np.zeros(shape, dtype) for k, (shape, dtype) in arrays.items()})
    return path


@needs_shared
@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_alone(tmp_path, name):
    done = cli("run", BY_NAME["layouts"], "--inputs", bad_inputs(tmp_path, name))
    assert done.returncode == 2 and done.stdout == ""
    assert one_paragraph_error(done.stderr) == BAD[name][1]


@needs_shared
def test_symbol_that_does_not_divide_runs_in_uneven_blocks_alone():
    done = cli("run", BY_NAME["collectives"], "--bind", "R=6")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.endswith("all 4 expect lines hold\n")


def test_device_outside_the_world_alone(tmp_path):
    path = tmp_path / "outside.rir"
    path.write_text(OUTSIDE)
    done = cli("run", path, "--world", 4)
    assert done.returncode == 2 and done.stdout == ""
    assert one_paragraph_error(done.stderr) == OUTSIDE_ERROR


@needs_shared
@pytest.mark.parametrize("args, message", [
    (["run", "nowhere.rir"], "error: cannot read nowhere.rir: No such file or directory\n"),
    (["run", BY_NAME["layouts"], "--inputs", "nowhere.npz"], "error: cannot read inputs from nowhere.npz: "),
    (["run", BY_NAME["layouts"], "--inputs", "x.npz", "--bind", "N=2"],
     "error: --inputs fixes every extent and value: leave out --bind and --seed\n"),
    (["run", BY_NAME["layouts"], "--bind", "Q=2"], "error: --bind names 'Q', which is not a symbol of main\n"),
    (["run", BY_NAME["layouts"], "--func", "other"],
     f"error: {BY_NAME['layouts']}: no function named 'other' (functions: main)\n"),
])
def test_other_bad_invocations(args, message):
    done = cli(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert one_paragraph_error(done.stderr).startswith(message)


# ---- bad input: under mpiexec -n 4 ---------------------------------------------------------


def mpi_cli(args, seconds=15):
    start = time.monotonic()
    done = run_mpi(4, ["-m", "refir", *map(str, args)], timeout=60)
    assert time.monotonic() - start < seconds, "every rank must exit within seconds"
    return done


@needs_shared
@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_under_mpiexec(tmp_path, name):
    done = mpi_cli(["run", BY_NAME["layouts"], "--inputs", bad_inputs(tmp_path, name)])
    assert done.returncode != 0 and done.stdout == ""
    assert one_paragraph_error(done.stderr) == BAD[name][1]  # rank 0 reports, every rank exits


@needs_shared
def test_symbol_that_does_not_divide_runs_in_uneven_blocks_under_mpiexec():
    done = mpi_cli(["run", BY_NAME["collectives"], "--bind", "R=6"], seconds=60)
    assert done.returncode == 0
    assert done.stdout.endswith("all 4 expect lines hold\n")


def test_device_outside_the_world_under_mpiexec(tmp_path):
    path = tmp_path / "outside.rir"
    path.write_text(OUTSIDE)
    done = mpi_cli(["run", path])
    assert done.returncode != 0 and done.stdout == ""
    assert one_paragraph_error(done.stderr) == OUTSIDE_ERROR


@needs_shared
def test_an_error_on_one_rank_ends_every_rank(tmp_path):
    # rank 2 fails while ranks 0, 1 and 3 wait for it in a barrier
    env = {"PYTHONPATH": str(ROOT / "tests")}
    start = time.monotonic()
    done = run_mpi(4, ["-m", "refir", "run", BY_NAME["collectives"], "--backend", "mpi_driver:refir_error_on_rank_2"],
                   timeout=60, env=env)
    assert time.monotonic() - start < 15
    assert done.returncode != 0
    assert "rank 2: error: rank 2 gave up" in done.stderr and "Traceback" not in done.stderr
    # an exception a backend of the user's raises becomes a RunError naming it; still every rank ends
    start = time.monotonic()
    done = run_mpi(4, ["-m", "refir", "run", BY_NAME["collectives"], "--backend", "mpi_driver:crash_on_rank_2"],
                   timeout=60, env=env)
    assert time.monotonic() - start < 15
    assert done.returncode != 0
    assert "ZeroDivisionError: rank 2 divided by zero" in done.stderr
