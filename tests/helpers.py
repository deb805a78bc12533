"""Helpers for tests: the shared examples, and launching mpiexec."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# CI checks the project out beside ../shared; REFIR_SHARED points elsewhere.
SHARED = Path(os.environ.get("REFIR_SHARED", ROOT.parent / "shared"))
EXAMPLES = sorted((SHARED / "examples").glob("*.rir"))


def mpiexec() -> str:
    """The mpiexec next to this Python (the mpich wheel puts it in the venv)."""
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else "mpiexec"


def run_mpi(n: int, args: list[str], timeout: float = 120, env: dict[str, str] | None = None,
            cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`mpiexec -n N python ARGS`, bounded by MPIEXEC_TIMEOUT and a wall-clock timeout."""
    full_env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "MPIEXEC_TIMEOUT": str(int(timeout)),
                "PYTHONUNBUFFERED": "", **(env or {})}
    full_env.pop("PYTHONUNBUFFERED")
    cmd = [mpiexec(), "-n", str(n), sys.executable, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30, env=full_env, cwd=cwd)
