"""A small batch under `mpiexec -n 4`, for the mutants of the MPI transport.

In one process the MPI transport never runs, so its bugs cannot show. When an
mpiexec is at hand (mpi4py's MPICH wheel puts one beside the interpreter), the
mutant table launches these few corpus programs, chosen for what they reach,
under a rank per process with the MPI mutants in place, and reads back which
checks killed each.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from conformance.cases import CORPUS

RANKS = 4
BATCH = (
    "broadcast_replicated_mesh",  # a broadcast whose root (device 1) is not world rank 0 of its team
    "allgather_inner_axis",  # allgathers along an inner axis: packing with that axis first matters
    "scatter_layouts",  # a scatter along an inner axis
)


def mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def why_not() -> str:
    """Why this machine cannot run the batch, or ''."""
    if mpiexec() is None:
        return "no mpiexec on PATH"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed"
    return ""


def hunt_under_mpi(names: list[str], timeout: float = 240) -> dict[str, dict] | str:
    """{mutant: {"checks": {check: cases}, "first": ...}} from an mpiexec run of
    BATCH with only the named mutants, or why there is none."""
    reason = why_not()
    if reason:
        return reason
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "kills.json"
        cmd = [mpiexec() or "mpiexec", "-n", str(RANKS), sys.executable, "-m", "refir", "conform", "--mutants",
               "--cases", "0", "--kills-json", str(out), *(f"--mutant={n}" for n in names),
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
