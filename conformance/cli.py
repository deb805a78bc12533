"""`python -m refir conform`: run the corpus on every backend and compare."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from conformance.cases import Case, cases_of, corpus_files
from conformance.check import Outcome, available_backends, check_case
from refir.world import mpi_world


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", action="append", help="a backend to check (repeatable; default: all available)")
    p.add_argument("--corpus", action="append", type=Path, help="a directory of .rir programs (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="seed of the drawn inputs")


def _progress(done: int, total: int, label: str) -> None:
    world = mpi_world()
    if (world is None or world.is_root) and sys.stderr.isatty():
        width = 30
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label[:40]:<40}")
        sys.stderr.flush()


def conform(args: argparse.Namespace) -> int:
    world = mpi_world()
    backends = args.backend or available_backends()
    cases: list[Case] = [c for f in corpus_files(args.corpus) for c in cases_of(f, args.seed)]
    outcomes: list[Outcome] = []
    start = time.monotonic()
    for i, case in enumerate(cases):
        _progress(i, len(cases), case.name)
        outcomes += check_case(case, backends)
    _progress(len(cases), len(cases), "done")
    if world is None or world.is_root:
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        sys.stdout.write(summary(outcomes, backends, len(cases), time.monotonic() - start) + "\n")
        sys.stdout.flush()
    return 1 if any(o.status == "fail" for o in outcomes) else 0


def summary(outcomes: list[Outcome], backends: list[str], ncases: int, seconds: float) -> str:
    world = mpi_world()
    where = f"{world.size} MPI ranks" if world else "ranks in one process"
    lines = [f"{ncases} cases, {where}, {seconds:.1f} s", "",
             f"{'backend':<10} {'pass':>5} {'fail':>5} {'skip':>5}"]
    for b in backends:
        mine = [o for o in outcomes if o.backend == b]
        count = {s: sum(o.status == s for o in mine) for s in ("pass", "fail", "skip")}
        lines.append(f"{b:<10} {count['pass']:>5} {count['fail']:>5} {count['skip']:>5}")
    failed = [o for o in outcomes if o.status == "fail"]
    if failed:
        lines += ["", "failures:"]
        for o in failed:
            lines += [f"- {o.case.name} on {o.backend}: {o.message}", f"  replay: {o.case.replay(o.backend)}"]
    skipped = sorted({o.message for o in outcomes if o.status == "skip"})
    if skipped:
        lines += ["", "skipped: " + "; ".join(skipped)]
    return "\n".join(lines)
