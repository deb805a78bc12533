"""MPI's own plain collectives next to their v-variants, as transport_bench's
uneven rows cut the blocks (63 columns, one row short in all; a partial of one
row fewer for the reduce_scatter): which peer is the stricter one.

    mpiexec -n 2 python -m benchmarks.mpi_v_variants
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from benchmarks.transport_bench import timed as seconds
from refir.types import block


def timed(fn: Callable[[], object], repeats: int = 21) -> tuple[float, float]:
    """Best and median ms, every rank starting together (the first call not timed)."""
    fn()
    best, median = seconds(fn, repeats)
    return best * 1e3, median * 1e3


def rows_of(elems: int) -> list[str]:
    comm = MPI.COMM_WORLD
    n, rank, rows = comm.size, comm.rank, elems // 64
    even, gathered = np.ones((rows, 64), np.float32), np.empty((n, rows, 64), np.float32)
    counts = [(rows - (k == n - 1)) * 63 for k in range(n)]
    short, every = np.ones(counts[rank], np.float32), np.empty(sum(counts), np.float32)
    spec = [every, counts, [sum(counts[:k]) for k in range(n)], MPI.FLOAT]
    partial = np.ones((rows - 1, 63), np.float32)
    pieces = [(hi - lo) * 63 for lo, hi in (block(rows - 1, n, k) for k in range(n))]
    piece, mine = np.empty(even.size // n, np.float32), np.empty(pieces[rank], np.float32)
    calls = (("Allgather, even blocks", lambda: comm.Allgather(even, gathered)),
             ("Allgatherv, uneven blocks", lambda: comm.Allgatherv(short, spec)),
             ("Reduce_scatter_block, even", lambda: comm.Reduce_scatter_block(even, piece, op=MPI.SUM)),
             ("Reduce_scatter, uneven", lambda: comm.Reduce_scatter(partial, mine, pieces, op=MPI.SUM)))
    return [f"{name:<28} {elems:>8} {best:>8.3f} {median:>8.3f}" for name, (best, median)
            in ((name, timed(fn)) for name, fn in calls)]


def main() -> None:
    lines = [f"{MPI.COMM_WORLD.size} ranks, float32, ms: best, median of 21"]
    for elems in (1 << 10, 1 << 20):
        lines += rows_of(elems)
    if MPI.COMM_WORLD.rank == 0:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
