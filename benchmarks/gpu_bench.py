"""refir's gpu kernels and collectives next to torch's, on one machine, in one run.

    mpiexec -n 2 python -m benchmarks.gpu_bench      (one GPU per rank)
    python -m benchmarks.gpu_bench                   (no collectives)
    mpiexec -n 2 python -m benchmarks.gpu_bench run  (whole refir.run calls, below)
    mpiexec -n 2 python -m benchmarks.gpu_bench uneven  (pad-and-slice, below)
    mpiexec -n 2 python -m benchmarks.gpu_bench collectives  (the collectives table only)
    python -m benchmarks.gpu_bench layer-ops         (issue 27's ops, below; one process)

At each size of GPU_BENCH_MIB (default "1 1024": 1 MiB and 1 GiB of float32),
one table (benchmarks/gpu_ops.py says what each row counts): every order of a
3-D permute and a 4-D one, into a row-major and a reversed (column-major)
result; sum and max over the inner axis, the outer axis and all axes (refir
accumulates in float64 as the spec says, torch in float32); an elementwise add
and a cast; each next to torch and to a device-to-device copy of as many bytes
timed in the same run. With two or more ranks, the four collectives through
refir's whole communication path from a row-major and a column-major source,
next to torch.distributed (NCCL bus bandwidth as nccl-tests count it).
Rank 0 prints the tables.

`run` times whole `refir.run(..., backend="gpu")` calls of the seed-2 pattern
(x: f32[M, K@DIDx] times w: f32[K@DIDx, N], one allreduce, then bias and relu)
at M, K, N = 256, 512, 256; 4096^3; 8192^3 (GPU_BENCH_SIZES="M,K,N M,K,N ..."),
after a warm-up run, next to torch doing the same with host arrays in and out
and with everything already on the device. Every rank holds the global inputs,
as torch's ranks do; refir's rank 0 returns the whole result (torch's every
rank). It also times refir when only rank 0 is given the inputs, the first
(cold) run, and profiles one large run on rank 0.

`layer-ops` (benchmarks/gpu_layer_ops.py): the ops transformer layers added
(comparisons, where, iota, slice, select, pad, cat, reshapes that copy,
expand, tanh erf sigmoid rsqrt sin cos), one table per size of GPU_BENCH_MIB
in the same columns, each row's values checked first. Under the simulator it
runs at GPU_BENCH_ELEMS elements (default 256), its times meaningless, its
checks not (tests/test_benchmarks_layer_ops.py).
"""

from __future__ import annotations

import os
import sys

from benchmarks import gpu_layer_ops
from benchmarks.gpu_ops import collectives, copy_ceiling, single_gpu
from benchmarks.gpu_runs import whole_runs
from benchmarks.gpu_timing import NONE, REPEATS, SIZES_MIB, torch_group
from benchmarks.gpu_uneven import uneven
from gpu_backend.device import SIMULATED, cuda, use_device
from refir.world.ranks import local_world, mpi_world


def main() -> int:
    if sys.argv[1:] == ["layer-ops"]:
        return layer_ops()
    if SIMULATED:
        sys.stderr.write("gpu_bench needs a real GPU\n")
        return 1
    import torch

    world = mpi_world()
    if world is not None:
        use_device(world.comm)
        torch.cuda.set_device(cuda.get_current_device().id)
    barrier = world.comm.Barrier if world else (lambda: None)
    if sys.argv[1:] == ["run"] and world is None:  # one GPU: the whole runs without an allreduce
        sys.stdout.write("\n".join(whole_runs(torch, local_world(1))) + "\n")
        return 0
    if sys.argv[1:] in (["run"], ["uneven"]):
        if world is None:
            sys.stderr.write(f"gpu_bench {sys.argv[1]} needs mpiexec with one rank per GPU\n")
            return 1
        lines = (whole_runs if sys.argv[1] == "run" else uneven)(torch, world)
        if world.is_root:
            sys.stdout.write("\n".join(lines) + "\n")
        return 0
    only_collectives = sys.argv[1:] == ["collectives"]
    if only_collectives and world is None:
        sys.stderr.write("gpu_bench collectives needs mpiexec with one rank per GPU\n")
        return 1
    if world is not None:
        torch_group(torch, world)
    for mib in SIZES_MIB:
        elems = mib * (1 << 20) // 4
        lines = [f"{mib} MiB float32 tensors, median of {REPEATS}"]
        if not only_collectives:
            rows = single_gpu(torch, elems, barrier)
            ceiling = {nbytes: copy_ceiling(torch, nbytes, barrier) for nbytes in {row[1] for row in rows}}
            lines = table(mib, rows, ceiling)
        lines += collective_table(collectives(torch, elems, world) if world is not None else [])
        if world is None or world.is_root:
            sys.stdout.write("\n".join(lines) + "\n\n")
            sys.stdout.flush()
    if world is not None:
        torch.distributed.destroy_process_group()
    return 0


def layer_ops(repeats: int | None = None) -> int:
    """The layer ops' tables (one process, one GPU; or the simulator at a tiny size).
    Exits 1 where a row failed its check or could not run (said after the tables)."""
    torch = _torch()
    failed: list[str] = []
    if SIMULATED:
        elems = int(os.environ.get("GPU_BENCH_ELEMS", "256"))
        rows = gpu_layer_ops.rows(torch, elems, NONE, repeats, failed)
        ceiling = {nbytes: gpu_layer_ops.sim_ceiling(nbytes, repeats) for nbytes in {row[1] for row in rows}}
        lines = ["SIMULATOR: the times below mean nothing (the values were checked)"]
        lines += table(f"{elems} elements", rows, ceiling, repeats) if rows else []
        sys.stdout.write("\n".join(lines + gpu_layer_ops.notes(elems)) + "\n")
    else:
        for mib in SIZES_MIB:
            elems = mib * (1 << 20) // 4
            rows = gpu_layer_ops.rows(torch, elems, NONE, repeats, failed)
            ceiling = {nbytes: copy_ceiling(torch, nbytes, NONE) for nbytes in {row[1] for row in rows}}
            lines = (table(f"{mib} MiB", rows, ceiling, repeats) if rows else []) + gpu_layer_ops.notes(elems)
            sys.stdout.write("\n".join(lines) + "\n\n")
            sys.stdout.flush()
    sys.stdout.write("".join(f"FAILED {line}\n" for line in failed))
    return 1 if failed else 0


def _torch() -> object:
    """torch, the peer (on the CPU beside the simulator; None where it is not installed there)."""
    try:
        import torch
    except ImportError:
        if SIMULATED:
            return None
        raise
    return torch


def table(mib: int | str, rows: list, ceiling: dict[int, float], repeats: int | None = None) -> list[str]:
    """One size's tables: GB/s, % of the copy ceiling of the same bytes, refir/torch."""
    top = max(ceiling)
    size = f"{mib} MiB" if isinstance(mib, int) else mib
    wide = max(30, *(len(row[0]) for row in rows))
    lines = [f"{size} float32 tensors, median of {repeats or REPEATS}; GB/s. Ceiling: a device-to-device copy "
             f"of the same bytes (read + written; {top / ceiling[top] / 1e9:.0f} GB/s at {top >> 20} MiB moved). "
             "'refir' and 'torch': one call then a sync; 'piped': refir's calls back to back (the GPU's time where it "
             "exceeds the host's per-call work)", "",
             f"{'':<{wide}} {'refir':>7} {'torch':>7} {'ceiling':>7} {'% ceil':>6} {'refir/torch':>11} "
             f"{'piped':>7} {'% ceil':>6}"]
    for name, nbytes, ours, theirs, piped in rows:
        roof = nbytes / ceiling[nbytes]
        peer, ratio = ("-", "-") if theirs is None else (f"{nbytes / theirs / 1e9:.1f}", f"{theirs / ours:.2f}")
        lines.append(f"{name:<{wide}} {nbytes / ours / 1e9:>7.1f} {peer:>7} {roof / 1e9:>7.1f} "
                     f"{100 * nbytes / ours / roof:>5.0f}% {ratio:>11} {nbytes / piped / 1e9:>7.1f} "
                     f"{100 * nbytes / piped / roof:>5.0f}%")
    return lines


def collective_table(comms: list) -> list[str]:
    """Bus GB/s of each collective, and the ratios (none without MPI)."""
    lines: list[str] = []
    if comms:
        lines += ["", "collectives, NCCL bus GB/s: refir's whole path from a row-major and a column-major source, "
                      "its wire alone on buffers made once, torch.distributed",
                  f"{'':<34} {'refir':>8} {'strided':>8} {'wire':>8} {'torch':>8} {'refir/torch':>12} "
                  f"{'strided/row':>12}"]
        for name, bus, ours, strided, wired, theirs in comms:
            lines.append(f"{name:<34} {bus / ours / 1e9:>8.1f} {bus / strided / 1e9:>8.1f} {bus / wired / 1e9:>8.1f} "
                         f"{bus / theirs / 1e9:>8.1f} {theirs / ours:>12.2f} {ours / strided:>12.2f}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
