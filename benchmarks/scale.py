"""Time and peak memory of refir's commands on meshes of 64 to 16,384 devices,
and how each grows (issue 30): check, lower, explain, explain --json and an spmd
run of small blocks, on 1-D and 3-D meshes, of four programs.

    python -m benchmarks.scale                       (64, 256, 1024, 4096, 16384 devices)
    python -m benchmarks.scale --sizes 64,256 --commands check,explain --meshes 3d
    python -m benchmarks.scale --json OUT.json       (and every figure, for a later look)

Each measurement is the public CLI (`python -m refir COMMAND PROG`) in a fresh
process: its CPU seconds (user + system) and peak resident memory are the
child's own (os.wait4's rusage), its wall seconds and the bytes it prints are
shown too. The programs, written to a temporary folder:

  allgather      x sharded -> replicated (one allgather)
  allreduce_add  a sum over the sharded axis (a local sum, an allreduce), plus an input
  reduce_scatter a sum over the sharded axis into a result sharded on another
  all_to_all     the sharded axis moves to another axis

on a 1-D mesh of N devices (every collective over all N) and a 3-D mesh of
N/16 x 4 x 4 (DIDz grows, as data parallelism does; allreduce_add's team is
DIDz's N/16, the others' DIDx's or DIDy's 4). The blocks are small: 2 rows a
device. A run holds what it holds: on the 1-D mesh each device's result of an
allgather, a reduce_scatter's operand and an all_to_all's pieces hold an
element from each of the N, so their data, and a run's cost, grow as N^2; the
run row is measured where the data grow linearly (every 3-D program, the 1-D
allreduce_add) and the others are said as not run. Commands other than run
are given a REFIR_MAX_ELEMENTS of 2^31 (they allocate no element; the 1-D
reduce_scatter and all_to_all of 16,384 devices have 2^29).

The table gives, per command, program and mesh, the CPU seconds and peak MB at
each size, the bytes printed at the largest, and the growth exponent: the
least-squares slope of log(cost) over log(N) (1 is linear; a fixed start-up
cost makes it lower at small N), for CPU and for memory, and the slope of the
last step alone. It exits 1 when any fitted CPU or memory slope is over
--max-slope (1.2): a command that grows faster than linearly in the devices.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = (64, 256, 1024, 4096, 16384)
COMMANDS = ("check", "lower", "explain", "explain --json", "run")
PROGRAMS = ("allgather", "allreduce_add", "reduce_scatter", "all_to_all")
MESHES = ("1d", "3d")
MAX_SLOPE = 1.2


def mesh_line(n: int, kind: str) -> str:
    if kind == "1d":
        return f"mesh m = [{', '.join(map(str, range(n)))}]"
    z = n // 16
    ids = [[[k * 16 + j * 4 + i for i in range(4)] for j in range(4)] for k in range(z)]
    return f"mesh m = {ids}"


def program_text(name: str, n: int, kind: str) -> str:
    """The program `name` on a mesh of `n` devices (`kind`: 1d, or 3d of n/16 x 4 x 4)."""
    if kind == "1d":
        body = {
            "allgather": (f"x: f32[{2 * n}@DIDx, 4]", [f"y: f32[{2 * n}, 4] = set(x)"], "y"),
            "allreduce_add": (f"x: f32[{2 * n}@DIDx, 4], bias: f32[4]",
                              ["s: f32[4] = sum(x, dims=[0])", "t: f32[4] = add(s, bias)"], "t"),
            "reduce_scatter": (f"x: f32[{n}@DIDx, {2 * n}]", [f"r: f32[{2 * n}@DIDx] = sum(x, dims=[0])"], "r"),
            "all_to_all": (f"x: f32[{2 * n}@DIDx, {n}]", [f"y: f32[{2 * n}, {n}@DIDx] = set(x)"], "y"),
        }[name]
    else:
        z = 2 * (n // 16)
        body = {
            "allgather": (f"x: f32[{z}@DIDz, 8@DIDy, 8@DIDx]", [f"y: f32[{z}@DIDz, 8@DIDy, 8] = set(x)"], "y"),
            "allreduce_add": (f"x: f32[{z}@DIDz, 8@DIDy, 8@DIDx], bias: f32[8@DIDy, 8@DIDx]",
                              ["s: f32[8@DIDy, 8@DIDx] = sum(x, dims=[0])", "t: f32[8@DIDy, 8@DIDx] = add(s, bias)"],
                              "t"),
            "reduce_scatter": (f"x: f32[{z}@DIDz, 4@DIDx, 8]", [f"r: f32[{z}@DIDz, 8@DIDx] = sum(x, dims=[1])"],
                               "r"),
            "all_to_all": (f"x: f32[{z}@DIDz, 8@DIDy, 8]", [f"y: f32[{z}@DIDz, 8, 8@DIDy] = set(x)"], "y"),
        }[name]
    params, eqns, result = body
    lines = [mesh_line(n, kind), "", f"func main({params}) {{", *(f"  {e}" for e in eqns), f"  return {result}", "}"]
    return "\n".join(lines) + "\n"


def runs_linearly(name: str, kind: str) -> bool:
    """Whether a run's data grow linearly in the devices (see the docstring)."""
    return kind == "3d" or name == "allreduce_add"


@dataclass
class Measure:
    command: str
    program: str
    mesh: str
    devices: int
    cpu_s: float
    wall_s: float
    peak_mb: float
    out_bytes: int
    status: int


def measure(command: str, path: Path, timeout: float) -> tuple[float, float, float, int, int]:
    """CPU s, wall s, peak MB, bytes printed and exit status of `python -m refir COMMAND PATH`, in a fresh process."""
    words = command.split()
    argv = [sys.executable, "-m", "refir", words[0], str(path), *words[1:]]
    if words[0] == "run":
        argv += ["--backend", "spmd", "--seed", "0"]
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths).rstrip(os.pathsep)}
    if words[0] != "run":  # nothing is allocated: a 1-D all_to_all of 16384 has 2^29 elements, all on paper
        env.setdefault("REFIR_MAX_ELEMENTS", str(1 << 31))
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env, cwd=ROOT)
        deadline = start + timeout
        while True:  # os.wait4: this child's own rusage (RUSAGE_CHILDREN keeps the largest of all)
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                child.kill()
                pid, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.01)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        err = child.stderr.read().decode(errors="replace") if child.stderr else ""
        if child.stderr:
            child.stderr.close()
        code = child.returncode
        if code != 0:
            sys.stderr.write(f"{' '.join(words)} {path.name}: exit {code}: {err.strip().splitlines()[-1:]}\n")
        size = out.seek(0, os.SEEK_END)
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024, size, code


def slope(xs: list[int], ys: list[float]) -> float:
    """The least-squares slope of log(y) over log(x): the growth exponent."""
    if len(xs) < 2:
        return float("nan")
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / den if den else float("nan")


@dataclass
class Row:
    command: str
    program: str
    mesh: str
    devices: list[int]
    cpu_s: list[float]
    peak_mb: list[float]
    out_bytes: int  # at the largest size
    cpu_slope: float
    mb_slope: float
    last_cpu_slope: float  # the last step's alone

    @property
    def too_fast(self) -> list[str]:
        return [what for what, s in (("CPU", self.cpu_slope), ("memory", self.mb_slope)) if s > MAX_SLOPE]


def rows_of(measures: list[Measure]) -> list[Row]:
    keyed: dict[tuple[str, str, str], list[Measure]] = {}
    for m in measures:
        if m.status == 0:
            keyed.setdefault((m.command, m.program, m.mesh), []).append(m)
    rows = []
    for (command, program, mesh), ms in keyed.items():
        ms.sort(key=lambda m: m.devices)
        ns, cpu, mb = [m.devices for m in ms], [m.cpu_s for m in ms], [m.peak_mb for m in ms]
        rows.append(Row(command, program, mesh, ns, cpu, mb, ms[-1].out_bytes, slope(ns, cpu), slope(ns, mb),
                        slope(ns[-2:], cpu[-2:])))
    return rows


def table(rows: list[Row], sizes: list[int]) -> str:
    head = (["command", "program", "mesh"] + [f"{n} CPU s / MB" for n in sizes]
            + ["out at largest", "CPU slope", "MB slope", "last step"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = {n: f"{c:.2f} / {m:.0f}" for n, c, m in zip(r.devices, r.cpu_s, r.peak_mb)}
        flag = " **over**" if r.too_fast else ""
        lines.append("| " + " | ".join([r.command, r.program, r.mesh, *(cells.get(n, "-") for n in sizes),
                                        _bytes(r.out_bytes), f"{r.cpu_slope:.2f}{flag}", f"{r.mb_slope:.2f}",
                                        f"{r.last_cpu_slope:.2f}"]) + " |")
    return "\n".join(lines)


def per_command(rows: list[Row]) -> str:
    """The largest fitted slope of each command, over its programs and meshes."""
    out = []
    for command in dict.fromkeys(r.command for r in rows):
        mine = [r for r in rows if r.command == command]
        worst = max(mine, key=lambda r: r.cpu_slope)
        out.append(f"{command}: CPU slope at most {worst.cpu_slope:.2f} ({worst.program}, {worst.mesh}), "
                   f"memory at most {max(r.mb_slope for r in mine):.2f}")
    return "\n".join(out)


def _bytes(n: int) -> str:
    for unit, shift in (("MB", 20), ("KB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def main(argv: list[str] | None = None) -> int:
    global MAX_SLOPE
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="devices, comma-separated (3d: multiples of 16)")
    p.add_argument("--commands", default=",".join(COMMANDS), help=f"of {', '.join(COMMANDS)}")
    p.add_argument("--programs", default=",".join(PROGRAMS))
    p.add_argument("--meshes", default=",".join(MESHES))
    p.add_argument("--max-slope", type=float, default=MAX_SLOPE, help="the growth exponent a command may not pass")
    p.add_argument("--timeout", type=float, default=600, help="seconds one command may take")
    p.add_argument("--json", metavar="FILE", help="also write every measurement and row as JSON")
    args = p.parse_args(argv)
    MAX_SLOPE = args.max_slope
    sizes = sorted(int(s) for s in args.sizes.split(","))
    commands, programs, meshes = (args.commands.split(","), args.programs.split(","), args.meshes.split(","))
    for what, given, known in (("command", commands, COMMANDS), ("program", programs, PROGRAMS),
                               ("mesh", meshes, MESHES)):
        if set(given) - set(known):
            p.error(f"unknown {what}: {', '.join(sorted(set(given) - set(known)))}")
    if "3d" in meshes and any(n % 16 for n in sizes):
        p.error("a 3d mesh is N/16 x 4 x 4: every size a multiple of 16")
    measures: list[Measure] = []
    skipped = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in meshes:
            for name in programs:
                for n in sizes:
                    path = Path(tmp) / f"{name}_{kind}_{n}.rir"
                    path.write_text(program_text(name, n, kind))
                    for command in commands:
                        if command == "run" and not runs_linearly(name, kind):
                            if n == sizes[0]:
                                skipped.append(f"run {name} {kind}")
                            continue
                        cpu, wall, mb, size, code = measure(command, path, args.timeout)
                        measures.append(Measure(command, name, kind, n, cpu, wall, mb, size, code))
                        print(f"{command:15} {name:15} {kind} {n:6}: {cpu:7.2f} s CPU {wall:7.2f} s wall "
                              f"{mb:7.0f} MB {_bytes(size):>9}" + (f" exit {code}" if code else ""), flush=True)
    rows = rows_of(measures)
    print()
    print(table(rows, sizes))
    print()
    print(per_command(rows))
    if skipped:
        print(f"not run (their data grow as N^2 on a 1-D mesh): {', '.join(skipped)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"measures": [asdict(m) for m in measures],
                                               "rows": [asdict(r) for r in rows]}, indent=1))
    failed = [m for m in measures if m.status != 0]
    over = [r for r in rows if r.too_fast]
    for r in over:
        print(f"over: {r.command} {r.program} {r.mesh} grows with exponent {r.cpu_slope:.2f} (CPU), "
              f"{r.mb_slope:.2f} (memory), past {MAX_SLOPE}")
    if failed:
        print(f"{len(failed)} commands failed")
    return 1 if over or failed else 0


if __name__ == "__main__":
    sys.exit(main())
