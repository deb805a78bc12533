"""The local copies of refir's all_to_all and reduce_scatter, alone on one GPU.

    python -m benchmarks.collective_packing      (one GPU, no MPI; GPU_BENCH_MIB: the size, default 1024)

Two H200s' collectives (benchmarks/collective_phases.py) need two GPUs; the
copies around the wire do not. This times the exact code rank 0 of a team of
n runs (gpu_backend/transports/rank_transport.py's rules, called with a wire whose every
call is a no-op), on the 1 GiB f32 block of benchmarks/gpu_ops.py's
collective table (16384 x 16384, row-major or column-major), next to torch's
copy of the same bytes (the ceiling) and torch doing the same re-layout, in
one process. Per row: one call then a synchronize (`call`), ten back to back
(`piped`: the kernels' own time), the call's host part (until it returns),
and the copy launches it made; the rules also in 2 and 4 chunks
(rank_transport.CHUNKS, RS_CHUNKS), where the two-GPU run overlaps each
chunk's packing with the wire's work on the one before. Where the wire would be in a two-GPU run is
stated in benchmarks/RESULTS.md, from that run's wire times.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import numpy as np

from benchmarks.gpu_ops import _memory, collective_cases, copy_ceiling, sides
from benchmarks.gpu_timing import ELEMS, NONE, median_time, pipelined_time, say
from benchmarks.kernel_probe import knobs
from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.device import SIMULATED, cuda
from gpu_backend.kernels import transpose
from gpu_backend.kernels.elementwise import copy_into, laid_out
from gpu_backend.launches import launch
from gpu_backend.transports import packing, rank_transport
from refir.ir.types import axis_first


class NoWire:
    """A wire that moves nothing: what is left of a rule is its allocations and copies."""

    def __init__(self, native: bool) -> None:
        self.is_native = native

    def native(self, kind: str, dtype: np.dtype) -> bool:
        return self.is_native

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def ranked(n: int, me: int, native: bool) -> tuple[Any, Any]:
    """A stand-in RankTransport (rank `me`, the no-op wire) and its team of n."""
    devices = tuple(range(n))
    return SimpleNamespace(rank=me, wire=NoWire(native)), SimpleNamespace(devices=devices, index=devices.index)


def host_part(fn: Callable[[], object], repeats: int = 10) -> float:
    """Median seconds of one call until it returns (the GPU idle before it)."""
    fn()
    times = []
    for _ in range(repeats):
        cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        cuda.synchronize()
    return statistics.median(times)


def launches(fn: Callable[[], object]) -> int:
    """Kernel launches one call makes."""
    fn()
    before = sum(launch.counts.values())
    fn()
    cuda.synchronize()
    return sum(launch.counts.values()) - before


def row(name: str, moved: int, ceiling: float, fn: Callable[[], object], theirs: float | None = None) -> None:
    """`moved` bytes copied (read once, written once); `ceiling`: torch's copy of as many, seconds."""
    one = median_time(fn, cuda.synchronize, NONE)
    piped = pipelined_time(fn, cuda.synchronize, NONE)
    host = host_part(fn)
    if not moved:  # nothing copied: the rule's host work and allocations only
        say(f"  {name:<46} call {1e3 * one:6.3f} ms  piped {1e3 * piped:6.3f} ms  host {1e3 * host:6.3f} ms  "
            f"launches {launches(fn)}")
        return
    peer = f"  torch {1e3 * theirs:6.3f} ms ({theirs / one:4.2f})" if theirs else ""
    say(f"  {name:<46} call {1e3 * one:6.3f} ms {100 * ceiling / one:5.1f}%  piped {1e3 * piped:6.3f} ms "
        f"{100 * ceiling / piped:5.1f}%  host {1e3 * host:6.3f} ms  launches {launches(fn)}  "
        f"({2 * moved / one / 1e9:.0f} GB/s){peer}")


@contextmanager
def chunked(**values: int) -> Iterator[None]:
    """rank_transport's chunk counts set for a while."""
    old = {k: getattr(rank_transport, k) for k in values}
    for k, v in values.items():
        setattr(rank_transport, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(rank_transport, k, v)


def main() -> int:
    if SIMULATED:
        say("collective_packing needs a real GPU")
        return 1
    import torch

    f32 = np.dtype(np.float32)
    r, c = sides(ELEMS, 2)
    nbytes = 4 * r * c
    tsync = torch.cuda.synchronize
    ceiling = {b: copy_ceiling(torch, 2 * b, NONE) for b in (nbytes, nbytes // 2)}
    say(f"{nbytes >> 20} MiB f32 block {r} x {c}; torch's copy: {2 * nbytes / ceiling[nbytes] / 1e9:.0f} GB/s "
        f"({1e3 * ceiling[nbytes]:.3f} ms for {nbytes >> 20} MiB, {1e3 * ceiling[nbytes // 2]:.3f} for half); "
        f"median of 10, % of that copy")
    cases = {name: (op, src, dst) for name, op, src, _, dst, _ in collective_cases(2, r, c)}
    for layout, label in [((0, 1), "row-major"), ((1, 0), "column-major")]:
        store = torch.rand(tuple((r, c)[a] for a in layout), device="cuda")
        view = store.permute(tuple(layout.index(a) for a in range(2)))
        x = DeviceBuffer(_memory(store.reshape(-1)), 0, (r, c), tuple(view.stride()))

        say(f"\nall_to_all from a {label} {r} x {c} block (split axis 1, concat axis 0), rank 0 of 2:")
        op, _, _ = cases["all_to_all"]
        order = axis_first(2, op.concat_axis)
        t, team = ranked(2, 0, False)
        whole = lambda: rank_transport._pieces_in_place(t, op, team, x, order)  # noqa: B023,E731
        half = torch.empty((r, c // 2), device="cuda")
        torch_half = median_time(lambda: half.copy_(view[:, c // 2:]), tsync, NONE)  # noqa: B023
        row("whole rule (allocations, peer's piece, mine)", nbytes, ceiling[nbytes], whole, 2 * torch_half)
        pieces = x.split(2, op.split_axis)
        row("peer's piece packed (packing.peer_pieces)", nbytes // 2, ceiling[nbytes // 2],
            lambda: packing.peer_pieces(pieces, 0, order), torch_half)  # noqa: B023
        place = DeviceBuffer.empty((r, c // 2), f32, order)
        row("my piece into its place (copy_into)", nbytes // 2, ceiling[nbytes // 2],
            lambda: copy_into(place, pieces[0]), torch_half)  # noqa: B023
        row("the path before: laid_out of the peer's piece", nbytes // 2, ceiling[nbytes // 2],
            lambda: laid_out(pieces[1], order))  # noqa: B023
        for chunks in (2, 4):
            with chunked(CHUNKS=chunks):
                row(f"whole rule in {chunks} chunks", nbytes, ceiling[nbytes], whole)
        four = x.split(4, op.split_axis)
        row("4 ranks, rank 1: 3 peers' pieces (2 launches)", 3 * nbytes // 4, 0.75 * ceiling[nbytes],
            lambda: packing.peer_pieces(four, 1, order))  # noqa: B023

        op, src, dst = cases["reduce_scatter"]
        say(f"reduce_scatter from a {label} {r} x {c} partial block (axis 0), rank 0 of 2:")
        t, team = ranked(2, 0, True)
        rule = lambda: rank_transport._reduce_scatter(t, op, team, x, src(layout), dst)  # noqa: B023,E731
        whole_t = torch.empty((r, c), device="cuda")
        torch_pack = median_time(lambda: whole_t.copy_(view), tsync, NONE)  # noqa: B023
        row("whole rule (allocation, pack)", nbytes if layout != (0, 1) else 0, ceiling[nbytes], rule,
            torch_pack if layout != (0, 1) else None)
        if layout == (0, 1):
            continue
        for chunks in (2, 4):
            with chunked(RS_CHUNKS=chunks):
                row(f"whole rule in {chunks} chunks", nbytes, ceiling[nbytes], rule)
        for side, rows, walk, blocks in [(64, 2, 0, 1), (32, 4, 0, 1), (32, 2, 0, 1), (64, 4, 0, 1), (64, 8, 0, 1),
                                         (64, 2, 2, 1), (64, 2, 0, 2)]:
            with knobs(transpose, TRANSPOSE_SIDE=side, TRANSPOSE_ROWS=rows, TRANSPOSE_WALK=walk,
                       TRANSPOSE_BLOCKS=blocks):
                row(f"  transpose side {side}, rows {rows}, walk {walk}, blocks x{blocks}", nbytes, ceiling[nbytes],
                    lambda: laid_out(x, (0, 1)))  # noqa: B023
    say(f"\nlaunches by path: {launch.counts}; refused: {launch.refused[:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
