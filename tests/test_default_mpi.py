"""The default run's MPI batch (conformance/mpi_batch.py SuiteBatch): where an
mpiexec is at hand it runs a few corpus programs with a rank per process on
the backends asked for (a user's module:callable too), its outcomes are the
summary's mpi row, it catches a planted MPI-transport bug that only the
receive-buffer sentinel shows (and passes it without the sentinel), a hung or
dying batch is one line, and --no-mpi leaves it out."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from helpers import ROOT, run_job

from conformance.cases import CORPUS, cases_of
from conformance.mpi_batch import RANKS, SUITE, mpiexec, shown, why_not
from refir.cli import main

pytestmark = pytest.mark.skipif(bool(why_not()), reason=f"no MPI batch here: {why_not()}")


def _default_run(backend: str, **env: str) -> subprocess.CompletedProcess:
    """`python -m refir conform --cases 0 --backend BACKEND`, with tests/ on the path (tests/planted_mpi.py)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "NUMBA_ENABLE_CUDASIM": "1", **env}
    return run_job([sys.executable, "-m", "refir", "conform", "--cases", "0", "--backend", backend],
                   capture_output=True, text=True, timeout=600, env=full, cwd=ROOT)


def _all_corpus() -> str:
    n = sum(len(cases_of(f, "corpus", 0)) for f in sorted(CORPUS.glob("*.rir")))
    return f"{n}/{n}"


def _row(out: str, name: str) -> str:
    (line,) = [ln for ln in out.splitlines() if ln.split()[:1] == [name]]
    return line.split()[1]


def test_the_default_run_catches_an_mpi_only_bug_that_only_the_sentinel_shows() -> None:
    """planted_mpi:backend is spmd with mpi_allgather_own_block_kept in place: in
    one process it has nothing to patch, so only the MPI batch can catch it; its
    stale piece holds the right bytes, so only the sentinel shows it."""
    caught = _default_run("planted_mpi:backend")
    out = caught.stdout
    assert caught.returncode == 1, out + caught.stderr
    assert _row(out, "corpus") == _all_corpus() and _row(out, "mpi") != "10/10", out
    assert re.search(r"^mpi\s+\d+/10$", out, re.M), out
    failures = [ln for ln in out.splitlines() if ln.startswith("- ") and " on planted_mpi:backend [" in ln]
    # every failure is an mpi case's, found by the segment-by-segment run (the repeat that meets the stale piece)
    mpi_cases = {c.name for f in SUITE for c in cases_of(CORPUS / f"{f}.rir", "mpi")}
    assert len(failures) == 8 and all(re.match(r"- (\S+) on planted_mpi:backend \[.*isolation.*\]$", ln)
                            and ln.split()[1] in mpi_cases for ln in failures), failures
    assert f"replay: {shown(mpiexec() or '')} -n {RANKS} python -m refir conform conformance/corpus/" in out
    assert "the mpi row: 4 MPI ranks, one per process" in out
    # Without the sentinel the very same run passes: the planted bug is invisible there.
    missed = _default_run("planted_mpi:backend", REFIR_SENTINEL="0")
    assert missed.returncode == 0, missed.stdout + missed.stderr
    assert _row(missed.stdout, "mpi") == "10/10" and "all backends agree" in missed.stdout


def test_a_hung_batch_is_stopped_and_said_in_one_line() -> None:
    start = time.monotonic()
    done = _default_run("planted_mpi:stalls", REFIR_MPI_TIMEOUT="8")
    took = time.monotonic() - start
    out = done.stdout + done.stderr
    assert done.returncode == 1 and took < 300, (took, out)
    said = [ln for ln in out.splitlines() if ln.startswith("the MPI batch")]
    assert said == [f"the MPI batch ({shown(mpiexec() or '')} -n 4) ran past 8 s and was stopped "
                    "(REFIR_MPI_TIMEOUT sets the limit)"], out
    assert "Traceback" not in out and _row(done.stdout, "corpus") == _all_corpus()
    assert "the MPI batch: it failed" in out


def test_a_dying_batch_is_one_line() -> None:
    done = _default_run("planted_mpi:dies", REFIR_MPI_TIMEOUT="60")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    said = [ln for ln in out.splitlines() if ln.startswith("the MPI batch")]
    assert len(said) == 1 and re.match(r"the MPI batch \(.*mpiexec -n 4\) failed \(exit \d+\): ", said[0]), out
    assert "Traceback" not in out


def test_a_bad_timeout_is_one_line() -> None:
    full = {**os.environ, "REFIR_MPI_TIMEOUT": "abc"}
    done = subprocess.run([sys.executable, "-m", "refir", "--cases", "0", "--backend", "spmd"], capture_output=True,
                          text=True, timeout=300, env=full, cwd=ROOT)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert "REFIR_MPI_TIMEOUT='abc' is not a number of seconds" in done.stderr


def test_no_mpi_leaves_the_batch_out_and_the_hints_say_what_to_run(capsys: pytest.CaptureFixture) -> None:
    assert main(["conform", "--cases", "0", "--backend", "spmd", "--no-mpi"]) == 0
    out = capsys.readouterr().out
    assert not re.search(r"^mpi\s", out, re.M) and "(the mpi row" not in out
    every = f"run `{shown(mpiexec() or '')} -n 4 {shown(sys.executable)} -m refir`"
    assert f"the MPI transport (one rank per process; the MPI batch: --no-mpi left it out): {every}" in out
    assert "with numba installed" not in out
    assert "the gpu backend (--backend left it out): run `python -m refir conform --backend gpu`" in out


def test_the_batch_covers_what_it_is_chosen_for() -> None:
    """Every collective kind, uneven blocks and strided layouts, and a 2-D mesh."""
    from refir.ir import ops
    from refir.ir.types import local_shape
    from refir.lowering.lower import lower

    kinds: set[str] = set()
    uneven = strided = two_d = False
    cases = [c for f in SUITE for c in cases_of(CORPUS / f"{f}.rir", "mpi")]
    for case in cases:
        for step in lower(case.checked).steps:
            if isinstance(step.op, ops.Communication):
                kinds.add(type(step.op).__name__)
        for t in case.checked.types.values():
            uneven |= len({local_shape(t, case.bindings, d) for d in t.mesh.devices}) > 1
            strided |= tuple(t.order) != tuple(range(len(t.axes)))
            two_d |= t.mesh.ndim == 2
    assert kinds == {"Allgather", "Allreduce", "ReduceScatter", "AllToAll", "Gather", "Reduce", "Broadcast",
                     "Scatter", "SendRecv"}
    assert uneven and strided and two_d and len(cases) == 10


def test_the_mutant_table_kills_it_under_mpiexec_by_the_segmented_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from conformance.mutants import MUTANTS
    from conformance.teeth import hunt

    planted = [m for m in MUTANTS if m.name == "mpi_allgather_own_block_kept"]
    (kill,) = hunt(cases_of(CORPUS / "single_device_mesh.rir"), mutants=planted)
    assert kill.killed and kill.mutant.by == "isolation" and set(kill.checks) == {"isolation"}, kill
    assert kill.first.startswith(f"under mpiexec -n {RANKS}: allgather_inner_axis")
    monkeypatch.setenv("REFIR_SENTINEL", "0")  # the batch's ranks then leave their buffers as they are
    (survived,) = hunt(cases_of(CORPUS / "single_device_mesh.rir"), mutants=planted)
    assert not survived.killed and not survived.not_run and not survived.checks


def test_on_fewer_real_gpus_than_ranks_the_batch_leaves_the_gpu_backend_out(monkeypatch: pytest.MonkeyPatch,
                                                                           capsys: pytest.CaptureFixture) -> None:
    """Seen on one H200: four NCCL ranks on one GPU fail every gpu case with InvalidUsage.
    The batch then runs the other backends, and says why gpu is not among them."""
    import argparse

    import conformance.cli as cli

    assert cli.gpus_short() == ""  # the simulator here: no bound on the ranks
    started: list[list[str]] = []
    monkeypatch.setattr(cli, "why_not", lambda: "")
    monkeypatch.setattr(cli, "SuiteBatch", lambda backends, seed: started.append(list(backends)) or "batch")
    monkeypatch.setattr(cli, "gpus_short", lambda: "1 GPU here")
    args = argparse.Namespace(no_mpi=False, programs=[], no_corpus=False, backend=None, seed=0)
    assert cli._batch(args, None, ["global", "spmd", "gpu"]) == "batch" and started == [["spmd"]]
    assert "leaves out the gpu backend: 1 GPU here" in capsys.readouterr().out
    assert cli._batch(argparse.Namespace(**{**vars(args), "backend": ["gpu"]}), None, ["gpu"]) is None
    assert cli._batch_state(args, None, None, "") == "no backend left for it: the gpu backend's 1 GPU here"
    monkeypatch.setattr(cli, "gpus_short", lambda: "")
    assert cli._batch(args, None, ["global", "spmd", "gpu"]) == "batch" and started[-1] == ["spmd", "gpu"]
