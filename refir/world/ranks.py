"""Where the ranks are: all in this process, or one per MPI process.

Nothing here imports mpi4py unless the process was started by an MPI launcher,
so plain runs never pay for MPI's start-up.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from refir import env

_LAUNCHER_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


@dataclass(frozen=True)
class World:
    size: int
    hosted: tuple[int, ...]  # the ranks this process runs
    comm: Any = None  # mpi4py's COMM_WORLD when there is one rank per process

    @property
    def rank(self) -> int:
        return self.comm.rank if self.comm is not None else 0

    @property
    def is_root(self) -> bool:
        return self.rank == 0


def launched_by_mpi() -> bool:
    """Whether an MPI launcher started this process (its variables, looked up
    once: a process's launcher does not change, and every refir.run asks)."""
    if not _LAUNCHED:
        _LAUNCHED.append(any(v in os.environ for v in _LAUNCHER_VARS))
    return _LAUNCHED[0]


_LAUNCHED: list[bool] = []


# REFIR_MPI_ALONE=1: a launch of one rank takes refir's MPI path all the same
# (the agreement, the inputs handed out, the results gathered, a one-rank NCCL
# communicator on a GPU), to measure and test that path where one GPU is all there is.
# Read when asked (not at import: a bad value is then an error the command line reports).
def alone() -> bool:
    return env.flag("REFIR_MPI_ALONE", False)


def mpi_world() -> World | None:
    """The MPI world when this process is one of several MPI ranks (or, with
    REFIR_MPI_ALONE=1, the only one)."""
    if not launched_by_mpi():
        return None
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.size == 1 and not alone():
        return None
    return World(comm.size, (comm.rank,), comm)


def local_world(size: int) -> World:
    return World(size, tuple(range(size)))


def say(text: str) -> None:
    """Print from rank 0 only, in one write, so that ranks never interleave."""
    world = mpi_world()
    if world is None or world.is_root:
        # No trailing spaces: piped output compares and diffs cleanly.
        sys.stdout.write("\n".join(line.rstrip() for line in text.split("\n")) + "\n")
        sys.stdout.flush()


def watched_run(world: World) -> AbstractContextManager[None]:
    """Around one run of a backend: under MPI, a failure of this rank is told
    to the others and another's ends this rank's waits at once
    (refir.world.rank_failures); in one process, nothing."""
    if world.comm is None:
        return nullcontext()
    from refir.world.rank_failures import watched

    return watched()


def abort_on_error(main: Any) -> int:
    """Run `main()`; under MPI, any uncaught exception ends every rank at once
    instead of leaving the others waiting in a collective."""
    try:
        return int(main() or 0)
    except SystemExit:
        raise
    except BaseException:
        world = mpi_world()
        if world is None:
            raise
        sys.stderr.write(f"rank {world.rank}: {traceback.format_exc()}")
        sys.stderr.flush()
        time.sleep(0.5)  # let the launcher forward this rank's stderr before the job is torn down
        world.comm.Abort(1)
        return 1
