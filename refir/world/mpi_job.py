"""What every rank of an MPI job shares: its communicators, bounded waits, and
agreement on errors. Imported only under an MPI launch (it imports mpi4py).

Communicators live as long as the process: one per team, keyed by the team's
devices (world ranks in team order), made on first use by whichever run or
step needs it and found again by every later one, on any mesh that forms the
same team. `close()` (also `refir.close()`, and at exit) frees them. A run
that failed on some ranks may leave messages in flight; every rank closes
them after such a run, so that the next starts on fresh ones.

Every blocking step (creating a communicator, handing out inputs, gathering
results, a collective) waits through `wait`: short sleeps, since several ranks
may share a core, and a RunError after REFIR_MPI_TIMEOUT seconds; inside a run,
another rank's failure ends the wait at once (refir.world.rank_failures). An
error MPI reports for a request (a message longer than its receive buffer)
is a one-line RunError.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from mpi4py import MPI

from refir import env
from refir.errors import OtherRankError, RefirError, RunError
from refir.world.rank_failures import FAILURES

TIMEOUT_S = env.seconds("REFIR_MPI_TIMEOUT", 120)
# A rank that times out aborts the job; the others wait a little longer first,
# in rank order, so that one message (the first rank's) is printed, not one each.
STAGGER_S = 1.5
YIELD_S = 5e-3
HANDSHAKE_TAG, VERDICT_TAG = 31, 32  # a team's creation: its tokens, then its verdicts


def poll(done: Callable[[], bool], what: str, listen: bool = True) -> None:
    """Call `done()` with short sleeps until it says so; give up after TIMEOUT_S.
    With `listen`, another rank's failure in this run ends the wait."""
    start = time.monotonic()
    limit = TIMEOUT_S + STAGGER_S * MPI.COMM_WORLD.rank
    while not done():
        waited = time.monotonic() - start
        if waited > limit:
            raise RunError(f"rank {MPI.COMM_WORLD.rank}: gave up waiting for {what} after {TIMEOUT_S:g} s "
                           "(another rank failed or stopped responding; REFIR_MPI_TIMEOUT sets the limit)")
        # For the first YIELD_S, give the core to any process ready to run and
        # come straight back (sched_yield: time.sleep(0) would sleep the kernel's
        # timer slack, 50 µs or more, each time); then sleep: ranks that wait long
        # should leave the core to those working.
        if waited < YIELD_S:
            os.sched_yield()
        else:
            # Past the first YIELD_S, ask whether another rank failed in this run (a
            # probe, about a microsecond against the 200 µs sleep): its peers stop at once.
            if listen and _LISTENING[0] and (heard := FAILURES.heard()) is not None:
                raise heard
            time.sleep(2e-4)


_LISTENING = [True]  # False while members make what they all agreed to make (Comms.other)


@contextmanager
def _deaf() -> Iterator[None]:
    before, _LISTENING[0] = _LISTENING[0], False
    try:
        yield
    finally:
        _LISTENING[0] = before


def wait(req: MPI.Request | list[MPI.Request], what: str = "a communication",
         status: MPI.Status | None = None, listen: bool = True) -> None:
    """Wait for requests, politely and within the timeout. A single request is
    tested by itself (no list per test: small collectives call this often), and
    one done at once needs no clock; `status` (a single request's) receives
    what MPI says of it; `listen`: as for poll."""
    if isinstance(req, list):
        reqs = req
        done: Callable[[], bool] = lambda: MPI.Request.Testall(reqs)  # noqa: E731
    elif status is not None:
        one = req
        done = lambda: one.Test(status)  # noqa: E731
    else:
        done = req.Test
    try:
        if not done():
            poll(done, what, listen)
    except MPI.Exception as exc:  # the error's class, not MPICH's stack of several lines
        code = exc.Get_error_class()
        why = " (a message longer than the types give)" if code == MPI.ERR_TRUNCATE else ""
        raise RunError(f"rank {MPI.COMM_WORLD.rank}: {what} failed in MPI: {MPI.Get_error_string(code)}{why}") \
            from None


def barrier(comm: MPI.Comm) -> None:
    wait(comm.Ibarrier(), "a barrier")


# ---- faults, for tests only ------------------------------------------------------------

# Read once, at import (a launch's environment): fault() runs a few times in every run.
FAULT = env.fault()


def fault(stage: str) -> None:
    """REFIR_FAULT=RANK:STAGE:KIND in the launch's environment makes that rank
    fail at `stage` (inputs, comm, collective, gather): `kill` (SIGKILL),
    `stall` (sleep for an hour) or `raise`."""
    if FAULT is None:
        return
    rank, where, kind = FAULT
    if rank != MPI.COMM_WORLD.rank or where != stage:
        return
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "stall":
        time.sleep(3600)
    raise RunError(f"rank {rank}: injected fault at {stage}")


# ---- communicators ---------------------------------------------------------------------

class Comms:
    """The process's communicators (see the module's docstring). `created`
    counts communicators made, by kind ("mpi", or what `other` was asked for)."""

    def __init__(self) -> None:
        self.base: MPI.Comm | None = None
        self.teams: dict[tuple[int, ...], MPI.Comm] = {}
        self.others: dict[tuple[str, tuple[int, ...]], tuple[Any, Callable[[Any], None]]] = {}
        self.created: dict[str, int] = {}

    def world(self) -> MPI.Comm:
        """The job's own duplicate of COMM_WORLD: refir's messages never meet the caller's."""
        if self.base is None:
            comm, req = MPI.COMM_WORLD.Idup()
            notices = FAILURES.open()  # the failure notices' own communicator, made alike on every rank
            wait([req] if notices is None else [req, notices], "every rank to create a communicator")
            self.base = comm
            self._count("mpi")
        return self.base

    def team(self, devices: tuple[int, ...]) -> MPI.Comm:
        """A communicator whose ranks are the team's devices in team order."""
        if devices not in self.teams:
            base = self.world()
            fault("comm")
            _all_will_create(base, devices)
            group = base.Get_group().Incl(list(devices))
            self.teams[devices] = base.Create_group(group)
            group.Free()
            self._count("mpi")
        return self.teams[devices]

    def other(self, kind: str, devices: tuple[int, ...], make: Callable[[MPI.Comm], Any],
              free: Callable[[Any], None]) -> Any:
        """Another library's communicator for a team (NCCL's): `make` builds it
        from the team's MPI communicator, `free` releases it."""
        key = (kind, devices)
        if key not in self.others:
            team = self.team(devices)
            # `make` may block (NCCL's init, a shared window): once all members agree to
            # make it, none leaves on hearing of a failure, or the others would wait for ever.
            _all_will_create(self.world(), devices)
            with _deaf():
                self.others[key] = (make(team), free)
            self._count(kind)
        return self.others[key][0]

    def found(self, kind: str, devices: tuple[int, ...]) -> Any:
        """The team's communicator of `kind` if one is made (None: none now),
        without making one: a replayed run checks that its are still there."""
        got = self.others.get((kind, devices))
        return None if got is None else got[0]

    def _count(self, kind: str) -> None:
        self.created[kind] = self.created.get(kind, 0) + 1

    def close(self) -> None:
        """Free every communicator; every rank calls it (refir.close(), at exit,
        or after a run that failed somewhere, so that the next starts afresh:
        MPI lets a communicator with requests still in flight be freed)."""
        for comm, free in self.others.values():
            free(comm)
        for comm in self.teams.values():
            comm.Free()
        if self.base is not None:
            self.base.Free()
        FAILURES.close()
        self.base, self.teams, self.others = None, {}, {}


COMMS = Comms()
YES, NO = np.ones(1, np.int8), np.zeros(1, np.int8)  # a member's verdict on a team's creation


def _all_will_create(base: MPI.Comm, devices: tuple[int, ...]) -> None:
    """Creating a communicator blocks until every member calls it, and nothing
    ends that wait, so members first agree, within the timeout, that all will.
    Each sends every peer a token; one that holds all of theirs says yes to
    each; one that stops first (another rank's failure heard, the timeout) says
    no, and only then stops. Every member waits for every verdict (no longer
    listening for failures: each peer's verdict comes, yes or no) and creates
    the communicator only if all said yes. A token alone would not do: a peer
    that sent its own and then stopped would leave this member in the creation
    for ever. What a stopped creation leaves in flight goes when the failed
    run's communicators are freed (every rank frees them after such a run).
    Another library's communicator over the team (Comms.other) is agreed on
    the same way before it is made."""
    what = f"ranks {list(devices)} to create a communicator"
    peers = [d for d in devices if d != base.rank]
    got, verdicts = [np.empty(1, np.int8) for _ in peers], [np.empty(1, np.int8) for _ in peers]
    tokens = [base.Irecv(t, source=p, tag=HANDSHAKE_TAG) for p, t in zip(peers, got)]
    heard = [base.Irecv(v, source=p, tag=VERDICT_TAG) for p, v in zip(peers, verdicts)]
    sent = [base.Isend(YES, dest=p, tag=HANDSHAKE_TAG) for p in peers]
    try:
        wait(tokens, what)
    except BaseException:
        for p in peers:
            base.Isend(NO, dest=p, tag=VERDICT_TAG)
        raise
    sent += [base.Isend(YES, dest=p, tag=VERDICT_TAG) for p in peers]
    wait(heard + sent, what, listen=False)
    if (refused := [p for p, v in zip(peers, verdicts) if not v[0]]):
        error = OtherRankError(f"rank {refused[0]} stopped before creating a communicator of ranks {list(devices)}")
        error.heard = True  # type: ignore[attr-defined]  # the rank that failed first speaks for the job
        raise error


@atexit.register
def _close_at_exit() -> None:  # registered after mpi4py's finalizer, so it runs first
    if not MPI.Is_finalized():
        COMMS.close()


# ---- small messages and agreement ------------------------------------------------------

# A small message's first (often only) round: a fixed slot of its length and
# its first bytes. Agreement messages fit in it, so a run pays one round each.
SLOT = 256


def _slotted(data: bytes | np.ndarray) -> bytes:
    """A slot holding the length of `data` (bytes, or a uint8 array) and its
    first bytes (plain bytes: numpy arrays of 256 bytes cost more to make than
    to send)."""
    head = bytes(data[:SLOT - 8])
    return len(data).to_bytes(8, "little") + head + bytes(SLOT - 8 - len(head))


def _length(slot: memoryview | bytes) -> int:
    return int.from_bytes(slot[:8], "little")


def allgather_obj(comm: MPI.Comm, obj: Any, what: str, meanwhile: Callable[[], None] | None = None,
                  reuse: bool = False) -> list[Any]:
    """A small picklable value from every rank, on every rank, within the timeout:
    one round where every value fits in a slot; else (every rank sees it) a
    second round with the whole values. `meanwhile()`, work of this rank's
    own, runs while the first round travels; the round completes whatever it
    raises (the others learn nothing of it: the caller agrees on errors).
    With `reuse` (for callers that never change what they get), slots of the
    very bytes the last such round of `what` brought give its very values
    back, not unpickled again: a run repeated agrees on the same bytes."""
    data = pickle.dumps(obj)
    slots = bytearray(comm.size * SLOT)
    req = comm.Iallgather(_slotted(data), slots)
    try:
        if meanwhile is not None:
            meanwhile()
    finally:
        wait(req, what)
    last = _LAST_ROUND.get(what) if reuse else None
    if last is not None and last[0] == slots:
        return last[1]
    view = memoryview(slots)
    sizes = [_length(view[k * SLOT:]) for k in range(comm.size)]
    if max(sizes) <= SLOT - 8:
        values = [pickle.loads(view[k * SLOT + 8:k * SLOT + 8 + n]) for k, n in enumerate(sizes)]
        if reuse:
            _LAST_ROUND[what] = (slots, values)
        return values
    recv = bytearray(sum(sizes))
    wait(comm.Iallgatherv(data, [recv, sizes]), what)
    bounds = np.cumsum([0, *sizes])
    view = memoryview(recv)
    return [pickle.loads(view[bounds[k]:bounds[k + 1]]) for k in range(comm.size)]


_LAST_ROUND: dict[str, tuple[bytearray, list[Any]]] = {}  # what -> the slots and values of its last round


def bcast_bytes(comm: MPI.Comm, data: np.ndarray | None, root: int, what: str) -> np.ndarray:
    """`root`'s byte array (of a length the others do not know), on every rank:
    one round when it fits in a slot."""
    slot = bytearray(_slotted(data) if comm.rank == root else SLOT)
    wait(comm.Ibcast(slot, root=root), what)
    size = _length(slot)
    if size <= SLOT - 8:
        return data if comm.rank == root else np.frombuffer(slot, np.uint8, size, 8)
    buf = data if comm.rank == root else np.empty(size, np.uint8)
    wait(comm.Ibcast(buf, root=root), what)
    return buf


def bcast_obj(comm: MPI.Comm, obj: Any, root: int, what: str) -> Any:
    """A small picklable value of `root`'s, on every rank, within the timeout."""
    data = np.frombuffer(pickle.dumps(obj), np.uint8).copy() if comm.rank == root else None
    return pickle.loads(bcast_bytes(comm, data, root, what).tobytes())


def agreed(comm: MPI.Comm, what: str, step: Callable[[], Any],
           public: Callable[[Any], Any] = lambda _: None, reuse: bool = False) -> tuple[Any, list[Any]]:
    """`step()` on every rank, then one exchange: if any rank met a RefirError,
    every rank raises (its own error, or an OtherRankError with the first
    failing rank's message), marked `agreed`: every rank stops alike, so rank 0
    alone need say why. Returns this rank's value and every rank's `public(value)`
    (with `reuse`, perhaps the very objects an earlier call returned:
    allgather_obj)."""
    try:
        value, error = step(), None
    except RefirError as exc:
        value, error = None, exc
    every = allgather_obj(comm, (None, public(value)) if error is None else ((type(error).__name__, str(error)), None),
                          what, reuse=reuse)
    failed = [(k, e) for k, (e, _) in enumerate(every) if e is not None]
    if failed:
        if error is None:
            k, (kind, message) = failed[0]
            error = OtherRankError(f"rank {k} stopped with {kind}: {message}")
        raise as_agreed(error)
    return value, [v for _, v in every]


def as_agreed(error: RefirError) -> RefirError:
    error.agreed = True  # type: ignore[attr-defined]
    return error


def recv_bytes(comm: MPI.Comm, source: int, tag: int, what: str) -> np.ndarray:
    """One message of a length this rank does not know, within the timeout."""
    status = MPI.Status()
    found: list[MPI.Message | None] = [None]

    def arrived() -> bool:
        found[0] = comm.Improbe(source=source, tag=tag, status=status)
        return found[0] is not None

    poll(arrived, what)
    buf = np.empty(status.Get_count(MPI.BYTE), np.uint8)
    wait(found[0].Irecv(buf), what)
    return buf


def root_verdict(comm: MPI.Comm, error: RefirError | None, what: str) -> None:
    """Rank 0's error (or none) on every rank: one small broadcast when all is well."""
    failed = np.array([comm.rank == 0 and error is not None], np.int8)
    wait(comm.Ibcast(failed, root=0), what)
    if failed[0]:
        text = bcast_obj(comm, (type(error).__name__, str(error)) if comm.rank == 0 else None, 0, what)
        raise as_agreed(error if comm.rank == 0 else OtherRankError(f"rank 0 stopped with {text[0]}: {text[1]}"))
