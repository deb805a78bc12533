"""The mutant table: run cases under each mutant and record which checks kill it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rich import box
from rich.table import Table

from conformance.cases import Case
from conformance.check import check_backend, reference_of
from conformance.compare import CHECKS
from conformance.mpi_batch import RANKS, hunt_under_mpi
from conformance.mutants import MUTANTS, Mutant
from conformance.report import plain
from refir.errors import RefirError
from refir.lowering.lower import lower
from refir.running.bindings import devices_needed
from refir.world.ranks import mpi_world


@dataclass
class Kill:
    mutant: Mutant
    checks: Counter = field(default_factory=Counter)  # check -> cases it failed
    first: str = ""  # the first case that killed it, and how
    not_run: str = ""  # why it could not be tried here

    @property
    def killed(self) -> bool:
        return self.checks[self.mutant.by] > 0


def _reaches(case: Case, needs: tuple[type, ...], kinds: dict[int, tuple[type, ...]]) -> bool:
    """Whether the case's lowered program has one of the ops (any, if none named);
    `kinds`: the op types of each case's lowered steps, by id(case), lowered once a hunt."""
    if not needs:
        return True
    if id(case) not in kinds:
        kinds[id(case)] = tuple({type(s.op) for s in lower(case.checked).steps})
    return any(issubclass(k, needs) for k in kinds[id(case)])


def _not_here(m: Mutant, backends: list[str]) -> str:
    world = mpi_world()
    if m.backend not in backends:
        return f"the {m.backend} backend is not available"
    if world is not None and m.transport == "in-process":
        return "it breaks the in-process transport, which an MPI launch does not use"
    if world is not None and m.backend != "spmd":
        return f"a {m.backend} kernel bug: the run in one process tries it; here every rank would only repeat it"
    return ""


def hunt(cases: list[Case], backend: str = "spmd", mutants: list[Mutant] | None = None,
         backends: tuple[str, ...] = ("spmd", "gpu"), until_killed: bool = False) -> list[Kill]:
    """Every mutant against every case that reaches what it breaks, on the
    backend it breaks (`backend` stands for "spmd"). References are computed
    before any mutant is in place, so a mutant cannot corrupt its own
    yardstick, except for a mutant of the impls the reference shares (its
    reference is made with it in place: the expect lines judge it). Mutants
    of the MPI transport, in a plain run, go to a small mpiexec batch
    (conformance/mpi_batch.py). With `until_killed` a mutant stops at the
    first case that kills it (a quicker yes or no: its counts cover only the
    cases run; under MPI every rank stops alike, the verdicts being agreed)."""
    world = mpi_world()
    refs = []
    for c in cases:
        if world is not None and devices_needed(c.checked) > world.size:
            continue
        try:
            refs.append((c, reference_of(c)))
        except RefirError:
            continue  # a case that cannot run at all is the suite's failure to report, not a kill
    chosen = mutants if mutants is not None else MUTANTS
    kills = [Kill(m, not_run=_not_here(m, list(backends))) for m in chosen]
    batch = [k for k in kills if world is None and k.mutant.transport == "mpi" and not k.not_run]
    kinds: dict[int, tuple[type, ...]] = {}
    for kill in kills:
        if kill.not_run or kill in batch:
            continue
        m = kill.mutant
        reached = [(case, ref) for case, ref in refs if _reaches(case, m.needs, kinds)]  # lowered without the mutant
        with m.inject():
            for case, ref in reached:
                if m.reference:  # the reference itself is wrong: only the expect lines can tell
                    try:
                        ref = reference_of(case)
                    except RefirError:
                        continue
                problems = check_backend(case, backend if m.backend == "spmd" else m.backend, ref)
                kill.checks.update(set(p.check for p in problems))
                meant = [p for p in problems if p.check == m.by]
                if meant and not kill.first:
                    kill.first = f"{case.name}: {meant[0]}"
                if meant and until_killed:
                    break
    if batch:
        _from_mpi_batch(batch, until_killed)
    return kills


def _from_mpi_batch(kills: list[Kill], until_killed: bool) -> None:
    got = hunt_under_mpi([k.mutant.name for k in kills], until_killed)
    for k in kills:
        if isinstance(got, str):
            k.not_run = f"an MPI transport bug, and no MPI batch ran: {got}"
        elif k.mutant.name in got:
            k.checks.update(got[k.mutant.name]["checks"])
            k.first = f"under mpiexec -n {RANKS}: {got[k.mutant.name]['first']}"
        else:
            k.not_run = "the MPI batch did not report it"


def as_json(kills: list[Kill]) -> dict[str, dict]:
    return {k.mutant.name: {"checks": dict(k.checks), "first": k.first} for k in kills if not k.not_run}


def table(kills: list[Kill]) -> str:
    out = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name in ("mutant", "killed by", "all checks that fail (cases)", "bug"):
        out.add_column(name)
    for k in kills:
        by = k.mutant.by if k.killed else f"not run: {k.not_run}" if k.not_run else "SURVIVED"
        order = sorted(k.checks, key=lambda c: (-k.checks[c], list(CHECKS).index(c)))
        out.add_row(k.mutant.name, by, ", ".join(f"{c} {k.checks[c]}" for c in order) or "-", k.mutant.bug)
    alive = [k.mutant.name for k in kills if not k.killed and not k.not_run]
    skipped = [k.mutant.name for k in kills if k.not_run]
    return plain(out) + "\n\n" + (f"{len(kills)} mutants, {len(kills) - len(alive) - len(skipped)} killed"
                                   + (f"; not run here: {', '.join(skipped)}" if skipped else "")
                                   + (f"; SURVIVED: {', '.join(alive)}" if alive else ""))
