"""Bounded waits for communications queued on the GPU, deferred to where the host blocks.

An NCCL operation is queued on the legacy default stream and returns at once;
if a peer never joins it, the GPU waits for ever, and so does any call that
synchronises with the stream (a copy to or from the host, cuda.synchronize).
The NCCL wire therefore marks each operation it queues (`queued`), and every
copy between host and device first calls `settle`, which waits for the GPU
through an event, politely and within REFIR_MPI_TIMEOUT (refir.world.mpi_job.poll),
and raises a RunError naming the first unsettled operation instead of hanging.

The wait used to follow every NCCL call (0.1-0.4 ms a call at small sizes, in
polls of the event); deferred, the host goes on to queue the steps after a
collective while the GPU runs it, and a run waits once, before its results
come back. Work on the stream is ordered, so nothing else needs the wait:
kernels after a collective run after it, and a pooled block freed after it
is reused only by later work on the same stream.
"""

from __future__ import annotations

from typing import Any

_pending: str | None = None  # the first operation queued since the last settle
_event: Any = None


def queued(what: str) -> None:
    """`what` (say "an NCCL allreduce") is queued on the GPU: settle before the host blocks."""
    global _pending
    if _pending is None:
        _pending = what


def settle() -> None:
    """Wait, politely and within the timeout, for what was queued; nothing to do if nothing was."""
    global _pending, _event
    if _pending is None:
        return
    what, _pending = _pending, None  # a timeout fails the run; the next one starts afresh
    from gpu_backend.device import cuda
    from refir.world.mpi_job import poll

    if _event is None:
        _event = cuda.event(timing=False)
    _event.record()
    poll(_event.query, f"{what} on the GPU")


def unsettled() -> str | None:
    """The operation a settle would wait for (None: nothing queued)."""
    return _pending
