"""Where refir's communication path spends its time: each collective's phases
timed apart, next to its NCCL wire alone and torch.distributed.

    mpiexec -n 2 python -m mpi4py -m benchmarks.collective_phases    (one GPU per rank)

At the last size of GPU_BENCH_MIB (1 GiB f32 by default), for the four
collectives of benchmarks/gpu_ops.py's table, rank 0 prints (ms, medians):

- what a synchronize costs on an idle GPU, numba's and torch's;
- `whole`: LaidOut(transport_for(world)).communicate, one call then torch's
  synchronize (`numba sync`: numba's), from a row-major and a column-major
  source; `gpu span`: CUDA events around the same call; `fresh`: blocks the
  pool asked the driver for while timing (0 when every result comes from its
  free lists); `host`: the call's own time with the GPU's work excluded
  (every wire call a no-op);
- the same call with every phase (allocation, copy kernels, wire calls)
  wrapped in a synchronize before and after, each phase's median; `rest` is
  what is left of the wrapped call: Python between the phases;
- all_to_all by other means: packed whole and sent by one alltoall (the path
  before the pieces went in place), and in place in 1, 2, 4 and 8 chunks;
  reduce_scatter from the column-major source in 1, 2 and 4 chunks
  (rank_transport.RS_CHUNKS: each chunk packed while the one before is reduced);
- the wire alone on buffers made once: NcclWire, nccl4py's Communicator
  method on the legacy default stream then a synchronize, and torch.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import numpy as np

from benchmarks.gpu_ops import collective_cases, sides
from benchmarks.gpu_timing import ELEMS, median_time, torch_group
from benchmarks.gpu_timing import REPEATS as TIMED
from gpu_backend.buffers import pool
from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.device import SIMULATED, cuda, use_device
from gpu_backend.kernels.elementwise import copy_into
from gpu_backend.transports import device_arrays, in_process, rank_transport
from gpu_backend.transports.in_process import LaidOut, transport_for
from gpu_backend.transports.rank_transport import pieces
from refir.world.ranks import World, mpi_world

REPEATS = 7


def ms(seconds: float) -> str:
    return f"{1e3 * seconds:8.3f}"


def gpu_span(fn: Callable[[], object], barrier: Callable[[], object]) -> float:
    """Median seconds between CUDA events recorded before and after `fn`."""
    spans = []
    for _ in range(REPEATS):
        barrier()
        cuda.synchronize()
        start, end = cuda.event(), cuda.event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        spans.append(cuda.event_elapsed_time(start, end) / 1e3)
    return float(np.median(spans))


class Phases:
    """Wraps the path's allocation, copy kernels and wire calls so that each is
    timed apart, a synchronize on either side."""

    def __init__(self, wire: Any) -> None:
        self.wire = wire
        self.times: dict[str, list[float]] = {}  # a phase inside another is named indented
        self.depth = 0

    def timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = "  " * self.depth + name
            self.depth += 1
            try:
                cuda.synchronize()
                start = time.perf_counter()
                out = fn(*args, **kwargs)
                cuda.synchronize()
            finally:
                self.depth -= 1
            self.times.setdefault(key, []).append(time.perf_counter() - start)
            return out
        return wrapper

    @contextmanager
    def installed(self) -> Any:
        saved_empty = DeviceBuffer.empty
        spots = ((rank_transport, "copy_into"), (rank_transport, "laid_out"), (device_arrays, "copy_into"),
                 (in_process, "laid_out"))  # where each transport's copies look the two up
        saved = {(m, n): getattr(m, n) for m, n in spots}
        wire_calls = ("allgather", "alltoall", "allreduce", "reduce_scatter", "p2p", "broadcast", "start_p2p",
                      "start_reduce_scatter", "finish")
        DeviceBuffer.empty = staticmethod(self.timed("allocate", saved_empty))  # type: ignore[method-assign]
        for (m, n), fn in saved.items():
            setattr(m, n, self.timed(f"{n} ({m.__name__.split('.')[-1]})", fn))
        for n in wire_calls:
            setattr(self.wire, n, self.timed(f"wire {n}", getattr(self.wire, n)))
        try:
            yield self
        finally:
            DeviceBuffer.empty = staticmethod(saved_empty)  # type: ignore[method-assign]
            for (m, n), fn in saved.items():
                setattr(m, n, fn)
            for n in wire_calls:
                delattr(self.wire, n)


@contextmanager
def no_gpu_wait(wire: Any) -> Any:
    """Every wire call a no-op: what is left of a call is host work and kernel launches."""
    names = ("allgather", "alltoall", "allreduce", "reduce_scatter", "p2p", "broadcast", "start_p2p",
             "start_reduce_scatter", "finish")
    for n in names:
        setattr(wire, n, lambda *a, **k: None)
    try:
        yield
    finally:
        for n in names:
            delattr(wire, n)


def host_only(fn: Callable[[], object], wire: Any, barrier: Callable[[], object]) -> float:
    with no_gpu_wait(wire):
        times = []
        for _ in range(REPEATS):
            barrier()
            cuda.synchronize()
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
            cuda.synchronize()
    return float(np.median(times))


def profile_top(fn: Callable[[], object], lines: int = 25) -> str:
    """Three calls profiled, the busiest functions by their own time, the wait's polling left out."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(3):
        fn()
        cuda.synchronize()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(lines)
    return out.getvalue()


def wire_alone(world: World, wire: Any, elems: int, sync: Callable[[], object]) -> dict[str, dict[str, float]]:
    """Seconds of each wire call on buffers made once: NcclWire, and nccl4py's
    Communicator methods on the legacy default stream (no wait of their own)."""
    n, team, barrier = world.size, tuple(range(world.size)), world.comm.Barrier
    f32 = np.dtype(np.float32)
    send, recv = DeviceBuffer.empty((elems,), f32), DeviceBuffer.empty((elems,), f32)
    send_part, recv_part = send.take(0, 0, elems // n), recv.take(0, 0, elems // n)
    comm, nccl = wire.team(team), wire.nccl
    a, b, a_part, b_part = send.flat(), recv.flat(), send_part.flat(), recv_part.flat()
    nccl4py = {"allreduce": lambda: comm.allreduce(a, b, nccl.SUM),
               "allgather": lambda: comm.allgather(a_part.view(np.uint8), b.view(np.uint8)),
               "reduce_scatter": lambda: comm.reduce_scatter(a, b_part, nccl.SUM),
               "all_to_all": lambda: comm.alltoall(a.view(np.uint8), b.view(np.uint8))}
    ours = {"allreduce": lambda: wire.allreduce(team, send, recv, "sum"),
            "allgather": lambda: wire.allgather(team, send_part, recv),
            "reduce_scatter": lambda: wire.reduce_scatter(team, send, recv_part, "sum"),
            "all_to_all": lambda: wire.alltoall(team, send, recv)}
    out: dict[str, dict[str, float]] = {}
    for name, call in ours.items():
        out[name] = {"NcclWire": median_time(call, sync, barrier),
                     "nccl4py + sync": median_time(nccl4py[name], sync, barrier)}
    peers = [p for p in team if p != world.rank]
    out["all_to_all"]["p2p, peers' parts"] = median_time(
        lambda: wire.p2p([(p, send_part) for p in peers], [(p, recv_part) for p in peers]), sync, barrier)
    return out


def packed_all_to_all(t: Any, op: Any, x: DeviceBuffer) -> DeviceBuffer:
    """The even all_to_all as it was: every piece packed into one send buffer,
    one alltoall into a second, which is the result."""
    n, order = t.mpi.comm.size, (op.concat_axis, op.split_axis)
    parts = x.split(n, op.split_axis)
    send = DeviceBuffer.empty((x.size,), x.dtype)
    for room, part in zip(pieces(send.flat(), n, parts[0].shape, order), parts):
        copy_into(room, part)
    got = DeviceBuffer.empty((x.size,), x.dtype)
    t.wire.alltoall(tuple(range(n)), send, got)
    return got


def torch_alone(torch: Any, elems: int, n: int, barrier: Callable[[], object]) -> dict[str, float]:
    import torch.distributed as dist

    whole = torch.ones(elems, device="cuda")
    part = torch.ones(elems // n, device="cuda")
    got = torch.empty(elems, device="cuda")
    calls = {"allreduce": lambda: dist.all_reduce(whole),
             "allgather": lambda: dist.all_gather_into_tensor(whole, part),
             "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, whole),
             "all_to_all": lambda: dist.all_to_all_single(got, whole)}
    return {name: median_time(call, torch.cuda.synchronize, barrier) for name, call in calls.items()}


def main() -> int:
    if SIMULATED:
        sys.stderr.write("collective_phases needs a real GPU\n")
        return 1
    import torch

    world = mpi_world()
    if world is None:
        sys.stderr.write("run me under mpiexec, one rank per GPU\n")
        return 1
    use_device(world.comm)
    torch.cuda.set_device(cuda.get_current_device().id)
    torch_group(torch, world)
    barrier, root = world.comm.Barrier, world.is_root
    say = (lambda s: (sys.stdout.write(s + "\n"), sys.stdout.flush())) if root else (lambda s: None)
    say(f"torch {torch.__version__}, its NCCL {torch.cuda.nccl.version()}; {ELEMS * 4 >> 20} MiB f32, "
        f"median of {REPEATS}, ms")
    sync = torch.cuda.synchronize
    say(f"a synchronize on an idle GPU: numba's {ms(median_time(cuda.synchronize, cuda.synchronize, barrier))}, "
        f"torch's {ms(median_time(sync, sync, barrier))}")
    laid = LaidOut(transport_for(world))
    laid.inner.wire.start()
    wire = laid.inner.wire
    r, c = sides(ELEMS, 2)
    theirs = torch_alone(torch, ELEMS, world.size, barrier)
    for name, op, src, local, dst, bus in collective_cases(world.size, r, c):
        for order in [(0, 1), (1, 0)]:
            store = torch.empty(tuple(local[a] for a in order), device="cuda")
            store.fill_(1.0)
            view = store.permute(tuple(order.index(a) for a in range(2)))
            x = DeviceBuffer(cuda.as_cuda_array(store.reshape(-1)), 0, local, tuple(view.stride()))
            call = lambda: laid.communicate(op, src(order), dst, {world.rank: x})  # noqa: B023,E731
            call()
            before = pool.stats()
            whole = median_time(call, sync, barrier)
            after = pool.stats()
            numba_sync = median_time(call, cuda.synchronize, barrier)
            span = gpu_span(call, barrier)
            host = host_only(call, wire, barrier)
            phases = Phases(wire)
            with phases.installed():
                wrapped = median_time(call, sync, barrier)
            parts = {k: float(np.median(v)) for k, v in phases.times.items()}
            per_call = {k: round(len(v) / (TIMED + 1)) for k, v in phases.times.items()}
            fresh = after.fresh - before.fresh if after and before else -1
            say(f"\n{name} from {'row-major' if order == (0, 1) else 'column-major'}: whole {ms(whole)} "
                f"({bus / whole / 1e9:.1f} GB/s bus; torch {ms(theirs[name])}, {theirs[name] / whole:.2f}), "
                f"numba sync {ms(numba_sync)}, gpu span {ms(span)}, host {ms(host)}, fresh blocks {fresh}; "
                f"phases synchronized {ms(wrapped)}:")
            for k, v in parts.items():
                say(f"    {k:<28} {ms(v)} x{per_call[k]}")
            top = sum(v * per_call[k] for k, v in parts.items() if not k.startswith(" "))
            say(f"    {'rest (Python)':<28} {ms(wrapped - top)}")
            if name == "all_to_all":
                before_ = lambda: packed_all_to_all(laid.inner, op, x)  # noqa: B023,E731
                ways = {"packed + alltoall": median_time(before_, sync, barrier)}
                default = rank_transport.CHUNKS
                for chunks in (1, 2, 4, 8):
                    rank_transport.CHUNKS = chunks
                    ways[f"in place, {chunks} chunks"] = median_time(call, sync, barrier)
                rank_transport.CHUNKS = default
                say("    other ways: " + ", ".join(f"{k} {ms(v)}" for k, v in ways.items()))
            if name == "reduce_scatter" and order == (1, 0):  # its source re-laid out: chunked packing
                default = rank_transport.RS_CHUNKS
                ways = {}
                for chunks in (1, 2, 4):
                    rank_transport.RS_CHUNKS = chunks
                    ways[f"{chunks} chunks"] = median_time(call, sync, barrier)
                rank_transport.RS_CHUNKS = default
                say("    other ways: " + ", ".join(f"{k} {ms(v)}" for k, v in ways.items()))
            if order == (0, 1) and name == "allreduce":
                say(profile_top(call))
    alone = wire_alone(world, wire, ELEMS, sync)
    say("\nthe wire alone, buffers made once (ms), and torch:")
    for name, ways in alone.items():
        say(f"  {name:<16} " + "  ".join(f"{k} {ms(v)}" for k, v in ways.items()) + f"  torch {ms(theirs[name])}")
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
