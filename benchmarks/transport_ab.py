"""transport_bench on two checkouts, launches alternating: medians of refir/MPI.

    python -m benchmarks.transport_ab BEFORE_DIR [AFTER_DIR] [--launches 8] [--ranks 4] [-- BENCH_ARGS...]

BEFORE_DIR is a copy of the code before (`git archive COMMIT | tar -x -C DIR`),
AFTER_DIR this checkout by default. Each launch runs `mpiexec -n RANKS python -m
benchmarks.transport_bench --no-bounds BENCH_ARGS` in that directory, with this
checkout's benchmark file (copied into BEFORE_DIR first, so that both sides time
alike) and OMP_NUM_THREADS=1. Launches alternate (before, after, then after,
before), and each pair waits, up to 90 s, for the machine to be at least 70%
idle over a second: on a shared 2-core machine one launch differs from the next
by more than most changes do. Prints, per row, the median over launches of the
best-of-N ratio (lowest-highest) and of refir's best time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# a row of transport_bench's table (an across-nodes row has one more column: over the one-node row)
ROW = re.compile(r"(\D+?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+[\d.]+(?:\s+[\d.]+)?$")
HERE = Path(__file__).resolve().parent


def idle_share(seconds: float = 1.0) -> float:
    """The share of CPU time spent idle over `seconds` (Linux /proc/stat)."""
    def read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return values[3] + values[4], sum(values)

    idle0, total0 = read()
    time.sleep(seconds)
    idle1, total1 = read()
    return (idle1 - idle0) / max(total1 - total0, 1)


def launch(code: Path, bench_args: list[str], ranks: int = 4) -> dict[tuple[str, int], tuple[float, float]]:
    """One launch: per (row, elements), refir/MPI of the best calls and refir's best ms."""
    mpiexec = Path(sys.executable).with_name("mpiexec")
    command = [str(mpiexec), "-n", str(ranks), sys.executable, "-m", "benchmarks.transport_bench", "--no-bounds",
               *bench_args]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(code))
    out = subprocess.run(command, cwd=code, capture_output=True, text=True, env=env, check=True).stdout
    rows = {}
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            rows[(m.group(1).strip(), int(m.group(2)))] = (float(m.group(5)), float(m.group(3)))
    return rows


def alternated(launches: int, sides: dict[str, Path], run: Callable[[Path], dict[Any, Any]]
               ) -> tuple[dict[str, dict[Any, list[Any]]], list[int]]:
    """`run` on each side `launches` times, the order alternating, each pair after
    the machine is quiet (idle_share >= 0.7, waiting 90 s at most): every
    value per side and key, and the seconds waited before each pair."""
    got: dict[str, dict[Any, list[Any]]] = {k: {} for k in sides}
    waits = []
    for i in range(launches):
        start = time.monotonic()
        while idle_share() < 0.7 and time.monotonic() - start < 90:
            pass
        waits.append(round(time.monotonic() - start))
        for name in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
            for key, value in run(sides[name]).items():
                got[name].setdefault(key, []).append(value)
    return got, waits


def main() -> None:
    argv = sys.argv[1:]
    bench_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transport_ab", description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path, nargs="?", default=HERE.parent)
    parser.add_argument("--launches", type=int, default=8)
    parser.add_argument("--ranks", type=int, default=4, help="mpiexec -n (default: %(default)s)")
    args = parser.parse_args(argv)
    shutil.copy(HERE / "transport_bench.py", args.before / "benchmarks" / "transport_bench.py")
    sides = {"before": args.before, "after": args.after}
    got, waits = alternated(args.launches, sides, lambda side: launch(side, bench_args, args.ranks))
    print(f"{args.ranks} ranks, {args.launches} launches each; waited for a quiet machine (s): {waits}")
    print(f"{'row':<46}{'elements':>9}  {'before: ratio (lo-hi), refir ms':<34} after: ratio (lo-hi), refir ms")
    for key in got["after"]:
        cells = []
        for name in sides:
            values = got[name].get(key, [])
            ratios, times = [v[0] for v in values], [v[1] for v in values]
            cells.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) "
                         f"{statistics.median(times):.3f}" if values else "-")
        print(f"{key[0]:<46}{key[1]:>9}  {cells[0]:<34} {cells[1]}")


if __name__ == "__main__":
    main()
