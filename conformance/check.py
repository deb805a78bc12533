"""One case on every backend: expect lines, agreement with global, layouts."""

from __future__ import annotations

from dataclasses import dataclass

import refir
from conformance.cases import Case
from refir.bindings import devices_needed
from refir.errors import RefirError
from refir.expect import agrees, check_expects, tolerance
from refir.inputs import draw_inputs
from refir.types import has_layout
from refir.world import mpi_world


@dataclass(frozen=True)
class Outcome:
    case: Case
    backend: str
    status: str  # pass, fail, skip
    message: str = ""


def available_backends() -> list[str]:
    out = ["global", "spmd"]
    try:
        import gpu_backend.backend  # noqa: F401

        out.append("gpu")
    except ImportError:
        pass
    return out


def check_case(case: Case, backends: list[str]) -> list[Outcome]:
    checked = refir.verify(case.program)
    inputs = draw_inputs(checked, case.bindings, case.seed)
    world = mpi_world()
    reference = refir.run(case.program, inputs, backend="global").outputs
    out = []
    for backend in backends:
        if world is not None and devices_needed(checked) > world.size:
            out.append(Outcome(case, backend, "skip", f"{case.path.stem} needs {devices_needed(checked)} ranks"))
            continue
        try:
            problems = _check(case, backend, inputs, reference)
        except RefirError as exc:
            problems = [f"{type(exc).__name__}: {exc}"]
        out.append(Outcome(case, backend, "fail" if problems else "pass", "; ".join(problems)))
    return out


def _check(case: Case, backend: str, inputs: dict, reference: dict) -> list[str]:
    result = refir.run(case.program, inputs, backend=backend)
    problems = check_expects(case.program, inputs, result.outputs)
    checked = refir.verify(case.program)
    for name, want in reference.items():
        got = result.outputs[name]
        if not agrees(got, want, tolerance(got.dtype, 64)):
            problems.append(f"{name} differs from global")
        t = checked.types[name]
        for d, buf in result.shards.get(name, {}).items():
            if not has_layout(buf, t.order):
                problems.append(f"{name} on device {d} has strides {buf.strides}, not dense in order {t.order}")
    return problems


