"""refir: an exact reference for distributed tensor programs.

    prog = refir.load("examples/pipeline.rir")  # the examples/ folder of the repository
    result = refir.run(prog, {"x": x}, backend="spmd")   # x: float32 of shape (N, 8)
    result.outputs["y"]          # the global array
    result.shards["y"][2]        # device 2's buffer, strides as laid out
    refir.visualize(prog, "y")   # how y lies over the mesh: text, and a drawing in a notebook
"""

from __future__ import annotations

import sys

from refir.checks.verifier import verify
from refir.errors import InputError, MismatchError, OtherRankError, ParseError, RefirError, RunError, VerifyError
from refir.frontends.nvfuser import from_nvfuser
from refir.ir.program import Program
from refir.running.runner import RunResult, run
from refir.text.load import load
from refir.text.parser import parse
from refir.text.printer import print_program

__all__ = [
    "InputError", "MismatchError", "OtherRankError", "ParseError", "Picture", "Program", "RefirError", "RunError",
    "RunResult", "VerifyError", "close", "from_nvfuser", "load", "parse", "print_program", "run", "verify",
    "visualize", "visualize_placement",
]
_PICTURES = ("Picture", "visualize", "visualize_placement")  # refir.explain.visual, imported when first asked for


def __getattr__(name: str) -> object:
    if name in _PICTURES:
        from refir.explain import visual

        return getattr(visual, name)
    raise AttributeError(f"module 'refir' has no attribute {name!r}")


def close() -> None:
    """Free the communicators (MPI's, NCCL's) that runs under MPI keep for the
    life of the process; every rank calls it. A later run makes new ones, and
    exit frees them anyway. Without MPI there is nothing to free."""
    mpi = sys.modules.get("refir.world.mpi_job")
    if mpi is not None:
        mpi.COMMS.close()
