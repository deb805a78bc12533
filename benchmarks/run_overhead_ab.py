"""run_overhead on two checkouts, launches alternating: a small refir.run's median ms.

    python -m benchmarks.run_overhead_ab BEFORE_DIR [AFTER_DIR] [--launches 8] [--ranks 2]

BEFORE_DIR is a copy of the code before (`git archive COMMIT | tar -x -C DIR`),
AFTER_DIR this checkout by default. Each launch runs `python -m
benchmarks.run_overhead` (every rank in one process: 2 and 4) and, with
--ranks N, also `mpiexec -n N python -m benchmarks.run_overhead`, in that
directory, with this checkout's benchmark files (copied into BEFORE_DIR first,
so that both sides time alike), OMP_NUM_THREADS=1 and RUN_SIZES (default
"8,16,8": the seed-2 program at its smallest). Launches alternate (before,
after, then after, before), each pair after waiting, up to 90 s, for a quiet
machine (benchmarks.transport_ab.alternated). Prints, per world and size, the
median over launches of each launch's median ms, with the lowest and highest.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.transport_ab import alternated

HERE = Path(__file__).resolve().parent
WORLD = re.compile(r"^(\d+ ranks[^:]*):")
SIZE = re.compile(r"^\s+(\d+,\d+,\d+): refir ([\d.]+) ms")


def launch(code: Path, ranks: int | None) -> dict[tuple[str, str], float]:
    """One launch: per (world, size), the median ms of a run."""
    command = [sys.executable, "-m", "benchmarks.run_overhead"]
    if ranks:
        command = [str(Path(sys.executable).with_name("mpiexec")), "-n", str(ranks), *command]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(code),
               RUN_SIZES=os.environ.get("RUN_SIZES", "8,16,8"))
    out = subprocess.run(command, cwd=code, capture_output=True, text=True, env=env, check=True).stdout
    got, world = {}, ""
    for line in out.splitlines():
        if m := WORLD.match(line):
            world = m.group(1)
        elif m := SIZE.match(line):
            got[(world, m.group(1))] = float(m.group(2))
    return got


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run_overhead_ab", description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path, nargs="?", default=HERE.parent)
    parser.add_argument("--launches", type=int, default=8)
    parser.add_argument("--ranks", type=int, default=2, help="mpiexec -n (0: no MPI launch; default %(default)s)")
    args = parser.parse_args()
    for name in ("run_overhead.py", "phases.py"):
        shutil.copy(HERE / name, args.before / "benchmarks" / name)
    sides = {"before": args.before, "after": args.after}
    worlds = [None, args.ranks] if args.ranks else [None]
    got, waits = alternated(args.launches, sides,
                            lambda side: {k: ms for ranks in worlds for k, ms in launch(side, ranks).items()})
    print(f"{args.launches} launches each; waited for a quiet machine (s): {waits}")
    print(f"{'world':<32}{'size':>9}  {'before: median ms (lo-hi)':<28} {'after: median ms (lo-hi)':<28} after/before")
    for key in got["after"]:
        cells = []
        for name in sides:
            values = got[name].get(key, [])
            cells.append(f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})" if values else "-")
        ratio = (statistics.median(got["after"][key]) / statistics.median(got["before"][key])
                 if got["before"].get(key) else float("nan"))
        print(f"{key[0]:<32}{key[1]:>9}  {cells[0]:<28} {cells[1]:<28} {ratio:.3f}")


if __name__ == "__main__":
    main()
