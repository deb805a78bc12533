"""What pad-and-slice costs on NCCL (benchmarks/gpu_bench.py uneven)."""

from __future__ import annotations

import numpy as np

from benchmarks.gpu_timing import ELEMS, MIB, REPEATS, median_time, torch_group
from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.device import cuda
from gpu_backend.transports.in_process import LaidOut, transport_for
from refir.ir import ops
from refir.ir.types import Axis, Mesh, TensorType, local_shape
from refir.world.ranks import World


def uneven(torch: object, world: World) -> list[str]:
    """What pad-and-slice costs: NCCL has no v-collectives, so an uneven allgather
    or reduce_scatter sends every block padded to ceil(E/n) and slices the padding
    off. Timed through refir's whole communication path at an extent that divides
    (n x c) and at one that does not (n x c - 1, the last block one short), next
    to torch's all_gather_into_tensor and reduce_scatter_tensor at the even one.
    GB/s of the gathered (or reduced) whole tensor."""
    import torch.distributed as dist

    size = world.size
    mesh = Mesh("m", (size,), tuple(range(size)))
    barrier = world.comm.Barrier
    transport = transport_for(world)
    laid = LaidOut(transport)
    chunk = ELEMS // size

    def timed(n: int) -> tuple[int, float, float]:
        sharded = TensorType("f32", (Axis(n, "DIDx"),), mesh)
        whole = TensorType("f32", (Axis(n),), mesh)
        partial = TensorType("f32", (Axis(n),), mesh, None, ("DIDx",), "sum")
        (mine,) = local_shape(sharded, {}, world.rank)
        block = DeviceBuffer.dense(cuda.to_device(np.ones(mine, np.float32)), (mine,))
        full = DeviceBuffer.dense(cuda.to_device(np.ones(n, np.float32)), (n,))
        gather, scatter = ops.Allgather(0, "DIDx"), ops.ReduceScatter("sum", "DIDx", 0)
        return (n, median_time(lambda: laid.communicate(gather, sharded, whole, {world.rank: block}),
                               cuda.synchronize, barrier),
                median_time(lambda: laid.communicate(scatter, partial, sharded, {world.rank: full}),
                            cuda.synchronize, barrier))

    rows = [timed(chunk * size), timed(chunk * size - 1)]
    transport.close()
    torch_group(torch, world)
    out, part = torch.empty(chunk * size, device="cuda"), torch.ones(chunk, device="cuda")
    torch_gather = median_time(lambda: dist.all_gather_into_tensor(out, part), torch.cuda.synchronize, barrier)
    torch_scatter = median_time(lambda: dist.reduce_scatter_tensor(part, out), torch.cuda.synchronize, barrier)
    dist.destroy_process_group()
    (n_even, g_even, s_even), (n_odd, g_odd, s_odd) = rows
    gbs = lambda n, s: 4 * n / s / 1e9  # noqa: E731
    return [f"{MIB} MiB float32 over {size} ranks, median of {REPEATS}; GB/s of the whole tensor", "",
            f"{'':<16} {'torch even':>11} {'refir even':>11} {'refir uneven':>13} {'uneven/even':>12}",
            f"{'allgather':<16} {gbs(n_even, torch_gather):>11.1f} {gbs(n_even, g_even):>11.1f} "
            f"{gbs(n_odd, g_odd):>13.1f} {g_even / g_odd * n_odd / n_even:>12.2f}",
            f"{'reduce_scatter':<16} {gbs(n_even, torch_scatter):>11.1f} {gbs(n_even, s_even):>11.1f} "
            f"{gbs(n_odd, s_odd):>13.1f} {s_even / s_odd * n_odd / n_even:>12.2f}"]

