"""The mutant table: run cases under each mutant and record which checks kill it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rich import box
from rich.table import Table

from conformance.cases import Case
from conformance.check import check_backend, reference_of
from conformance.compare import CHECKS
from conformance.mutants import MUTANTS, Mutant
from conformance.report import plain
from refir.bindings import devices_needed
from refir.errors import RefirError
from refir.world import mpi_world


@dataclass
class Kill:
    mutant: Mutant
    checks: Counter = field(default_factory=Counter)  # check -> cases it failed
    first: str = ""  # the first case that killed it, and how

    @property
    def killed(self) -> bool:
        return self.checks[self.mutant.by] > 0


def hunt(cases: list[Case], backend: str = "spmd", mutants: list[Mutant] | None = None) -> list[Kill]:
    """Every mutant against every case. References are computed before any
    mutant is in place, so a mutant cannot corrupt its own yardstick."""
    world = mpi_world()
    refs = []
    for c in cases:
        if world is not None and devices_needed(c.checked) > world.size:
            continue
        try:
            refs.append((c, reference_of(c)))
        except RefirError:
            continue  # a case that cannot run at all is the suite's failure to report, not a kill
    kills = []
    for m in mutants or MUTANTS:
        kill = Kill(m)
        with m.inject():
            for case, ref in refs:
                problems = check_backend(case, backend, ref)
                kill.checks.update(set(p.check for p in problems))
                meant = [p for p in problems if p.check == m.by]
                if meant and not kill.first:
                    kill.first = f"{case.name}: {meant[0]}"
        kills.append(kill)
    return kills


def table(kills: list[Kill]) -> str:
    out = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name in ("mutant", "killed by", "all checks that fail (cases)", "bug"):
        out.add_column(name)
    for k in kills:
        by = k.mutant.by if k.killed else "SURVIVED"
        order = sorted(k.checks, key=lambda c: (-k.checks[c], list(CHECKS).index(c)))
        out.add_row(k.mutant.name, by, ", ".join(f"{c} {k.checks[c]}" for c in order) or "-", k.mutant.bug)
    alive = [k.mutant.name for k in kills if not k.killed]
    return plain(out) + "\n\n" + (f"{len(kills)} mutants, {len(kills) - len(alive)} killed"
                                   + (f"; SURVIVED: {', '.join(alive)}" if alive else ""))
