"""A team's shared-memory window (MPI-3), for collectives that must change a
buffer's layout on the way: where every member runs on one node, each writes
its contribution into its segment in the layout the receivers want (an
all_to_all packs straight into it; an allgather transposes into its own place
in its result and copies that in), one barrier, and each copies what it
receives out of the others' segments into its result (its own part before the
barrier).

MPI's own collective over shared memory copies every byte in and out once;
refir's all_to_all of column pieces and its allgather of a column-major block
first had to pack or transpose into a send buffer, a third pass over the bytes
(1M, four ranks on two cores: the packing alone was 1.0-1.35 ms of a 2-3 ms
collective). Writing the packed layout into the window is that packing and the
copy in at once. MPI datatypes that walk the strides instead were ten times
slower (benchmarks/RESULTS.md).

Each rank's segment has two halves used by turns: a call writes one half and
reads the others' same half after the barrier; the next call writes the other
half, and the call after it reuses the first only after everyone passed the
next call's barrier, so after they finished reading. Every member makes the
same calls on a team in the same order, so the turns agree. Windows live as
long as the team's communicator (refir.mpi.COMMS frees both).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from refir.errors import RunError
from refir.mpi import COMMS, barrier

# Below this many bytes per rank a collective's own call costs less than the
# barrier and copies (and 1K calls are bound by Python, not bytes). Above the
# most, MPI's own call is used: a window lives as long as the team's
# communicator, twice its size per rank, in the node's shared memory (/dev/shm
# in a container may be small), one per power-of-two size.
SHARED_MIN_BYTES, SHARED_MAX_BYTES = 1 << 16, 1 << 26


class SharedSegments:
    """Every member's segment of one window, `nbytes` per half."""

    def __init__(self, comm: MPI.Comm, nbytes: int) -> None:
        self.win = MPI.Win.Allocate_shared(2 * nbytes, 1, comm=comm)
        self.win.Lock_all(MPI.MODE_NOCHECK)  # one passive epoch: loads and stores, Sync around barriers
        self.comm, self.nbytes, self.turn = comm, nbytes, 0
        self.segments = [np.frombuffer(self.win.Shared_query(r)[0], np.uint8, 2 * nbytes) for r in range(comm.size)]

    def next_half(self) -> int:
        self.turn ^= 1
        return self.turn

    def half(self, rank: int, turn: int, nbytes: int) -> np.ndarray:
        """The first `nbytes` of `rank`'s half `turn`."""
        start = turn * self.nbytes
        return self.segments[rank][start:start + nbytes]

    def written(self) -> None:
        """After this rank wrote its half: wait until every member has."""
        self.win.Sync()
        barrier(self.comm)
        self.win.Sync()

    def free(self) -> None:
        """Free the window (every member calls it, from COMMS.close). MPI's free
        synchronizes the members: it is called only once a bounded barrier
        shows that every member is here (after a rank stalled, the others leave
        the window to the process's end instead of waiting for it forever)."""
        self.segments = []
        try:
            barrier(self.comm)
        except RunError:
            return
        self.win.Unlock_all()
        self.win.Free()


def _make(nbytes: int) -> Callable[[MPI.Comm], SharedSegments | None]:
    def make(comm: MPI.Comm) -> SharedSegments | None:
        barrier(comm)  # every member is here (within the timeout) before the blocking calls below
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        one_node = node.size == comm.size  # every member sees the same answer
        node.Free()
        return SharedSegments(comm, nbytes) if one_node else None
    return make


def _free(segments: SharedSegments | None) -> None:
    if segments is not None:
        segments.free()


def shared_segments(devices: tuple[int, ...], nbytes: int) -> SharedSegments | None:
    """The team's window with halves of at least `nbytes` (a power of two, so
    that a few sizes share one), or None where the team spans nodes or
    `nbytes` is out of the window's range (the same answer on every member:
    the blocks are even)."""
    if not SHARED_MIN_BYTES <= nbytes <= SHARED_MAX_BYTES:
        return None
    size = 1 << max(nbytes - 1, 1).bit_length()
    return COMMS.other(f"shared window {size}", devices, _make(size), _free)
