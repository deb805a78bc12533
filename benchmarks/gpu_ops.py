"""The kernel and collective tables: refir next to torch and to the copy ceiling (benchmarks/gpu_bench.py).

Every row is a (refir, torch) pair timed in the same process on the same
tensors, f32. Bandwidth counts the bytes an op must move at least: read +
written for copies, permutes, elementwise ops and casts; read for reductions
(their results are small); NCCL's bus bandwidth for collectives (nccl-tests'
factors: 2(n-1)/n of the buffer for allreduce, (n-1)/n of the whole for the
others). The ceiling is a device-to-device copy of the
same number of bytes, timed in the same run (the faster of the driver's memcpy
and torch's copy_ of a contiguous tensor): it moves read + written bytes, so
for a reduction, which only reads, it stands for the read bandwidth too (HBM
serves reads and writes from the same pins).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import permutations
from typing import Any

import numpy as np

from benchmarks.gpu_timing import median_time, pipelined_time
from gpu_backend.buffers import memory
from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.device import cuda
from gpu_backend.kernels.elementwise import copy_into, elementwise
from gpu_backend.kernels.functions import binary, cast
from gpu_backend.kernels.reduce import reduce_into
from gpu_backend.transports.in_process import LaidOut, transport_for
from refir.ir import ops
from refir.ir.types import Axis, Mesh, TensorType
from refir.world.ranks import World

Row = tuple[str, float, float, float, float]  # name, bytes counted, refir s, torch s, refir s back to back


def sides(elems: int, rank: int) -> tuple[int, ...]:
    """Power-of-two extents of `rank` axes holding `elems` elements, the first the largest."""
    e = elems.bit_length() - 1
    q = e // rank
    return (1 << (e - q * (rank - 1)), *([1 << q] * (rank - 1)))


def _memory(tensor: Any) -> memory.Memory:
    """A contiguous torch tensor's memory as refir's own buffers hold theirs (no copy;
    the tensor kept alive): a numba array over it would make each slice and view
    in refir's op path a numba object, which refir's own buffers never are."""
    dtype = np.dtype(str(tensor.dtype).removeprefix("torch."))
    return memory.Memory(tensor.data_ptr(), tensor.numel(), dtype, tensor)


def _buffer(torch: Any, tensor: Any, shape: tuple[int, ...], order: tuple[int, ...] | None = None) -> DeviceBuffer:
    """A torch tensor's memory seen by refir (shared: no copy)."""
    return DeviceBuffer.dense(_memory(tensor.reshape(-1)), shape, order)


def _torch_in(torch: Any, shape: tuple[int, ...], order: tuple[int, ...]) -> tuple[Any, Any]:
    """An empty f32 torch tensor of logical `shape` dense in `order` (outermost
    first): its storage (contiguous, axes in `order`) and the logical view."""
    store = torch.empty(tuple(shape[a] for a in order), device="cuda")
    return store, store.permute(tuple(order.index(a) for a in range(len(shape))))


def copy_ceiling(torch: Any, nbytes: int, barrier: Callable[[], object]) -> float:
    """Seconds of the faster device-to-device copy moving `nbytes` (half read,
    half written): the driver's memcpy or torch's copy kernel (on an H200 the
    latter is the faster, about 4 TB/s against 2.3 to 3.2)."""
    a = torch.empty(nbytes // 8, device="cuda")
    b = torch.empty(nbytes // 8, device="cuda")
    driver = median_time(lambda: cuda.as_cuda_array(b).copy_to_device(cuda.as_cuda_array(a)), cuda.synchronize,
                         barrier)
    return min(driver, median_time(lambda: b.copy_(a), torch.cuda.synchronize, barrier))


def single_gpu(torch: Any, elems: int, barrier: Callable[[], object]) -> list[Row]:
    n, f32 = elems, np.dtype(np.float32)
    time = lambda ours, theirs: (median_time(ours, cuda.synchronize, barrier),  # noqa: E731
                                 median_time(theirs, torch.cuda.synchronize, barrier),
                                 pipelined_time(ours, cuda.synchronize, barrier))
    rows: list[Row] = []
    for shape, perms in [(sides(n, 3), list(permutations(range(3)))), (sides(n, 4), [(2, 0, 3, 1)])]:
        tx = torch.rand(shape, device="cuda")
        x = _buffer(torch, tx, shape)
        rank = len(shape)
        for layout, label in [(tuple(range(rank)), "row-major"), (tuple(reversed(range(rank))), "reversed")]:
            for perm in perms:
                out_shape = tuple(shape[p] for p in perm)
                store, tout = _torch_in(torch, out_shape, layout)
                out = DeviceBuffer.empty(out_shape, f32, layout)
                view = x.transpose(perm)
                timed = time(lambda: copy_into(out, view), lambda: tout.copy_(tx.permute(perm)))  # noqa: B023
                assert torch.equal(torch.as_tensor(out.data, device="cuda"), store.reshape(-1)), "permute differs"
                rows.append((f"permute {perm} {label}", 8 * n, *timed))
    shape = sides(n, 3)
    tx = torch.rand(shape, device="cuda") - 0.5
    x = _buffer(torch, tx, shape)
    for kind, fn in [("sum", torch.sum), ("max", torch.amax)]:
        for dims, label in [((2,), "inner"), ((0,), "outer"), ((0, 1, 2), "all")]:
            out = DeviceBuffer.empty(tuple(m for a, m in enumerate(shape) if a not in dims), f32)
            timed = time(lambda: reduce_into(out, x, dims, kind), lambda: fn(tx, dim=dims))  # noqa: B023
            rows.append((f"{kind} {label}", 4 * n, *timed))
    e = ElementwiseCase.make(torch, n)
    rows.append(("add f32", 12 * n, *time(e.add, lambda: torch.add(e.ta, e.tb, out=e.tc))))
    rows.append(("cast f32 -> f16", 6 * n, *time(e.cast, lambda: e.th.copy_(e.ta))))
    return rows


@dataclass
class ElementwiseCase:
    """The add and the cast the tables time: torch tensors of n float32 (ta,
    tb in, tc out) and n float16 (th), and refir's calls on the same memory."""

    ta: Any
    tb: Any
    tc: Any
    th: Any
    add: Callable[[], object]  # tc = ta + tb through refir
    cast: Callable[[], object]  # th = ta as float16 through refir

    @staticmethod
    def make(torch: Any, n: int) -> ElementwiseCase:
        f32 = np.dtype(np.float32)
        ta, tb, tc = torch.rand(n, device="cuda"), torch.rand(n, device="cuda"), torch.empty(n, device="cuda")
        th = torch.empty(n, device="cuda", dtype=torch.float16)
        a, b, c, h = (_buffer(torch, t, (n,)) for t in (ta, tb, tc, th))
        add, to_half = binary("add", f32), cast(f32, np.dtype(np.float16))
        return ElementwiseCase(ta, tb, tc, th, lambda: elementwise(add, c, a, b), lambda: elementwise(to_half, h, a))


Case = tuple[str, Any, Callable[[tuple[int, int]], TensorType], tuple[int, int], TensorType, float]


def collective_cases(n: int, r: int, c: int) -> list[Case]:
    """The four collectives on an r x c f32 tensor over n devices: name, op,
    the source type in a given layout, the local source shape, the result
    type, and the bus bytes (nccl-tests' count)."""
    mesh = Mesh("m", (n,), tuple(range(n)))

    def t(rows: int, cols: int, shard: int | None, layout: tuple[int, int] | None = None,
          partial: bool = False) -> TensorType:
        axes = tuple(Axis(e, "DIDx" if a == shard else None) for a, e in enumerate((rows, cols)))
        return TensorType("f32", axes, mesh, layout, ("DIDx",) if partial else (), "sum" if partial else "")

    return [
        ("allreduce", ops.Allreduce("sum", ("DIDx",)), lambda lay: t(r, c, None, lay, True), (r, c),
         t(r, c, None), 2 * (n - 1) / n * 4 * r * c),
        ("allgather", ops.Allgather(0, "DIDx"), lambda lay: t(r, c, 0, lay), (r // n, c), t(r, c, None),
         (n - 1) / n * 4 * r * c),
        ("reduce_scatter", ops.ReduceScatter("sum", "DIDx", 0), lambda lay: t(r, c, None, lay, True), (r, c),
         t(r, c, 0), (n - 1) / n * 4 * r * c),
        ("all_to_all", ops.AllToAll("DIDx", 1, 0), lambda lay: t(n * r, c, 0, lay), (r, c), t(n * r, c, 1),
         (n - 1) / n * 4 * r * c),
    ]


def collectives(torch: Any, elems: int, world: World) -> list[tuple[str, float, float, float, float, float]]:
    """Each collective through refir's whole path (LaidOut over the rank
    transport), from a row-major and from a column-major source, next to
    torch.distributed (its process group made by the caller), each call followed
    by the same device-wide synchronize, torch's (benchmarks/collective_phases.py
    times numba's and torch's on an idle GPU). Rows: name, bus bytes, refir s, refir
    strided s, refir's wire alone s, torch s."""
    import torch.distributed as dist

    n = world.size
    barrier = world.comm.Barrier
    sync = torch.cuda.synchronize  # one device-wide synchronize for every column, refir's and torch's
    laid = LaidOut(transport_for(world))
    r, c = sides(elems, 2)
    timed: dict[str, tuple[float, ...]] = {}
    for name, op, src, local, dst, bus in collective_cases(n, r, c):
        runs = []
        for order in [(0, 1), (1, 0)]:
            store, tx = _torch_in(torch, local, order)
            store.fill_(1.0)
            x = DeviceBuffer(_memory(store.reshape(-1)), 0, local, tuple(tx.stride()))
            runs.append(median_time(lambda: laid.communicate(op, src(order), dst, {world.rank: x}),  # noqa: B023
                                    sync, barrier))
        timed[name] = (bus, *runs)
    # refir's wire alone (NcclWire: nccl4py's bindings and its bounded wait), on
    # buffers made once: what the whole path adds is allocation, packing and Python.
    wire, team, f32 = laid.inner.wire, tuple(range(n)), np.dtype(np.float32)
    send, recv = DeviceBuffer.empty((r * c,), f32), DeviceBuffer.empty((r * c,), f32)
    send_part, recv_part = send.take(0, 0, r * c // n), recv.take(0, 0, r * c // n)
    alone = {"allreduce": lambda: wire.allreduce(team, send, recv, "sum"),
             "allgather": lambda: wire.allgather(team, send_part, recv),
             "reduce_scatter": lambda: wire.reduce_scatter(team, send, recv_part, "sum"),
             "all_to_all": lambda: wire.alltoall(team, send, recv)}
    for name, call in alone.items():
        timed[name] += (median_time(call, sync, barrier),)
    whole = torch.ones(r * c, device="cuda")
    part = torch.ones(r * c // n, device="cuda")
    got = torch.empty(r * c, device="cuda")
    calls = {"allreduce": lambda: dist.all_reduce(whole),
             "allgather": lambda: dist.all_gather_into_tensor(whole, part),
             "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, whole),
             "all_to_all": lambda: dist.all_to_all_single(got, whole)}
    rows = []
    for name, call in calls.items():
        theirs = median_time(call, sync, barrier)
        bus, ours, strided, wired = timed[name]
        rows.append((name, bus, ours, strided, wired, theirs))
    return rows
