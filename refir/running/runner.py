"""`refir.run`: bind and check inputs, lower, run on a backend, gather results.

Inputs and outputs are global arrays. Each device is handed a view of the
caller's array (any strides), or a copy dense in the declared layout where the
parameter type has one. Outputs come back whole, and per device exactly as the
backend laid them out.

The steps live in modules of their own: refir.running.run_setup (everything before the
backend: refir.running.prepare verifies, lowers and binds, refir.running.backends picks the
world, refir.running.shard_inputs cuts the inputs into blocks, refir.world.exchange moves them
between MPI ranks), then the backend, then refir.running.gather_outputs and
refir.running.assemble_outputs (results to whole outputs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from refir.checks.footprint import RunKind
from refir.checks.verifier import Checked
from refir.errors import InputError, RefirError
from refir.ir.program import Program
from refir.lowering.lower import Lowered
from refir.running.backends import backend_named, backend_world
from refir.running.gather_outputs import gather_outputs, share_kept
from refir.running.run_setup import set_up
from refir.world.backend_types import Shards
from refir.world.ranks import mpi_world


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]
    shards: Shards = field(default_factory=dict)
    backend: str = "global"
    lowered: Lowered | None = None
    bindings: dict[str, int] = field(default_factory=dict)
    kept: Shards = field(default_factory=dict)  # with keep="all": every value's per-device buffers


def run(program: Program | str, inputs: dict[str, Any], backend: str = "spmd", world: int | None = None,
        func: str | None = None, everywhere: bool = False, keep: str | None = None) -> RunResult:
    """Run `program` on global `inputs`; see RunResult. keep="all" (spmd or gpu)
    keeps every input's and intermediate's per-device buffers in `kept` (on
    gpu, each read back from the device as the step that made it ends).

    Under MPI (one rank per process) rank 0 must be given the inputs; another
    rank given none receives only its devices' blocks from rank 0. Rank 0
    alone gets `outputs` and every device's buffer in `shards` (each other rank
    its own buffers), unless `everywhere` asks for them on every rank."""
    from refir.text.load import load

    if not isinstance(program, Program):
        program = load(program)
    if keep not in (None, "all"):
        raise InputError(f"keep={keep!r}: write keep='all' or leave it out")
    if keep and backend not in ("spmd", "gpu"):
        raise InputError(f"keep='all' needs the spmd or gpu backend, not {backend!r}")
    alone = mpi_world() is None
    kind = RunKind(backend if backend in ("global", "spmd", "gpu") else None, bool(keep), everywhere)
    setup = set_up(program, inputs, backend, world, func, kind)
    checked, bindings, w, lowered, local = setup.checked, setup.bindings, setup.world, setup.lowered, setup.blocks
    if backend == "global":
        if alone:
            from interp.global_eval import eval_global

            return RunResult(eval_global(checked, setup.inputs, bindings), {}, "global", None, bindings)
        return RunResult(_global_on_root(checked, setup.inputs, bindings, everywhere), {}, "global", None, bindings)
    assert w is not None and lowered is not None and local is not None
    kept: Shards = {}
    if keep:
        if backend == "spmd":
            from interp.backend import run_spmd as keeping
        else:
            from gpu_backend.backend import run_gpu as keeping
        shards = keeping(lowered, local, bindings, backend_world(w), keep=kept)
        if w.comm is not None:
            kept = share_kept(kept, w)
    else:
        shards = backend_named(backend)(lowered, local, bindings, backend_world(w))
    outputs, shards = gather_outputs(checked, shards, bindings, w, everywhere)
    return RunResult(outputs, shards, backend, lowered, bindings, kept)


def _global_on_root(checked: Checked, inputs: dict[str, Any], bindings: dict[str, int],
                    everywhere: bool) -> dict[str, np.ndarray]:
    """The global evaluator under MPI: on rank 0 (its results shared if asked)."""
    from interp.global_eval import eval_global
    from refir.world.exchange import share_arrays
    from refir.world.mpi_job import COMMS, root_verdict

    outputs, error = {}, None
    if COMMS.world().rank == 0:
        try:
            outputs = eval_global(checked, inputs, bindings)
        except RefirError as exc:
            error = exc
    root_verdict(COMMS.world(), error, "rank 0 to evaluate the program")
    return share_arrays(outputs, COMMS.world()) if everywhere else outputs
