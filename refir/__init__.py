"""refir: an exact reference for distributed tensor programs.

    prog = refir.load("examples/layouts.rir")
    result = refir.run(prog, {"x": x, "y": y}, backend="spmd")
    result.outputs["g"]          # the global array
    result.shards["g"][1]        # device 1's buffer, strides as laid out
"""

from __future__ import annotations

import sys
from pathlib import Path

from refir.errors import InputError, MismatchError, OtherRankError, ParseError, RefirError, RunError, VerifyError
from refir.frontends.nvfuser import from_nvfuser  # noqa: E402,I001 (after the core it builds on)
from refir.parser import parse
from refir.printer import print_program
from refir.program import Program
from refir.runner import RunResult, run
from refir.verify import verify

__all__ = [
    "InputError", "MismatchError", "OtherRankError", "ParseError", "Program", "RefirError", "RunError", "RunResult",
    "VerifyError", "close", "from_nvfuser", "load", "parse", "print_program", "run", "verify",
]


def load(source: str | Path) -> Program:
    """Parse a program from a file path or from program text."""
    if isinstance(source, Path) or ("\n" not in source and source.endswith(".rir")):
        path = Path(source)
        try:
            text = path.read_text()
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror}") from exc
        return parse(text, str(path))
    return parse(source)


def close() -> None:
    """Free the communicators (MPI's, NCCL's) that runs under MPI keep for the
    life of the process; every rank calls it. A later run makes new ones, and
    exit frees them anyway. Without MPI there is nothing to free."""
    mpi = sys.modules.get("refir.mpi")
    if mpi is not None:
        mpi.COMMS.close()
