"""refir's gpu kernels and NCCL allreduce next to torch's, on one machine, in one run.

    mpiexec -n 2 python -m benchmarks.gpu_bench      (one GPU per rank)
    python -m benchmarks.gpu_bench                   (no allreduce)

At 1 GiB of float32: permutes (2,0,1), (0,2,1) and (1,0,2) into a row-major
result (bandwidth = bytes read + written), a sum over everything (bytes read;
refir accumulates in float64, torch in float32) and, with two or more ranks,
an allreduce through refir's whole communication path (bus bandwidth,
2(n-1)/n x bytes, as nccl-tests count it). Rank 0 prints GB/s and refir/torch.
Set GPU_BENCH_MIB to measure another size.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import numpy as np

from gpu_backend.buffer import DeviceBuffer
from gpu_backend.device import SIMULATED, cuda, use_device
from gpu_backend.kernels import copy_into
from gpu_backend.reduce import reduce_into
from gpu_backend.transports import LaidOut, transport_for
from refir import ops
from refir.types import Axis, Mesh, TensorType
from refir.world import World, mpi_world

MIB = int(os.environ.get("GPU_BENCH_MIB", "1024"))
ELEMS = MIB * (1 << 20) // 4
SIDE = 512  # the permuted tensors are [ELEMS / SIDE^2, SIDE, SIDE]
REPEATS = 10


def median_time(fn: Callable[[], object], sync: Callable[[], object], barrier: Callable[[], object]) -> float:
    fn()  # compile, allocate, warm up
    times = []
    for _ in range(REPEATS):
        barrier()
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def single_gpu(torch: object, barrier: Callable[[], object]) -> list[tuple[str, float, float]]:
    n = ELEMS
    shape = (n // (SIDE * SIDE), SIDE, SIDE)
    x = DeviceBuffer.dense(cuda.to_device(np.ones(n, np.float32)), shape)
    tx = torch.ones(shape, device="cuda")
    rows = []
    for perm in [(2, 0, 1), (0, 2, 1), (1, 0, 2)]:
        view = x.transpose(perm)
        out = DeviceBuffer.empty(view.shape, x.dtype)
        tout = torch.empty(tuple(shape[p] for p in perm), device="cuda")
        ours = median_time(lambda: copy_into(out, view), cuda.synchronize, barrier)  # noqa: B023
        theirs = median_time(lambda: tout.copy_(tx.permute(perm)), torch.cuda.synchronize, barrier)  # noqa: B023
        rows.append((f"permute {perm}", 2 * 4 * n / ours, 2 * 4 * n / theirs))
    total = DeviceBuffer.empty((), x.dtype)
    flat = DeviceBuffer.dense(x.data, (n,))
    ours = median_time(lambda: reduce_into(total, flat, (0,), "sum"), cuda.synchronize, barrier)
    theirs = median_time(lambda: torch.sum(tx), torch.cuda.synchronize, barrier)
    rows.append(("sum (all axes)", 4 * n / ours, 4 * n / theirs))
    return rows


def allreduce(torch: object, world: World) -> tuple[str, float, float]:
    import torch.distributed as dist

    n, size = ELEMS, world.size
    mesh = Mesh("m", (size,), tuple(range(size)))
    partial = TensorType("f32", (Axis(n),), mesh, None, ("DIDx",), "sum")
    whole = TensorType("f32", (Axis(n),), mesh)
    buf = DeviceBuffer.dense(cuda.to_device(np.ones(n, np.float32)), (n,))
    transport = transport_for(world)
    laid = LaidOut(transport)
    op = ops.Allreduce("sum", ("DIDx",))
    barrier = world.comm.Barrier
    ours = median_time(lambda: laid.communicate(op, partial, whole, {world.rank: buf}), cuda.synchronize, barrier)
    transport.close()
    port = world.comm.bcast(29500 + os.getpid() % 1000 if world.is_root else None, root=0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=world.rank, world_size=size)
    tensor = torch.ones(n, device="cuda")
    theirs = median_time(lambda: dist.all_reduce(tensor), torch.cuda.synchronize, barrier)
    dist.destroy_process_group()
    bus = 2 * (size - 1) / size * 4 * n
    return (f"allreduce x{size} (bus)", bus / ours, bus / theirs)


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
