"""A failing case, written down so that one command replays it.

A failure leaves three files in the save directory:

    NAME.rir          the program, its `# bind:` and `# data:` lines, and
                      `# expect:` lines that load the global reference's results
    NAME.npz          its global inputs, by parameter name
    NAME.expect.npz   the global reference's results

`python -m refir run NAME.rir --inputs NAME.npz --backend B` replays a wrong
value (the expect lines fail). A failure that only the suite can see (a wrong
stride, a write to an input, a segment that cannot run alone, a value that
depends on the input's strides) is replayed by `python -m refir conform
NAME.rir --backend B`, which rebuilds the very inputs from the `# data:` line.
The command printed is one that was checked to reproduce the failure.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import numpy as np

import refir
from conformance.cases import Case
from conformance.check import Outcome, Reference
from refir.checks.expect_lines import check_expects
from refir.ir.program import Expect
from refir.running.inputs import as_bf16
from refir.text.printer import print_program
from refir.world.ranks import mpi_world


def mpi_prefix() -> str:
    world = mpi_world()
    return f"mpiexec -n {world.size} " if world is not None else ""


def conform_command(path: Path, backend: str) -> str:
    return f"{mpi_prefix()}python -m refir conform {_shown(path)} --backend {backend}"


def save(outcome: Outcome, ref: Reference | None, directory: Path, note: str = "") -> tuple[Case, str]:
    """Write the failing case; return it as read back from its file, and the
    command that replays it."""
    case, backend = outcome.case, outcome.backend
    base = directory / f"{case.label}-{re.sub(r'[^A-Za-z0-9]+', '_', backend.split('.')[-1])}"
    rir, npz, expected = Path(f"{base}.rir"), Path(f"{base}.npz"), Path(f"{base}.expect.npz")
    results = case.checked.func.results
    expects = tuple(Expect(r, f"np.load({str(_shown(expected))!r})[{r!r}]") for r in results) if ref else ()
    used = {t.mesh for t in case.checked.types.values()}
    program = replace(case.program, meshes=tuple(m for m in case.program.meshes if m in used),
                      expects=expects, file=str(rir))
    header = [f"# {line}" for line in [
        f"A case refir conform generated, on which {backend} fails [{', '.join(outcome.checks)}].",
        *([note] if note else []), *(str(p) for p in outcome.problems[:3])]]
    bind = " ".join(f"{k}={v}" for k, v in sorted(case.bindings.items()))
    text = "\n".join(header) + "\n" + (f"# bind: {bind}\n" if bind else "") + f"# data: {case.data.to_json()}\n\n"
    world = mpi_world()
    if world is None or world.is_root:
        directory.mkdir(parents=True, exist_ok=True)
        rir.write_text(text + print_program(program))
        inputs = case.inputs()
        np.savez(npz, **{k: np.ascontiguousarray(v) for k, v in inputs.items()})
        if ref is not None:
            np.savez(expected, **{r: ref.values[r] for r in results})
    if world is not None:
        from refir.world.mpi_job import barrier

        barrier(world.comm)  # every rank reads the files back
    saved = replace(case, program=refir.load(rir), path=rir)
    run = f"{mpi_prefix()}python -m refir run {_shown(rir)} --inputs {_shown(npz)} --backend {backend}"
    return saved, run if replays_with_run(saved, npz, backend) else conform_command(rir, backend)


def replays_with_run(case: Case, npz: Path, backend: str) -> bool:
    """Whether `refir run --inputs` shows the failure: it raises or an expect line fails."""
    inputs = as_bf16(case.checked, dict(np.load(npz)))  # as `refir run --inputs` reads them
    try:
        result = refir.run(case.program, inputs, backend=backend)
        return bool(check_expects(case.program, inputs, result.outputs))
    except Exception:
        return True


def _shown(path: Path) -> Path:
    """The path as the user will type it: relative to here when it is below here."""
    try:
        return Path(os.path.relpath(path.resolve(), Path.cwd())) if path.resolve().is_relative_to(Path.cwd()) \
            else path.resolve()
    except ValueError:
        return path
