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
  slot, where the plan writes it while the round travels: up to
  OWN_PIECE_DIRECT_RANKS members), `agree` (the rest of that round), `writes`
  (each other member's piece into that member's slot, and this rank's own
  where not written before), `barrier` (Sync, barrier, Sync: nobody returns
  before every piece is in place).

Then the uneven all_to_all's slots (transport_bench's row: 63 columns, the last
member one row short), next to `numpy`: the same steps with the writing as it
was before interp/row_runs.py (numpy's copy of each piece's view, one after
another, the own piece first).

Each call is timed between two barriers, as benchmarks/transport_bench.py times
refir's communicate. The phases are the plan's own steps, called here one by
one (the same functions, not a copy of them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from math import prod

import numpy as np

from benchmarks.allgather_phases import report, setup, timed
from interp.mpi_all_to_all import OWN_PIECE_DIRECT_RANKS, _equal_writers
from interp.mpi_plans import (
    PiecesWriter,
    PieceWriter,
    _gathered_from,
    _one_by_one,
    _run_writers,
    _uneven_sender,
    result,
)
from interp.mpi_shared import shared_results, shared_segments
from refir.types import block_size

Phases = list[float]
Call = Callable[[tuple[int, ...], int, np.ndarray, tuple[int, ...]], Phases]


def window_call(devices: tuple[int, ...], rank: int, x: np.ndarray, front: tuple[int, ...]) -> Phases:
    clock = [time.perf_counter()]
    n = len(devices)
    count = x.nbytes // n
    write, write_all = _equal_writers(x.shape, n, 1, 0)
    whole, shared = result(front, x.dtype), shared_segments(devices, x.nbytes)
    turn, flat = shared.next_half(), whole.reshape(-1).view(np.uint8)
    into = shared.half(rank, turn, x.nbytes)
    clock.append(time.perf_counter())
    write(x, rank, flat[rank * count:(rank + 1) * count])
    clock.append(time.perf_counter())
    write_all(x, [(k, into[k * count:(k + 1) * count]) for k in range(n) if k != rank])
    clock.append(time.perf_counter())
    shared.written()
    clock.append(time.perf_counter())
    _gathered_from(shared, turn, flat, count, rank * count)
    clock.append(time.perf_counter())
    return list(np.diff(clock))


def slots_call(devices: tuple[int, ...], rank: int, x: np.ndarray, front: tuple[int, ...]) -> Phases:
    n = len(devices)
    count = x.nbytes // n
    write, write_all = _equal_writers(x.shape, n, 1, 0)
    return _slots(devices, rank, x, front, write, write_all, [(rank * count, (rank + 1) * count)] * n, count)


def uneven_slots_call(devices: tuple[int, ...], rank: int, x: np.ndarray, front: tuple[int, ...],
                      before: bool = False) -> Phases:
    """The uneven all_to_all's slots, through the plan's writers (or, `before`,
    numpy's copy of each piece, the own piece first)."""
    n = len(devices)
    rows = [x.shape[0] + (rank == n - 1) - (s == n - 1) for s in range(n)]
    widths = [block_size(x.shape[1], n, m) for m in range(n)]
    sizes = [[r * w * x.itemsize for r in rows] for w in widths]  # member m's, from each sender
    places = [(sum(sizes[m][:rank]), sum(sizes[m][:rank + 1])) for m in range(n)]
    write, _ = _uneven_sender(x.shape, n, 1, 0, [sizes[m][rank] for m in range(n)])
    block = -(-max(sum(row) for row in sizes) // n)
    if before:
        return _slots(devices, rank, x, front, write, _one_by_one(write), places, block, x.nbytes, own_first=True)
    write, write_all = _run_writers(x.shape, n, 1, 0, write)
    return _slots(devices, rank, x, front, write, write_all, places, block, x.nbytes)


def _slots(devices: tuple[int, ...], rank: int, x: np.ndarray, front: tuple[int, ...], write: PieceWriter,
           write_all: PiecesWriter, places: list[tuple[int, int]], block: int, window: int | None = None,
           own_first: bool | None = None) -> Phases:
    """mpi_all_to_all._exchanged_in_results's steps, timed one by one."""
    clock = [time.perf_counter()]
    n = len(devices)
    own_first = n <= OWN_PIECE_DIRECT_RANKS if own_first is None else own_first
    shared = shared_segments(devices, x.nbytes if window is None else window)
    results = shared_results(devices, block, core_each=False)
    slot = results.free_slot()
    offered = results.offer(slot)
    whole = results.array(slot, front, x.dtype, prod(front) * x.itemsize)
    flat = whole.reshape(-1).view(np.uint8)
    own = (rank, flat[slice(*places[rank])])
    clock.append(time.perf_counter())
    if own_first:
        write(x, *own)
    clock.append(time.perf_counter())
    where = results.offered(offered)
    clock.append(time.perf_counter())
    others = [(m, results.peer(m, int(where[m]))[slice(*places[m])]) for m in ((rank + s) % n for s in range(1, n))]
    write_all(x, others if own_first else [own, *others])
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
    names = {"window": "setup own pack barrier reads", "slots": "setup own agree writes barrier",
             "numpy": "setup own agree writes barrier"}
    for layout, x in (("row-major", block), ("column-major", np.asfortranarray(block))):
        times = timed(comm, paths, (devices, rank, x, front), args.repeats, lambda: comm.Alltoall(block, out))
        if rank == 0:
            report(f"{n} ranks, {layout} block of {args.elements} float32, column pieces", "MPI Alltoall", times,
                   names, args.repeats)
    if "slots" in paths:
        uneven = np.ascontiguousarray(block[:rows - (rank == n - 1), :63])
        front = (rows * n - 1, block_size(63, n, rank))
        before: Call = lambda *a: uneven_slots_call(*a, before=True)  # noqa: E731
        times = timed(comm, {"slots": uneven_slots_call, "numpy": before}, (devices, rank, uneven, front),
                      args.repeats, lambda: comm.Alltoall(block, out))
        if rank == 0:
            report(f"{n} ranks, uneven row-major block (63 columns, the last member one row short), column pieces",
                   "MPI Alltoall (even blocks)", times, names, args.repeats)


if __name__ == "__main__":
    main()
