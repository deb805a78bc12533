"""A politer block scheduler for numba's CUDA simulator.

The simulator runs each CUDA thread of a block as a Python thread and, while
they run, polls them in a loop that never lets go of the GIL: every thread
woken from a syncthreads waits for the interpreter's switch interval before it
may run, and the poll burns the CPU meanwhile (a small transpose launch took
2 to 3 times the CPU it takes with this loop; benchmarks/RESULTS.md).
`install()` replaces the block's run loop with one that
keeps the simulator's semantics (one Python thread per CUDA thread, a barrier
released when every live thread waits at it, the first thread's exception
aborts the block and is raised) but yields the GIL on every poll.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from numba.cuda.simulator import kernel as sim


def _run_block(self: Any, grid_point: tuple[int, ...], *args: Any) -> None:
    def body() -> None:
        self._f(*args)

    threads = [sim.BlockThread(body, self, grid_point, point, self._debug) for point in np.ndindex(*self._block_dim)]
    for t in threads:
        t.start()
    live = threads
    while live:
        failed = next((t for t in live if t.exception), None)
        if failed is not None:
            _abort(threads)
            raise failed.exception[0].with_traceback(failed.exception[1])
        live = [t for t in live if t.is_alive()]
        if live and all(t.syncthreads_blocked for t in live):
            for t in live:  # every live thread waits at the barrier: release them
                t.syncthreads_blocked = False
                t.syncthreads_event.set()
        else:
            time.sleep(0)  # let the running threads have the GIL now, not a switch interval later
    for t in threads:  # an exception raised just before its thread ended
        if t.exception:
            raise t.exception[0].with_traceback(t.exception[1])


def _abort(threads: list[Any]) -> None:
    for t in threads:
        t.abort = True
        t.syncthreads_blocked = False
        t.syncthreads_event.set()


def install() -> None:
    """Use the scheduler above for every block the simulator runs."""
    if hasattr(sim, "BlockManager") and hasattr(sim, "BlockThread"):
        sim.BlockManager.run = _run_block
