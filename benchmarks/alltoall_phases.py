"""Where a large all_to_all's time goes on one node, phase by phase, next to MPI's own.

    mpiexec -n 2 python -m benchmarks.alltoall_phases [--elements 1048576] [--repeats 31]

For a row-major and a column-major block of float32 (64 columns) cut into
column pieces (transport_bench's all_to_all: split axis 1, concatenation axis
0), rank 0 prints the best and median ms of each phase of the two paths of
interp/mpi_all_to_all.py's all_to_all, their calls alternating with MPI's Alltoall
of the same bytes from a contiguous block:

- window: `setup` (result, window), `own` (this rank's piece into its result),
  `pack` (the others' pieces into this rank's window half), `barrier` (Sync,
  barrier, Sync: waiting for the slowest writer), `reads` (piece `rank` of each
  other member's half copied out into the result);
- slots: `setup` (window, result slots, a free slot, the round that says which
  slot each member's result is, started), `own` (this rank's piece into its
  slot), `agree` (the rest of that round), `writes` (each other member's piece
  into that member's slot), `barrier` (Sync, barrier, Sync: nobody returns
  before every piece is in place).

Each call is timed between two barriers, as benchmarks/transport_bench.py times
refir's communicate. The phases are the plan's own steps, called here one by
one (the same functions, not a copy of them).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from benchmarks.allgather_phases import report, setup, timed
from interp.mpi_all_to_all import _piece_writer
from interp.mpi_plans import _gathered_from, result
from interp.mpi_shared import shared_results, shared_segments

Phases = list[float]
Call = Callable[[tuple[int, ...], int, np.ndarray, tuple[int, ...]], Phases]


def window_call(devices: tuple[int, ...], rank: int, x: np.ndarray, front: tuple[int, ...]) -> Phases:
    clock = [time.perf_counter()]
    n = len(devices)
    count, write = x.nbytes // n, _piece_writer(x.shape, n, 1, 0)
    whole, shared = result(front, x.dtype), shared_segments(devices, x.nbytes)
    turn, flat = shared.next_half(), whole.reshape(-1).view(np.uint8)
    into = shared.half(rank, turn, x.nbytes)
    clock.append(time.perf_counter())
    write(x, rank, flat[rank * count:(rank + 1) * count])
    clock.append(time.perf_counter())
    for k in range(n):
        if k != rank:
            write(x, k, into[k * count:(k + 1) * count])
    clock.append(time.perf_counter())
    shared.written()
    clock.append(time.perf_counter())
    _gathered_from(shared, turn, flat, count, rank * count)
    clock.append(time.perf_counter())
    return list(np.diff(clock))


def slots_call(devices: tuple[int, ...], rank: int, x: np.ndarray, front: tuple[int, ...]) -> Phases:
    clock = [time.perf_counter()]
    n = len(devices)
    count, write = x.nbytes // n, _piece_writer(x.shape, n, 1, 0)
    shared = shared_segments(devices, x.nbytes)
    results = shared_results(devices, count, core_each=False)
    slot = results.free_slot()
    offered = results.offer(slot)
    whole = results.array(slot, front, x.dtype, x.nbytes)
    flat, mine = whole.reshape(-1).view(np.uint8), slice(rank * count, (rank + 1) * count)
    clock.append(time.perf_counter())
    write(x, rank, flat[mine])
    clock.append(time.perf_counter())
    where = results.offered(offered)
    clock.append(time.perf_counter())
    for step in range(1, n):
        member = (rank + step) % n
        write(x, member, results.peer(member, int(where[member]))[mine])
    clock.append(time.perf_counter())
    shared.written()
    clock.append(time.perf_counter())
    return list(np.diff(clock))


def main() -> None:
    args, devices, comm, block = setup("alltoall_phases", __doc__)
    rank, n, rows = comm.rank, comm.size, block.shape[0]
    out = np.empty_like(block)
    front = (rows * n, 64 // n)
    paths: dict[str, Call] = {"window": window_call}
    if shared_results(devices, block.nbytes // n, core_each=False) is not None:
        paths["slots"] = slots_call
    names = {"window": "setup own pack barrier reads", "slots": "setup own agree writes barrier"}
    for layout, x in (("row-major", block), ("column-major", np.asfortranarray(block))):
        times = timed(comm, paths, (devices, rank, x, front), args.repeats, lambda: comm.Alltoall(block, out))
        if rank == 0:
            report(f"{n} ranks, {layout} block of {args.elements} float32, column pieces", "MPI Alltoall", times,
                   names, args.repeats)

if __name__ == "__main__":
    main()
