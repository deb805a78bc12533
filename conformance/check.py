"""One case on one backend: run it whole, then segment by segment, and compare.

The whole run gives the backend every input and every symbol, as refir.run
does. The segmented run hands it one segment at a time, as a program of its
own whose inputs are that segment's inputs and whose only symbols are that
segment's scalars, chaining the backend's own outputs: a backend that needs
anything else (a symbol only a reduced axis carried, a buffer of an earlier
segment) fails it. Under MPI every rank runs the same checks and agrees on the
verdict before going on, so all ranks take the same path.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from conformance.bounds import reference
from conformance.cases import Case
from conformance.compare import Problem, assemble, layout_problems, sharing_problems, value_problems
from conformance.data import changed, snapshot
from interp.global_eval import eval_global
from refir.checks.expect_lines import check_expects
from refir.errors import RefirError
from refir.ir.program import Param
from refir.lowering.lower import Lowered, Segment, lower
from refir.running.backends import backend_named, backend_world, resolve_world
from refir.running.bindings import bind_inputs, devices_needed
from refir.running.gather_outputs import share_shards
from refir.running.shard_inputs import shard_inputs
from refir.world.backend_types import Backend, Shards
from refir.world.ranks import World, mpi_world


@dataclass(frozen=True)
class Reference:
    """Global values and error bounds of every value of the case's function."""

    values: dict[str, np.ndarray]
    bounds: dict[str, np.ndarray]


@dataclass(frozen=True)
class Outcome:
    case: Case
    backend: str
    status: str  # pass, fail or skip
    problems: tuple[Problem, ...] = ()
    note: str = ""
    replay: str = ""  # a command that shows the failure again

    @property
    def checks(self) -> list[str]:
        return list(dict.fromkeys(p.check for p in self.problems))


def reference_of(case: Case) -> Reference:
    inputs = case.inputs()
    bind_inputs(case.checked, inputs)  # the checks refir.run makes: a bad case is an error of its own
    with quiet():
        return Reference(*reference(case.checked, inputs, case.bindings))


def check_case(case: Case, backends: list[str], ref: Reference | None = None) -> list[Outcome]:
    world = mpi_world()
    need = devices_needed(case.checked)
    if world is not None and need > world.size:
        note = f"{case.label} needs {need} ranks, the world has {world.size}"
        return [Outcome(case, b, "skip", note=note) for b in backends]
    try:
        ref = ref or reference_of(case)
    except Exception as exc:
        bad = (Problem("error", f"the global reference fails: {describe(exc)}"),)
        return [Outcome(case, b, "fail", bad) for b in backends]
    out = []
    for b in backends:
        problems = check_backend(case, b, ref)
        out.append(Outcome(case, b, "fail" if problems else "pass", tuple(problems)))
    return out


def check_backend(case: Case, name: str, ref: Reference) -> list[Problem]:
    with quiet():
        return _check_backend(case, name, ref)


@contextmanager
def quiet() -> Iterator[None]:
    """NaN and overflow are test data here, not news worth a warning."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _check_backend(case: Case, name: str, ref: Reference) -> list[Problem]:
    if name == "global":
        return _check_global(case, ref)
    checked = case.checked
    run = backend_named(name)
    world = resolve_world(checked, None)
    lowered = lower(checked)
    inputs = case.inputs()
    before = snapshot(inputs)
    handed = shard_inputs(checked, inputs, world.hosted)
    local: list[Problem] = []
    shards: Shards = {}
    try:
        shards = run(lowered, handed, dict(case.bindings), backend_world(world))
    except Exception as exc:
        local.append(Problem("error", describe(exc)))
    returned = {r: mine(shards.get(r, {}), world) for r in checked.func.results}
    for r in checked.func.results:
        local += layout_problems(r, checked.types[r], returned[r], case.bindings)
    local += sharing_problems(returned, {p: [inputs[p], *handed[p].values()] for p in handed})
    local += [Problem("inputs", f"the backend changed input {k!r}") for k in changed(inputs, before)]
    problems = agree(world, local)
    if any(p.check == "error" for p in problems):
        return problems
    outputs, more = _gathered(case, shards, world, ref, "values")
    problems += more
    if len(outputs) == len(checked.func.results):
        problems += [Problem("expect", f) for f in _expects(case, outputs)]
    return _unique(problems + segmented(case, run, lowered, world, ref))


def segmented(case: Case, run: Backend, lowered: Lowered, world: World, ref: Reference) -> list[Problem]:
    """The program segment by segment, each from its own inputs only."""
    env: Shards = shard_inputs(case.checked, case.inputs(), world.hosted)
    for seg in lowered.segments:
        local: list[Problem] = []
        what = f"segment {seg.index} ({seg.kind})"
        got: Shards = {}
        try:
            got = run(isolate(lowered, seg), {n: env[n] for n in seg.inputs},
                      {s: case.bindings[s] for s in seg.symbols}, backend_world(world))
        except Exception as exc:
            local.append(Problem("isolation", f"{what} run alone fails: {describe(exc)}"))
        for name in seg.outputs:
            t = lowered.types[name]
            missing = [d for d in world.hosted if d in t.mesh and d not in got.get(name, {})]
            if missing and not local:
                local.append(Problem("isolation", f"{what} run alone returns no {name} for device {missing[0]}"))
            local += [replace(p, message=f"{what}: {p.message}")
                      for p in layout_problems(name, t, mine(got.get(name, {}), world), case.bindings)]
        returned = {name: mine(got.get(name, {}), world) for name in seg.outputs}
        local += [replace(p, message=f"{what}: {p.message}")
                  for p in sharing_problems(returned, {n: list(env[n].values()) for n in seg.inputs})]
        env.update({name: got.get(name, {}) for name in seg.outputs})
        problems = agree(world, local)
        if problems:
            return problems
    results = {r: env.get(lowered.source(r), {}) for r in case.checked.func.results}
    _, problems = _gathered(case, results, world, ref, "isolation")
    return [replace(p, message=f"run segment by segment: {p.message}") for p in problems]


def isolate(lowered: Lowered, seg: Segment) -> Lowered:
    """A segment as a program of its own: its inputs are the parameters, its
    outputs the results, and nothing else of the original is reachable."""
    checked = lowered.checked
    func = replace(checked.func, params=tuple(Param(n, lowered.types[n]) for n in seg.inputs), results=seg.outputs)
    return replace(lowered, checked=replace(checked, func=func), steps=seg.steps, segments=(seg,))


def _gathered(case: Case, shards: Shards, world: World, ref: Reference,
              check: str) -> tuple[dict[str, np.ndarray], list[Problem]]:
    """Whole results, compared with the reference; replicas compared as well."""
    checked = case.checked
    results = {r: shards.get(r, {}) for r in checked.func.results}
    if world.comm is not None:
        results = share_shards(checked, results, world)
    outputs, problems = {}, []
    for r in checked.func.results:
        whole, bad = assemble(r, checked.types[r], results[r], case.bindings)
        problems += [p for p in bad if p.check != "error" or check == "values"]
        if whole is not None:
            outputs[r] = whole
            problems += value_problems(r, whole, ref.values[r], ref.bounds[r], check)
    return outputs, problems


def _check_global(case: Case, ref: Reference) -> list[Problem]:
    inputs = case.inputs()
    before = snapshot(inputs)
    try:
        outputs = eval_global(case.checked, inputs, case.bindings)
    except Exception as exc:
        return [Problem("error", describe(exc))]
    problems = [p for r in case.checked.func.results
                for p in value_problems(r, np.asarray(outputs[r]), ref.values[r], ref.bounds[r])]
    problems += [Problem("inputs", f"the backend changed input {k!r}") for k in changed(inputs, before)]
    return problems + [Problem("expect", f) for f in _expects(case, outputs)]


def _expects(case: Case, outputs: dict[str, np.ndarray]) -> list[str]:
    try:
        return check_expects(case.program, case.inputs(), outputs, symbols=case.bindings, checked=case.checked)
    except RefirError as exc:
        return [str(exc)]


def mine(buffers: dict[int, np.ndarray], world: World) -> dict[int, np.ndarray]:
    return {d: b for d, b in buffers.items() if d in world.hosted}


def agree(world: World, local: list[Problem]) -> list[Problem]:
    """Every rank's problems, on every rank (the union, in rank order). After
    a failure every rank frees its communicators: a run that failed on some
    ranks only may have left messages behind, which must not reach the next."""
    if world.comm is None:
        return _unique(local)
    from refir.world.mpi_job import COMMS, allgather_obj

    problems = _unique([p for part in allgather_obj(world.comm, local, "every rank's verdict") for p in part])
    if problems:
        COMMS.close()
    return problems


def describe(exc: BaseException) -> str:
    """The first lines of an error: what failed and where."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join(lines[:2]) if lines else ""
    return text if isinstance(exc, RefirError) else f"{type(exc).__name__}: {text}"


def _unique(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))
