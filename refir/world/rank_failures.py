"""A rank's failure inside a run, told at once to every other rank of the job.

Under MPI a rank that fails in the middle of a run (a local step's check, a
buffer its type refuses, a backend's bug) stops making the run's
communications; a member of a team it belongs to would then wait in one of
them until REFIR_MPI_TIMEOUT. The CLI ends the job (MPI_Abort) when a rank
fails, but a caller that keeps going after a failed run (the conformance
table, a library user) cannot. So, while a run lasts (`watched`), a rank that
fails sends one small notice to every other rank, on a communicator of its own
(a duplicate of COMM_WORLD that no collective uses), and every wait
(refir.world.mpi_job.poll) that has waited a little listens for one: a rank
that hears it stops with an OtherRankError naming the failed rank and its
message, `heard` (the rank that failed speaks for the job; the CLI keeps the
others quiet). Notices carry the run's number (every rank runs the same runs,
in order): one that arrives after its run is over is dropped. Imported only
under an MPI launch (it imports mpi4py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from mpi4py import MPI

from refir.errors import InputError, OtherRankError

NOTICE_TAG = 41


class Failures:
    """This rank's side of the notices: the communicator they travel on (made
    once, with the job's first communicator), the number of the current run
    (0: no run under way) and the sends still in flight."""

    def __init__(self) -> None:
        self.comm: MPI.Comm | None = None
        self.runs = 0
        self.current = 0
        self.sending: list[MPI.Request] = []

    def open(self) -> MPI.Request | None:
        """Start creating the notices' communicator (collective: every rank
        calls it where it creates its first communicator); the request to wait
        for, or None where it exists already."""
        if self.comm is not None:
            return None
        self.comm, req = MPI.COMM_WORLD.Idup()
        return req

    def tell(self, error: BaseException) -> None:
        """Every other rank: this one stopped in the current run, and why (one line)."""
        if self.comm is None or self.current == 0 or isinstance(error, (OtherRankError, InputError)) \
                or getattr(error, "agreed", False):
            return  # heard of another's failure, or one every rank meets alike: nothing to add
        kind = type(error).__name__
        text = str(error).strip().splitlines()[0] if str(error).strip() else kind
        self.sending = [r for r in self.sending if not r.Test()]
        notice = (self.current, kind, text)
        self.sending += [self.comm.isend(notice, dest=p, tag=NOTICE_TAG)
                         for p in range(self.comm.size) if p != self.comm.rank]

    def heard(self) -> OtherRankError | None:
        """Another rank's failure in the current run, if a notice of it has
        come (older notices are dropped); None outside a run."""
        if self.comm is None or self.current == 0:
            return None
        status = MPI.Status()
        while (msg := self.comm.improbe(source=MPI.ANY_SOURCE, tag=NOTICE_TAG, status=status)) is not None:
            source = status.Get_source()
            run, kind, text = msg.recv()
            if run >= self.current:
                error = OtherRankError(f"rank {source} stopped with {kind}: {text}")
                error.heard = True  # type: ignore[attr-defined]
                return error
        return None

    def close(self) -> None:
        if self.comm is not None and not MPI.Is_finalized():
            self.comm.Free()
        self.comm, self.sending = None, []


FAILURES = Failures()


@contextmanager
def watched() -> Iterator[None]:
    """One run on this rank: while it lasts, waits listen for another rank's
    failure, and a failure of this rank's is told to the others."""
    if FAILURES.current:  # a run inside a run (a backend calling spmd): the outer one watches
        yield
        return
    FAILURES.runs += 1
    FAILURES.current = FAILURES.runs
    try:
        yield
    except Exception as exc:
        FAILURES.tell(exc)
        raise
    finally:
        FAILURES.current = 0
