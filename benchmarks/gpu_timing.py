"""What the GPU benchmarks share: sizes from the environment, and timing."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import numpy as np

from refir.world.ranks import World

# GPU_BENCH_MIB: the sizes of the kernel and collective tables, MiB (a power of
# two each); the other benchmarks take the last.
SIZES_MIB = [int(m) for m in os.environ.get("GPU_BENCH_MIB", "1 1024").split()]
MIB = SIZES_MIB[-1]
ELEMS = MIB * (1 << 20) // 4
REPEATS = 10
NONE = lambda: None  # noqa: E731  (no barrier: one process)


def say(line: str) -> None:
    """Print a line at once (a long probe's progress shows as it goes)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def median_time(fn: Callable[[], object], sync: Callable[[], object], barrier: Callable[[], object],
                repeats: int | None = None) -> float:
    fn()  # compile, allocate, warm up
    times = []
    for _ in range(repeats or REPEATS):
        barrier()
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def pipelined_time(fn: Callable[[], object], sync: Callable[[], object], barrier: Callable[[], object],
                   repeats: int | None = None) -> float:
    """Seconds per call of REPEATS calls issued back to back, one sync at the
    end: the host's per-call work overlaps the GPU's, so where the kernel
    takes longer than the host to launch it, this is the kernel's own time."""
    fn()
    barrier()
    sync()
    start = time.perf_counter()
    for _ in range(repeats or REPEATS):
        fn()
    sync()
    return (time.perf_counter() - start) / (repeats or REPEATS)



def torch_group(torch: object, world: World, base: int = 29500) -> None:
    """torch.distributed over NCCL on this MPI world (the peer in the same run)."""
    import torch.distributed as dist

    port = world.comm.bcast(base + os.getpid() % 1000 if world.is_root else None, root=0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=world.rank, world_size=world.size)
