"""The device work a run queues, noted while gpu_backend/launches/replay.py records it.

A few places queue work on the GPU: the driver launches (DirectLaunch, which
every kept and cached launch goes through), the driver's device-to-device
copy, the direct cuBLAS call (gpu_backend/kernels/gemm.py), and the host copies. While
a run is recorded (`active` is set), each of them either notes itself here
as a call to make again with the same arguments, or, where it cannot be
repeated as it is (a launch through numba or cuda.core, cupy's own matmul, a
host copy inside the steps), taints the recording, which is then not kept.
Outside a recording each hook costs one attribute test. Work queued by
another thread while a run is recorded (the hooks see every thread) taints
the recording: a replay must repeat this run's work and no other's.

Under MPI the NCCL wire (gpu_backend/transports/wires.py) notes its calls too, as
`collective`s: each queues an NCCL operation (or orders the streams around
one) on a communicator that lives for the process, and `require`s that the
communicator found for its team is still that one (refir.close() frees it);
a replay checks every such requirement before it queues anything.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Recording:
    """What one run queued, in order, and why it cannot be replayed (None: it can)."""

    __slots__ = ("calls", "tainted", "host_copies", "gemms", "thread", "collectives", "requires")

    def __init__(self) -> None:
        self.thread = threading.get_ident()  # the recorded run's; work from any other taints it
        self.calls: list[tuple[Any, ...]] = []  # ("call" or "collective", fn, args), ("input", ...), ("output", ...)
        self.tainted: str | None = None
        self.host_copies = False  # True while the run uploads its inputs or downloads its results
        self.gemms: list[tuple[int, int]] = []  # (cudaDataType, cuBLAS compute type) of each direct cuBLAS call
        self.collectives = 0  # calls noted by `collective`: a replay of them needs every rank's (replay.py)
        self.requires: dict[Any, Callable[[], bool]] = {}  # what a replay checks first, by what it is about


active: Recording | None = None
# Bumped whenever something a recorded run assumed may have changed (launch
# geometry knobs and their plans): replay.py keys its traces by it.
generation = 0


def note(fn: Callable[..., Any], *args: Any) -> None:
    """`fn(*args)` was queued and can be queued again as it is."""
    if active is not None:
        if threading.get_ident() != active.thread:
            taint("work queued by another thread")
        active.calls.append(("call", fn, args))


def collective(fn: Callable[..., Any], *args: Any) -> None:
    """`fn(*args)`, a call that only every rank of the team makes together
    (an NCCL operation, or the stream ordering around one), was queued and
    can be queued again as it is, by a replay that every rank makes."""
    if active is not None:
        if threading.get_ident() != active.thread:
            taint("work queued by another thread")
        active.calls.append(("collective", fn, args))
        active.collectives += 1


def require(about: Any, check: Callable[[], bool]) -> None:
    """A replay of this run must first find `check()` true (say, that the
    communicator a collective used is still the team's); one check per `about`."""
    if active is not None:
        active.requires.setdefault(about, check)


def taint(why: str) -> None:
    """Work was done that a replay would not repeat: the recording is not kept."""
    if active is not None and active.tainted is None:
        active.tainted = why


def host_copy(what: str) -> None:
    """A copy between host and device: a run's own inputs and results are
    replayed with the run's data; any other taints the recording."""
    if active is not None and (not active.host_copies or threading.get_ident() != active.thread):
        taint(f"a host copy ({what}) inside the steps or by another thread")


def forget() -> None:
    """Every recorded run is stale (called where launch plans are cleared)."""
    global generation
    generation += 1
