"""Where a large allgather's time goes on one node, phase by phase, next to MPI's own.

    mpiexec -n 2 python -m benchmarks.allgather_phases [--elements 1048576] [--repeats 31]

For a row-major and a column-major block of float32 (64 columns), rank 0
prints the best and median ms of each phase of the two paths of
interp/mpi_plans.py's allgather, their calls alternating with MPI's Allgather
of the same bytes from a contiguous block:

- window: `setup` (result, window), `write` (the block laid out into this
  rank's window half and its own place in the result, from one read),
  `barrier` (Sync, barrier, Sync: waiting for the slowest writer), `reads`
  (the others' blocks copied out of their halves);
- slots: `setup` (window, result slots, a free slot), `write` (the block laid
  out in its own place in the slot), `agree` (the round in which every member
  says where its block is: waiting for the slowest writer), `reads` (the
  others' blocks copied out of their result slots), `barrier` (the second:
  no member returns while another still reads its result).

Each call is timed between two barriers, as benchmarks/transport_bench.py times
refir's communicate. The phases are the plan's own steps, called here one by
one (the same functions, not a copy of them).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from interp.host_copy import copy_into
from interp.mpi_plans import _gathered_from, result
from interp.mpi_shared import shared_results, shared_segments
from refir.mpi import COMMS, barrier

Phases = list[float]


def window_call(devices: tuple[int, ...], rank: int, x: np.ndarray, front: tuple[int, ...]) -> Phases:
    clock = [time.perf_counter()]
    count, rows = x.nbytes, x.shape[0]
    whole, shared = result(front, x.dtype), shared_segments(devices, count)
    turn = shared.next_half()
    clock.append(time.perf_counter())
    copy_into(shared.half(rank, turn, count).view(x.dtype).reshape(x.shape), x, whole[rank * rows:(rank + 1) * rows])
    clock.append(time.perf_counter())
    shared.written()
    clock.append(time.perf_counter())
    _gathered_from(shared, turn, whole.reshape(-1).view(np.uint8), count, 0)
    clock.append(time.perf_counter())
    return list(np.diff(clock))


def slots_call(devices: tuple[int, ...], rank: int, x: np.ndarray, front: tuple[int, ...]) -> Phases:
    clock = [time.perf_counter()]
    count, rows, n = x.nbytes, x.shape[0], len(devices)
    shared = shared_segments(devices, count)
    results = shared_results(devices, count)
    shared.next_half()
    slot = results.free_slot()
    whole = results.array(slot, front, x.dtype, n * count)
    clock.append(time.perf_counter())
    copy_into(whole[rank * rows:(rank + 1) * rows], x)
    clock.append(time.perf_counter())
    where = results.written(slot, shared)
    clock.append(time.perf_counter())
    flat = whole.reshape(-1).view(np.uint8)
    for step in range(1, n):
        member = (rank + step) % n
        np.copyto(flat[member * count:(member + 1) * count],
                  results.peer(member, int(where[member]))[member * count:(member + 1) * count])
    clock.append(time.perf_counter())
    barrier(results.comm)
    clock.append(time.perf_counter())
    return list(np.diff(clock))


def timed(comm: MPI.Comm, paths: dict[str, Callable[..., Phases]], args: tuple, repeats: int,
          mpi: Callable[[], object]) -> dict[str, list[Phases]]:
    """Each path's phases and whole ms, and MPI's own call's, `repeats` times,
    alternating, each call between two barriers, after a warm-up call of each path."""
    times: dict[str, list[Phases]] = {k: [] for k in (*paths, "MPI")}
    for call in paths.values():
        call(*args)
    for _ in range(repeats):
        for name, call in paths.items():
            comm.Barrier()
            start = time.perf_counter()
            phases = call(*args)
            comm.Barrier()
            times[name].append([*phases, time.perf_counter() - start])
        comm.Barrier()
        start = time.perf_counter()
        mpi()
        comm.Barrier()
        times["MPI"].append([time.perf_counter() - start])
    return times


def report(title: str, mpi_name: str, times: dict[str, list[Phases]], names: dict[str, str], repeats: int) -> None:
    """Best / median ms of each path's phases (`names`: their names, in order) next to MPI's call."""
    mpi = np.array(times["MPI"])[:, 0] * 1e3
    print(f"{title}: ms, best / median of {repeats}")
    print(f"  {mpi_name}: {mpi.min():.3f} / {np.median(mpi):.3f}")
    for name in names:
        if name not in times:
            continue
        v = np.array(times[name]) * 1e3
        cells = "  ".join(f"{p} {b:.3f}/{m:.3f}" for p, b, m in
                          zip([*names[name].split(), "whole"], v.min(0), np.median(v, 0)))
        print(f"  {name:<7} {cells}  (whole/MPI: best {v[:, -1].min() / mpi.min():.2f},"
              f" median {np.median(v[:, -1]) / np.median(mpi):.2f})")


def setup(prog: str, doc: str) -> tuple[argparse.Namespace, tuple[int, ...], MPI.Comm, np.ndarray]:
    """The command line (--elements, --repeats), the world's team, its communicator,
    and this rank's row-major block of float32 (64 columns)."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{prog}", description=doc.split("\n")[0])
    parser.add_argument("--elements", type=int, default=1 << 20, help="per rank (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=31)
    args = parser.parse_args(sys.argv[1:])
    devices = tuple(range(MPI.COMM_WORLD.size))
    comm = COMMS.team(devices)
    block = np.random.default_rng(comm.rank).standard_normal((args.elements // 64, 64)).astype(np.float32)
    return args, devices, comm, block


def main() -> None:
    args, devices, comm, block = setup("allgather_phases", __doc__)
    rank, n, rows = comm.rank, comm.size, block.shape[0]
    recv = np.empty((n, *block.shape), np.float32)
    front = (rows * n, 64)
    paths: dict[str, Callable[..., Phases]] = {"window": window_call}
    if shared_results(devices, block.nbytes) is not None:
        paths["slots"] = slots_call
    names = {"window": "setup write barrier reads", "slots": "setup write agree reads barrier"}
    for layout, x in (("row-major", block), ("column-major", np.asfortranarray(block))):
        times = timed(comm, paths, (devices, rank, x, front), args.repeats, lambda: comm.Allgather(block, recv))
        if rank == 0:
            report(f"{n} ranks, {layout} block of {args.elements} float32", "MPI Allgather", times, names,
                   args.repeats)


if __name__ == "__main__":
    main()
