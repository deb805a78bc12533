"""refir's gpu kernels and NCCL allreduce next to torch's, on one machine, in one run.

    mpiexec -n 2 python -m benchmarks.gpu_bench      (one GPU per rank)
    python -m benchmarks.gpu_bench                   (no allreduce)
    mpiexec -n 2 python -m benchmarks.gpu_bench run  (whole refir.run calls, below)
    mpiexec -n 2 python -m benchmarks.gpu_bench uneven  (pad-and-slice, below)

At 1 GiB of float32: permutes (2,0,1), (0,2,1) and (1,0,2) into a row-major
result (bandwidth = bytes read + written), a sum over everything (bytes read;
refir accumulates in float64, torch in float32) and, with two or more ranks,
an allreduce through refir's whole communication path (bus bandwidth,
2(n-1)/n x bytes, as nccl-tests count it). Rank 0 prints GB/s and refir/torch.
Set GPU_BENCH_MIB to measure another size.

`run` times whole `refir.run(..., backend="gpu")` calls of the seed-2 pattern
(x: f32[M, K@DIDx] times w: f32[K@DIDx, N], one allreduce, then bias and relu)
at M, K, N = 256, 512, 256; 4096^3; 8192^3 (GPU_BENCH_SIZES="M,K,N M,K,N ..."),
after a warm-up run, next to torch doing the same with host arrays in and out
and with everything already on the device. Every rank holds the global inputs,
as torch's ranks do; refir's rank 0 returns the whole result (torch's every
rank). It also times refir when only rank 0 is given the inputs, the first
(cold) run, and profiles one large run on rank 0.
"""

from __future__ import annotations

import sys

from benchmarks.gpu_ops import allreduce, single_gpu
from benchmarks.gpu_runs import whole_runs
from benchmarks.gpu_timing import MIB, REPEATS
from benchmarks.gpu_uneven import uneven
from gpu_backend.device import SIMULATED, cuda, use_device
from refir.world import mpi_world


def main() -> int:
    if SIMULATED:
        sys.stderr.write("gpu_bench needs a real GPU\n")
        return 1
    import torch

    world = mpi_world()
    if world is not None:
        use_device(world.comm)
        torch.cuda.set_device(cuda.get_current_device().id)
    barrier = world.comm.Barrier if world else (lambda: None)
    if sys.argv[1:] in (["run"], ["uneven"]):
        if world is None:
            sys.stderr.write(f"gpu_bench {sys.argv[1]} needs mpiexec with one rank per GPU\n")
            return 1
        lines = (whole_runs if sys.argv[1] == "run" else uneven)(torch, world)
        if world.is_root:
            sys.stdout.write("\n".join(lines) + "\n")
        return 0
    rows = single_gpu(torch, barrier)
    if world is not None:
        rows.append(allreduce(torch, world))
    if world is None or world.is_root:
        lines = [f"{MIB} MiB float32, median of {REPEATS}; GB/s", "",
                 f"{'':<24} {'refir':>9} {'torch':>9} {'refir/torch':>12}"]
        lines += [f"{name:<24} {a / 1e9:>9.1f} {b / 1e9:>9.1f} {a / b:>12.2f}" for name, a, b in rows]
        sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
