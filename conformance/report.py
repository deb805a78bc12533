"""What the suite prints and writes: a progress bar, the summary table, JUnit XML."""

from __future__ import annotations

import io
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from rich import box, progress
from rich.console import Console
from rich.table import Table

from conformance.check import Outcome
from refir.world.ranks import World

GROUPS = ("corpus", "examples", "files", "generated", "mpi")  # mpi: the default run's batch under mpiexec
SHOWN = 20  # failures listed in full


class Progress:
    """A rich progress bar on stderr, from rank 0, when stderr is a terminal;
    with `verbose`, a plain log line per case instead (for CI logs)."""

    def __init__(self, total: int, world: World | None, verbose: bool = False) -> None:
        self.total = total
        self.done = 0
        root = world is None or world.is_root
        self.verbose = root and verbose
        self.start = time.monotonic()
        self.bar: progress.Progress | None = None
        if root and sys.stderr.isatty() and not verbose:
            self.bar = progress.Progress(
                progress.BarColumn(), progress.MofNCompleteColumn(), progress.TimeElapsedColumn(),
                progress.TextColumn("{task.description}", markup=False), console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task("", total=total)
            self.bar.start()

    def step(self, label: str) -> None:
        self.done += 1
        if self.verbose:
            sys.stderr.write(f"[{time.monotonic() - self.start:7.1f} s] {self.done}/{self.total} {label}\n")
            sys.stderr.flush()
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, description=label[:48])

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def plain(renderable: object, width: int = 160) -> str:
    """A rich renderable as plain text: no colour, no trailing blanks."""
    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False, markup=False)
    console.print(renderable)
    return "\n".join(line.rstrip() for line in console.file.getvalue().rstrip("\n").splitlines())


def summary(outcomes: list[Outcome], backends: list[str], where: str, seconds: float, broken: str = "") -> str:
    """Cases by backends (passed of run, and skips), then every failure with
    the command that replays it; `broken`: why the MPI batch gave nothing."""
    groups = [g for g in GROUPS if any(o.case.group == g for o in outcomes)]
    count = {g: len({o.case.name for o in outcomes if o.case.group == g}) for g in groups}
    head = ", ".join(f"{count[g]} {g}" for g in groups)
    lines = [f"refir conform: {sum(count.values())} cases ({head}) on {where}, {seconds:.1f} s", ""]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("")
    for b in backends:
        table.add_column(b, justify="right")
    for g in groups + ["total"]:
        row = []
        for b in backends:
            mine = [o for o in outcomes if o.backend == b and g in ("total", o.case.group)]
            ran = [o for o in mine if o.status != "skip"]
            skipped = len(mine) - len(ran)
            row.append("-" if not mine else f"{sum(o.status == 'pass' for o in ran)}/{len(ran)}"
                       + (f" ({skipped} skip)" if skipped else ""))
        table.add_row(g, *row, end_section=bool(groups) and g == groups[-1])
    lines.append(plain(table))
    failed = [o for o in outcomes if o.status == "fail"]
    if failed:
        lines += ["", f"{len(failed)} failure{'s' * (len(failed) > 1)}:"]
        for o in failed[:SHOWN]:
            lines.append(f"- {o.case.name} on {o.backend} [{', '.join(o.checks)}]")
            lines += [f"    {p}" for p in o.problems[:4]]
            if o.replay:
                lines.append(f"    replay: {o.replay}")
        if len(failed) > SHOWN:
            lines.append(f"... and {len(failed) - SHOWN} more (all of them in the --junit report)")
    if broken:
        lines += ["", broken]
    skipped = sorted({o.note for o in outcomes if o.status == "skip"})
    if skipped:
        lines += ["", "skipped: " + "; ".join(skipped)]
    lines += ["", "FAILED" if failed or broken else "all backends agree"]
    return "\n".join(lines)


def not_tested(backends: list[str], world: World | None, batch: str = "") -> str:
    missing = untested(backends, world, batch)
    return "\n".join(["not tested by this run:", *(f"- {m}" for m in missing)]) if missing else ""


def untested(backends: list[str], world: World | None, batch: str = "") -> list[str]:
    """What this run did not exercise, and the command that does; `batch`:
    what became of the MPI batch ("ran", "failed: ...", or why it did not run)."""
    from conformance.mpi_batch import RANKS, SUITE, mpiexec, shown

    out = []
    if world is None:
        launcher, python = shown(mpiexec() or "mpiexec"), shown(sys.executable)
        every = f"run `{launcher} -n {RANKS} {python} -m refir`"
        if batch == "ran":
            out.append(f"the MPI transport beyond the mpi row ({len(SUITE)} corpus programs, one rank per process): "
                       f"{every} for every case")
        else:
            why = "it failed" if batch.startswith("failed") else batch or "it did not run"
            out.append(f"the MPI transport (one rank per process; the MPI batch: {why}): {every}")
    if "gpu" not in backends:
        try:
            import gpu_backend.backend  # noqa: F401
        except ImportError as exc:
            out.append(f"the gpu backend (it does not import here: {exc}; numba is a dependency of refir: "
                       "reinstall it, pip install -e .)")
        else:
            out.append("the gpu backend (--backend left it out): run `python -m refir conform --backend gpu`")
    else:
        from gpu_backend.device import SIMULATED, THREADS

        if SIMULATED:
            out.append(f"a real GPU: the gpu backend ran on numba's CUDA simulator ({THREADS}-thread blocks, "
                       "no chunked reductions, no NCCL); on a CUDA machine run `NUMBA_ENABLE_CUDASIM=0 python -m "
                       "refir conform --backend gpu` and `mpiexec -n 2 ...` (gpu_backend/DEVICE.md)")
    return out


def write_junit(path: Path, outcomes: list[Outcome], seconds: float) -> None:
    """One testcase per case and backend, classname `conform.<backend>.<group>`."""
    suite = ET.Element("testsuite", name="refir-conform", tests=str(len(outcomes)),
                       failures=str(sum(o.status == "fail" for o in outcomes)),
                       skipped=str(sum(o.status == "skip" for o in outcomes)), time=f"{seconds:.3f}")
    for o in outcomes:
        case = ET.SubElement(suite, "testcase", classname=f"conform.{o.backend}.{o.case.group}", name=o.case.name)
        if o.status == "fail":
            failure = ET.SubElement(case, "failure", message=", ".join(o.checks))
            failure.text = "\n".join(map(str, o.problems)) + (f"\nreplay: {o.replay}" if o.replay else "")
        elif o.status == "skip":
            ET.SubElement(case, "skipped", message=o.note)
    root = ET.Element("testsuites")
    root.append(suite)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
