"""Helpers for tests: the shared examples, launching mpiexec, and a program's
run on a backend checked against numpy, block by block."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
# CI checks the project out beside ../shared; REFIR_SHARED points elsewhere. A bare
# clone has no ../shared: the tests of the shared examples skip, saying why, unless
# REFIR_REQUIRE_SHARED=1 (as .ci/run sets) makes their absence an error.
SHARED = Path(os.environ.get("REFIR_SHARED", ROOT.parent / "shared"))
EXAMPLES = sorted((SHARED / "examples").glob("*.rir"))
NO_SHARED = f"the shared examples are absent ({SHARED / 'examples'}): clone beside ../shared or set REFIR_SHARED"
if not EXAMPLES and os.environ.get("REFIR_REQUIRE_SHARED") == "1":
    raise RuntimeError(f"REFIR_REQUIRE_SHARED=1, but {NO_SHARED}")
needs_shared = pytest.mark.skipif(not EXAMPLES, reason=NO_SHARED)
# The project's own examples (examples/), which the README uses.
OWN_EXAMPLES = sorted((ROOT / "examples").glob("*.rir"))

# The second seed bug's pattern (matmul over a sharded K, its allreduce, bias, relu).
SEED2 = """mesh m = [0, 1]
func main(x: f32[M, K@DIDx], w: f32[K@DIDx, N], bias: f32[N]) {
  c: f32[M, N] = matmul(x, w)
  bb: f32[b, N] = unsqueeze(bias, dims=[0])
  y = add(c, bb)
  out = relu(y)
  return out
}
"""


def shared_example(name: str) -> Path:
    """The path of a shared example (tests that use it are marked `needs_shared`)."""
    return SHARED / "examples" / f"{name}.rir"


def example_params() -> list:
    """The shared examples as pytest parameters: one skipped parameter when absent."""
    if not EXAMPLES:
        return [pytest.param(None, id="shared-absent", marks=pytest.mark.skip(reason=NO_SHARED))]
    return [pytest.param(p, id=p.stem) for p in EXAMPLES]


BACKENDS = ("global", "spmd", "gpu")  # gpu: under the CUDA simulator where there is no GPU


def assert_blocks(t: Any, shards: dict[int, np.ndarray], whole: np.ndarray, bindings: dict[str, int],
                  any_tiny_strides: bool = True) -> None:
    """Every device's buffer of a value of type `t` is its block of `whole`:
    the shape its type gives under `bindings`, the values, and the strides of a
    dense buffer in the type's declared layout (with `any_tiny_strides`, a
    buffer of one element or none may have any: nothing reads them)."""
    from refir.ir.types import block_index, dense_strides, local_shape

    for d, buf in shards.items():
        shape = local_shape(t, bindings, d)
        assert buf.shape == shape, (d, buf.shape, shape)
        # block_index: an interleaved axis's runs (spec §3.4) too
        np.testing.assert_array_equal(buf, whole[block_index(t, d, whole.shape)], err_msg=f"device {d}")
        if buf.size > 1 or not any_tiny_strides:
            assert buf.strides == dense_strides(shape, t.order, buf.itemsize), (d, buf.strides)


def assert_runs_as(program: Any, inputs: dict[str, np.ndarray], want: np.ndarray, backend: str,
                   bindings: dict[str, int] | None = None, result: str = "y", **run: Any) -> Any:
    """refir.run(program, inputs, backend, **run) gives `want` as `result`
    (its dtype, shape and every value); off the global backend, every device's
    buffer of it is its block (assert_blocks). Returns the RunResult."""
    import refir

    got = refir.run(program, inputs, backend=backend, **run)
    out = got.outputs[result]
    assert (out.dtype, out.shape) == (want.dtype, want.shape), (backend, out.dtype, out.shape)
    np.testing.assert_array_equal(out, want, err_msg=backend)
    if backend != "global":
        assert_blocks(got.lowered.types[result], got.shards[result], want, bindings or {})
    return got


def mpiexec() -> str:
    """The mpiexec next to this Python (the mpich wheel puts it in the venv)."""
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else "mpiexec"


# The environment of a job whose subject is the shared-memory path itself (windows, result slots, their
# stalls and files): the machine's nodes, whatever REFIR_MPI_NODE_RANKS the suite runs under.
MACHINE_NODES: dict[str, str | None] = {"REFIR_MPI_NODE_RANKS": None}


def run_mpi(n: int, args: list[str], timeout: float = 120, env: dict[str, str | None] | None = None,
            cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`mpiexec -n N python ARGS`, bounded by MPIEXEC_TIMEOUT and a wall-clock timeout;
    `env` adds to the environment (a value None removes the variable)."""
    merged = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "MPIEXEC_TIMEOUT": str(int(timeout)),
              "PYTHONUNBUFFERED": None, **(env or {})}
    full_env = {k: v for k, v in merged.items() if v is not None}
    cmd = [mpiexec(), "-n", str(n), sys.executable, *args]
    return run_job(cmd, capture_output=True, text=True, timeout=timeout + 30, env=full_env, cwd=cwd)


def assert_stall_ends_the_job(child: str, args: list[str], said: Path, waiting_for: str,
                              env: dict[str, str | None] | None = None) -> None:
    """A two-rank `python -c child *args said` whose rank 1 stalls: rank 0 gives
    up after REFIR_MPI_TIMEOUT=2 s waiting for `waiting_for`, writes why into
    `said` (mpiexec may drop a rank's last output when the job aborts) and
    aborts the job, well before mpiexec's own limit (`env` adds to the job's)."""
    start = time.monotonic()
    done = run_mpi(2, ["-c", child, *args, str(said)], timeout=60, env={"REFIR_MPI_TIMEOUT": "2", **(env or {})})
    took = time.monotonic() - start
    assert done.returncode != 0 and took < 30, (done.returncode, took, done.stdout + done.stderr)
    assert said.read_text().startswith(f"rank 0 gave up after 2 s: rank 0: gave up waiting for {waiting_for}"), \
        done.stdout + done.stderr


SHM = Path("/dev/shm")


def run_job(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
    """subprocess.run(cmd) of an mpiexec job, then MPICH's shared-memory
    segments the job left behind removed: a job ended by MPI_Abort (the fault
    tests end so, on purpose) does not unlink them, and each run of the suite
    left about 70 MB in /dev/shm. A segment made during the job and mapped by
    no process once it is over is one of those."""
    before = _segments()
    try:
        return subprocess.run(cmd, **kwargs)  # type: ignore[call-overload]
    finally:
        made = _segments() - before
        for _ in range(20):  # a rank still exiting maps its segments a moment longer
            for name in made - _mapped():
                (SHM / name).unlink(missing_ok=True)
            made &= _segments()
            if not made:
                break
            time.sleep(0.05)


def _segments() -> set[str]:
    return {p.name for p in SHM.glob("mpich_shm_*")} if SHM.is_dir() else set()


def _mapped() -> set[str]:
    """The /dev/shm files some process maps now (of the processes this user may read)."""
    names: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:  # gone, or not ours
            continue
        names.update(line.rsplit("/dev/shm/", 1)[1].split(" ")[0] for line in text.splitlines() if "/dev/shm/" in line)
    return names


def refir_cli(capsys: pytest.CaptureFixture, *args: object) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python -m refir ARGS`, in-process."""
    from refir.cli import main

    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(capsys: pytest.CaptureFixture, *args: object) -> str:
    """The one error line of a refused command (exit 2, nothing on stdout, no traceback)."""
    code, out, err = refir_cli(capsys, *args)
    assert (code, out) == (2, ""), (code, out, err)
    assert [line for line in err.splitlines() if line.startswith("error: ")] == [err.splitlines()[0]], err
    assert "Traceback" not in err, err
    return err


def fake_blas(batched: bool = False) -> Any:
    """A gemm.Cublas with no GPU behind it: fixed handle, algo, types and compute types,
    so a test sees the exact arguments refir would hand cuBLAS; `batched` gives it cupy's
    strided-batched wrapper (a cupy without one makes no batched call)."""
    from gpu_backend.kernels import gemm

    blas = gemm.Cublas.__new__(gemm.Cublas)
    blas.types, blas.chars = {"f": 0, "d": 1}, {0: "f", 1: "d"}
    blas.handle, blas.algo = (lambda: 7), 99
    blas.scalars = {c: (np.ones(1, c), np.zeros(1, c)) for c in "fd"}
    blas.compute_type = lambda char: 68 if char == "f" else 70
    if batched:
        blas.gemm_batched = lambda *args: None
    return blas


def assert_cases_pass(cases: Any, backends: Any = ("global", "spmd", "gpu"), context: object = None) -> None:
    """Every conformance case (conformance.cases) passes on each of `backends`: each
    outcome's problems shown, with `context` (what was drawn), where one does not."""
    from conformance.check import check_case

    for case in cases:
        outcomes = check_case(case, list(backends))
        assert outcomes, (context, case)
        for outcome in outcomes:
            assert outcome.status == "pass", (context, outcome.backend, outcome.problems)
