"""A team's shared-memory window (MPI-3), for collectives that must change a
buffer's layout on the way: where every member runs on one node, each writes
its contribution into its segment in the layout the receivers want (an
all_to_all packs straight into it; an allgather transposes into its own place
in its result and copies that in), one barrier, and each copies what it
receives out of the others' segments into its result (its own part before the
barrier), or, a reduce_scatter, folds it straight out of them.

MPI's own collective over shared memory copies every byte in and out once;
refir's all_to_all of column pieces and its allgather of a column-major block
first had to pack or transpose into a send buffer, a third pass over the bytes
(1M, four ranks on two cores: the packing alone was 1.0-1.35 ms of a 2-3 ms
collective). Writing the packed layout into the window is that packing and the
copy in at once. MPI datatypes that walk the strides instead were ten times
slower (benchmarks/RESULTS.md).

Where every member also has a core of its own, an allgather's blocks need not
pass through the window at all: each stays in its owner's result, which lies in
shared memory the others read; and, core or not, an all_to_all's pieces go
straight from each sender's buffer into their receivers' results, which lie in
shared memory the others write (SharedResults, below).

Each rank's segment has two halves used by turns: a call writes one half and
reads the others' same half after the barrier; the next call writes the other
half, and the call after it reuses the first only after everyone passed the
next call's barrier, so after they finished reading. Every member makes the
same calls on a team in the same order, so the turns agree. Windows live as
long as the team's communicator (refir.world.mpi_job.COMMS frees both).
Whether a team's members share a node (the machine's, or simulated ones under
REFIR_MPI_NODE_RANKS): interp/mpi/nodes.py.
"""

from __future__ import annotations

import mmap
import os
import sys
import tempfile
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from interp.mpi import nodes
from interp.sentinel import fill_bytes
from refir.errors import RunError
from refir.world.mpi_job import COMMS, allgather_obj, barrier, wait

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

    def next_half(self, dtype: np.dtype | None = None) -> int:
        """The half this call writes; this rank's is filled with the sentinel of
        `dtype` first where it is armed (interp/sentinel.py)."""
        self.turn ^= 1
        if dtype is not None:
            fill_bytes(self.half(self.comm.rank, self.turn, self.nbytes), dtype)
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


def _make(nbytes: int, devices: tuple[int, ...]) -> Callable[[MPI.Comm], SharedSegments | None]:
    def make(comm: MPI.Comm) -> SharedSegments | None:
        return SharedSegments(comm, nbytes) if nodes.one_node(comm, devices) else None
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
    return COMMS.other(f"shared window {size}{nodes.rule()}", devices, _make(size, devices), _free)


# ---- results the other members read or write ---------------------------------------------

# A collective whose result holds every member's block (an allgather) can leave
# each block in its owner's result, in memory the others map, and have them
# copy it from there: each block is then written once into shared memory and
# read once out of it, as MPI's own single-copy transfer moves it (1M, two
# ranks: about 20 MiB of traffic a rank through the window, 16 this way). The
# price is a second barrier: no member may return its result, which its caller
# may then change, while another still reads it; so only where every member has
# a core of its own (four ranks on two cores: a few percent faster than the
# window at 1M on a quiet machine, slower on a busy one, where the barrier
# waits for ranks taken off their core: benchmarks/RESULTS.md). An all_to_all
# goes the other way: each sender writes each member's piece straight from its
# buffer into that member's result (its own piece into its own), once a round
# has said which slot each member's result is; one barrier after the writes,
# and nobody touches a result after it (two ranks, 1M: 8 MiB of traffic a rank,
# MPI's own count, against 12 through the window). That is the window's one
# barrier, so ranks without a core each take the slots for it too (four ranks
# on two cores, 1M: half the bytes of the window's pack and copy out; 1.72 ->
# 1.31 ms a call, benchmarks/RESULTS.md). Each member keeps
# RESULT_SLOTS results in a file of the node's shared memory (/dev/shm) that
# the others map; a slot is handed out again only when nothing but
# this pool refers to it (as interp.mpi.pools.result's kept results), and a
# member whose slots are all held takes the window instead (every member says
# where its result is in a round of the call). A slot is a mapping of its own:
# arrays handed out keep it mapped however long they live, also after the team
# is freed, and a member that died leaves the others' mappings of its file
# valid. The file is unlinked as soon as every member has mapped it, or has
# failed to (a member that fails one of the rounds unlinks its own on the way
# out); a file whose maker died before that (killed, or aborted by another
# rank's error) is named for that process (its pid and start time), and the
# next member of any job on the node that makes slots removes it.
RESULT_SLOTS = 2
SHARED_RESULTS_DIR = "/dev/shm"
RESULTS_PREFIX = "refir-results-"


def _references_of_unheld() -> int:
    """What sys.getrefcount reports, in `first_unheld`'s loop, for an array only
    its list holds (the list's reference, the loop's and the call's argument's;
    measured rather than assumed, as it differs between Python versions)."""
    kept = [np.empty(0)]
    for a in kept:
        return sys.getrefcount(a)
    raise AssertionError("unreachable")


UNHELD = _references_of_unheld()


def first_unheld(arrays: list[np.ndarray]) -> int | None:
    """The index of the first of `arrays` nothing but the list refers to (no
    variable, container, view or exported buffer of it left), or None."""
    index = 0
    for a in arrays:
        if sys.getrefcount(a) == UNHELD:
            return index
        index += 1
    return None


class SharedResults:
    """This member's result slots of `capacity` bytes each, and views of every
    other member's (None for this member's own), which an all_to_all writes."""

    def __init__(self, comm: MPI.Comm, capacity: int, slots: list[mmap.mmap],
                 peers: list[list[np.ndarray] | None]) -> None:
        self.comm, self.capacity = comm, capacity
        # Each slot's array over its whole mapping: everything handed out is a view of it (numpy points a
        # view's base at the first array over foreign memory), so its references count every holder.
        self.roots = [np.frombuffer(m, np.uint8) for m in slots]
        self.peers = peers
        self.where = np.empty(comm.size, np.int64)
        self.mine = np.empty(1, np.int64)

    def free_slot(self) -> int | None:
        return first_unheld(self.roots)

    def array(self, slot: int, shape: tuple[int, ...], dtype: np.dtype, nbytes: int) -> np.ndarray:
        return self.roots[slot][:nbytes].view(dtype).reshape(shape)

    def peer(self, member: int, slot: int) -> np.ndarray:
        return self.peers[member][slot]

    def offer(self, slot: int | None) -> MPI.Request:
        """Start the round in which every member says where its result is (a
        slot, or -1: not in a slot); `offered` waits for it."""
        self.mine[0] = -1 if slot is None else slot
        return self.comm.Iallgather(self.mine, self.where)

    def offered(self, request: MPI.Request, what: str = "a barrier") -> np.ndarray:
        wait(request, what)
        return self.where

    def written(self, slot: int | None, window: SharedSegments) -> np.ndarray:
        """After this member wrote its block (into result slot `slot`, or its
        window half where None): wait until every member has, and learn where
        each one's block is (a slot, or -1: its window half)."""
        window.win.Sync()
        where = self.offered(self.offer(slot))
        window.win.Sync()
        return where

    def free(self) -> None:
        """Drop this pool's references: a slot stays mapped while arrays handed
        out of it live (no member waits for another here)."""
        self.roots, self.peers = [], []


def _started(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat's
    22nd field), or None where there is no such process (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2:].split()[19].decode()  # the fields after the command's name, from the 3rd


def _own_prefix() -> str:
    """The start of this process's slot file names: its pid and start time, so
    that another process can tell whether the maker is gone (a pid alone may
    have been reused by a live process since)."""
    return f"{RESULTS_PREFIX}{os.getpid()}-{_started(os.getpid()) or 0}-"


def remove_stale_results(directory: str) -> list[str]:
    """Remove the slot files in `directory` whose maker is no longer running
    (it died before every member had mapped them), and return their names.
    Nothing is removed without /proc, where the maker cannot be checked. A file
    of a live process of another PID namespace that happens to share a pid
    with a dead one here may go too: its members then fail to open it and
    take the window, as when a member cannot make its slots."""
    if _started(os.getpid()) is None:
        return []
    removed = []
    for name in os.listdir(directory):
        fields = name[len(RESULTS_PREFIX):].split("-")
        if not name.startswith(RESULTS_PREFIX) or len(fields) != 3 or not fields[0].isdigit():
            continue
        if _started(int(fields[0])) != fields[1]:
            try:
                os.unlink(os.path.join(directory, name))
                removed.append(name)
            except OSError:  # another process removed it first, or it is another user's (/dev/shm is sticky)
                pass
    return removed


def _own_slots(capacity: int) -> tuple[list[mmap.mmap], str]:
    """RESULT_SLOTS mappings of a new file of the node's shared memory, and its
    path, where they take at most a quarter of its free room (a container's
    /dev/shm may be 64 MiB, and MPI's windows live there too). Its pages are
    allocated here (posix_fallocate): a full /dev/shm is an OSError now, not a
    SIGBUS at a later write. Dead processes' files are removed first."""
    remove_stale_results(SHARED_RESULTS_DIR)
    room = os.statvfs(SHARED_RESULTS_DIR)
    if capacity * RESULT_SLOTS > room.f_bavail * room.f_frsize // 4:  # leave MPI's own segments their room
        raise OSError(f"{SHARED_RESULTS_DIR} has too little room for result slots")
    fd, path = tempfile.mkstemp(prefix=_own_prefix(), dir=SHARED_RESULTS_DIR)
    try:
        os.posix_fallocate(fd, 0, capacity * RESULT_SLOTS)
        return [mmap.mmap(fd, capacity, offset=k * capacity) for k in range(RESULT_SLOTS)], path
    except OSError:
        _unlink(path)
        raise
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:  # removed as stale by another job (see remove_stale_results)
        pass


def _peer_slots(path: str, capacity: int) -> list[np.ndarray]:
    fd = os.open(path, os.O_RDWR)
    try:
        whole = np.frombuffer(mmap.mmap(fd, capacity * RESULT_SLOTS), np.uint8)
    finally:
        os.close(fd)
    return [whole[k * capacity:(k + 1) * capacity] for k in range(RESULT_SLOTS)]


def _make_results(capacity: int, devices: tuple[int, ...]) -> Callable[[MPI.Comm], SharedResults | None]:
    def make(comm: MPI.Comm) -> SharedResults | None:
        if not nodes.one_node(comm, devices):
            return None
        slots, path = [], ""
        try:
            slots, path = _own_slots(capacity)
        except OSError:
            pass
        try:
            paths = allgather_obj(comm, path, "shared result files")
            peers: list[list[np.ndarray] | None] = []
            try:
                if all(paths):
                    peers = [None if r == comm.rank else _peer_slots(p, capacity) for r, p in enumerate(paths)]
            except OSError:
                peers = []
            mapped = allgather_obj(comm, bool(peers), "shared result files mapped")  # every member is past its opens
        finally:  # also where a round fails: the job ends, and nobody will open the file
            if path:
                _unlink(path)
        return SharedResults(comm, capacity, slots, peers) if all(mapped) else None
    return make


def _free_results(results: SharedResults | None) -> None:
    if results is not None:
        results.free()


# Blocks under SHARED_RESULT_MIN_BLOCK go through the window: there the round
# and the second barrier cost more than the copy saves (two ranks, a call of
# transport_bench: 64 KiB blocks 0.040 -> 0.050 ms; 256 KiB ones, phases alone,
# 0.059 -> 0.052; benchmarks/RESULTS.md). An all_to_all's pieces, whose round
# travels while a rank writes its own piece, gain little below it either (two
# ranks, phases alone: 32-128 KiB pieces within 0.003 ms of the window). A member's result slots take
# RESULT_SLOTS times a result's bytes of the node's shared memory for as long
# as the team lives; results past SHARED_RESULT_MAX_BYTES go through the window.
SHARED_RESULT_MIN_BLOCK, SHARED_RESULT_MAX_BYTES = 1 << 18, 1 << 26


def shared_results(devices: tuple[int, ...], block: int, core_each: bool = True) -> SharedResults | None:
    """The team's result slots for a result of `block` bytes from each member
    (an allgather's block, an all_to_all's piece; slots of a power of two of at
    least the result, so that a few sizes share them), or None where the team
    spans nodes, the node's shared memory cannot hold them, the sizes are out
    of range, or `core_each` asks for a core per member and the node has fewer
    (os.cpu_count(), the node's: the same answer on every member)."""
    nbytes = block * len(devices)
    if block < SHARED_RESULT_MIN_BLOCK or nbytes > SHARED_RESULT_MAX_BYTES:
        return None
    if core_each and len(devices) > (os.cpu_count() or 1):
        return None
    size = 1 << max(nbytes - 1, 1).bit_length()
    return COMMS.other(f"shared results {size}{nodes.rule()}", devices, _make_results(size, devices),
                       _free_results)
