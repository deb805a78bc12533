"""The kernel and collective table: refir next to torch, GB/s (benchmarks/gpu_bench.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchmarks.gpu_timing import ELEMS, SIDE, median_time, torch_group
from gpu_backend.buffer import DeviceBuffer
from gpu_backend.device import cuda
from gpu_backend.kernels import copy_into
from gpu_backend.reduce import reduce_into
from gpu_backend.transports import LaidOut, transport_for
from refir import ops
from refir.types import Axis, Mesh, TensorType
from refir.world import World


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
    torch_group(torch, world)
    tensor = torch.ones(n, device="cuda")
    theirs = median_time(lambda: dist.all_reduce(tensor), torch.cuda.synchronize, barrier)
    dist.destroy_process_group()
    bus = 2 * (size - 1) / size * 4 * n
    return (f"allreduce x{size} (bus)", bus / ours, bus / theirs)

