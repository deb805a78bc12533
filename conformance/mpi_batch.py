"""Small batches under `mpiexec -n 4`: for the default run, and for the
mutants of the MPI transport.

In one process the MPI transport never runs, so its bugs (in refir's
transports, or in a backend under test) cannot show. When an mpiexec is at
hand (mpi4py's MPICH wheel puts one beside the interpreter), the default run
(`python -m refir`, `conform` without programs) also runs SUITE, a few corpus
programs chosen for what they reach, under a rank per process on the same
backends (`SuiteBatch`: started first, so that it runs while the in-process
cases do), and its outcomes join the summary as the `mpi` row; the mutant
table runs BATCH with the MPI mutants in place and reads back which checks
killed each. A batch that fails or runs past its limit (REFIR_MPI_TIMEOUT
seconds, default 60) is one line of the report, never a hang.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conformance.cases import CORPUS, cases_of
from conformance.check import Outcome
from conformance.compare import Problem

RANKS = 4
BATCH = (
    "broadcast_replicated_mesh",  # a broadcast whose root (device 1) is not world rank 0 of its team
    "allgather_inner_axis",  # allgathers along an inner axis: packing with that axis first matters
    "scatter_layouts",  # a scatter along an inner axis
)


# The default run's batch: every collective kind, uneven blocks, strided layouts, 2-D meshes: 10 cases. Its
# ranks' start is most of its time (about 1.8 s of CPU each, 2026-12-01); each program adds 1-3 s of CPU.
SUITE = (
    "comm_every_dtype",  # all nine collectives, of every dtype
    "uneven_allgather",  # blocks of 2, 2, 1, 0 (and empty ones) gathered, into a column-major result
    "uneven_all_to_all",  # uneven pieces exchanged, column-major
    "mesh2d_every_axis",  # allgather, allreduce, reduce_scatter, all_to_all along each axis of a 2x2 mesh, strided
)
BATCH_TIMEOUT_S = 60.0


def mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def shown(path: str) -> str:
    """A path as a user would type it here: relative where it lies below the working directory."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def batch_timeout() -> float:
    """The batch's limit in seconds: REFIR_MPI_TIMEOUT where set (refir.env parses it)."""
    from refir import env

    return env.seconds("REFIR_MPI_TIMEOUT", BATCH_TIMEOUT_S)


def why_not() -> str:
    """Why this machine cannot run the batch, or ''."""
    if mpiexec() is None:
        return "no mpiexec on PATH"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed"
    return ""


def hunt_under_mpi(names: list[str], until_killed: bool = False, timeout: float = 240) -> dict[str, dict] | str:
    """{mutant: {"checks": {check: cases}, "first": ...}} from an mpiexec run of
    BATCH with only the named mutants (`until_killed`: as conformance.teeth.hunt),
    or why there is none."""
    reason = why_not()
    if reason:
        return reason
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "kills.json"
        cmd = [mpiexec() or "mpiexec", "-n", str(RANKS), sys.executable, "-m", "refir", "conform", "--mutants",
               "--cases", "0", "--kills-json", str(out), *(f"--mutant={n}" for n in names),
               *(["--until-killed"] if until_killed else []),
               *(str(CORPUS / f"{f}.rir") for f in BATCH)]
        env = {**os.environ, "MPIEXEC_TIMEOUT": str(int(timeout)), "REFIR_MPI_TIMEOUT": "60"}
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30, env=env)
        except subprocess.TimeoutExpired:
            return f"mpiexec -n {RANKS} ran past {timeout:.0f} s"
        if not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return f"mpiexec -n {RANKS} failed ({done.returncode}): {tail[0]}"
        return json.loads(out.read_text())


class SuiteBatch:
    """SUITE under `mpiexec -n RANKS`, started at once; `outcomes()` waits for
    it and returns what each rank-per-process case gave (as dicts), or one line
    saying why there is nothing."""

    def __init__(self, backends: list[str] | None, seed: int) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.out = Path(self.tmp.name) / "outcomes.json"
        self.timeout = batch_timeout()
        self.files = [CORPUS / f"{f}.rir" for f in SUITE]
        cmd = [mpiexec() or "mpiexec", "-n", str(RANKS), sys.executable, "-m", "refir", "conform", "--cases", "0",
               "--no-mpi", "--seed", str(seed), "--save", str(Path(self.tmp.name) / "failures"),
               "--outcomes-json", str(self.out), *(f"--backend={b}" for b in backends or []),
               *map(str, self.files)]
        # the ranks' own waits give up before the batch's limit, so that a stalled rank says where it was
        env = {**os.environ, "MPIEXEC_TIMEOUT": str(int(self.timeout) + 5),
               "REFIR_MPI_TIMEOUT": str(max(1.0, self.timeout - 10))}
        self.log = open(Path(self.tmp.name) / "log", "w+")  # noqa: SIM115 - read back after the run
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        self.deadline = time.monotonic() + self.timeout  # counted from the start: it runs beside the others

    def outcomes(self) -> list[dict] | str:
        head = f"the MPI batch ({shown(mpiexec() or 'mpiexec')} -n {RANKS})"
        late = f"{head} ran past {self.timeout:.0f} s and was stopped (REFIR_MPI_TIMEOUT sets the limit)"
        try:
            try:
                code = self.proc.wait(timeout=max(0.0, self.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._stop()
                return late
            if not self.out.exists() and time.monotonic() >= self.deadline:
                return late  # mpiexec's own limit (MPIEXEC_TIMEOUT, a little later) ended it meanwhile
            if not self.out.exists():
                self.log.seek(0)
                lines = [ln.strip() for ln in self.log.read().splitlines() if ln.strip()]
                return f"{head} failed (exit {code}): {lines[-1] if lines else 'no output'}"
            return json.loads(self.out.read_text())
        finally:
            self.log.close()
            self.tmp.cleanup()

    def abandon(self) -> None:
        """Stop the batch unread (the run itself failed)."""
        self._stop()
        self.log.close()
        self.tmp.cleanup()

    def _stop(self) -> None:
        """End the mpiexec this batch started, and its ranks (its own process group)."""
        import signal

        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def to_batch(outcomes: list[Outcome]) -> list[dict]:
    """Outcomes as the batch's ranks report them (JSON)."""
    return [{"case": o.case.name, "backend": o.backend, "status": o.status, "note": o.note, "replay": o.replay,
             "problems": [[p.check, p.message] for p in o.problems]} for o in outcomes]


def from_batch(got: list[dict], seed: int) -> list[Outcome]:
    """The batch's outcomes, for the summary: their cases in the `mpi` group,
    their replay commands with the mpiexec found here."""
    cases = {c.name: c for f in SUITE for c in cases_of(CORPUS / f"{f}.rir", "mpi", seed)}
    launcher = shown(mpiexec() or "mpiexec")
    out = []
    for o in got:
        replay = o["replay"]
        if replay.startswith("mpiexec "):
            replay = f"{launcher} {replay.removeprefix('mpiexec ')}"
        out.append(Outcome(cases[o["case"]], o["backend"], o["status"],
                           tuple(Problem(c, m) for c, m in o["problems"]), o["note"], replay))
    return out
