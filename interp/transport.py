"""Transports: how the communications of the lowered program reach other ranks.

Both transports take the senders' buffers their process hosts and return the
receivers' buffers their process hosts; both form teams with refir.lowering.teams and
give identical bits. `InProcess` runs every rank in this process; `MpiTransport`
(interp/mpi/transport.py) runs one rank per MPI process.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from interp.collectives import exchange
from refir.ir import ops
from refir.ir.types import TensorType
from refir.lowering.teams import Team, teams, teams_of

# Arrays a transport hands out as buffers of their own though they do not own
# their memory (interp.mpi.shared_windows's result slots: shared memory that nothing
# else refers to while one is out), by id, so that spmd keeps them as it keeps
# arrays that own their memory rather than copying them. The array itself
# counts, not its views; an entry leaves with its array.
HANDED_OUT: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


def own_buffer(x: np.ndarray) -> bool:
    """Whether x is a buffer of its own: it owns its memory, or a transport
    handed it out as one."""
    return x.flags.owndata or HANDED_OUT.get(id(x)) is x


class Transport(Protocol):
    hosted: tuple[int, ...]  # the devices this process runs

    def communicate(self, op: ops.Communication, src: TensorType, dst: TensorType,
                    buffers: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Senders' buffers in, receivers' buffers out (for hosted devices)."""
        ...

    def close(self) -> None:
        """Release what the run held (communicators): a process runs many programs."""
        ...


class InProcess:
    """Every device in this process: a communication is its spec, team by team."""

    def __init__(self, world: int) -> None:
        self.hosted = tuple(range(world))

    def communicate(self, op: ops.Communication, src: TensorType, dst: TensorType,
                    buffers: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        out: dict[int, np.ndarray] = {}
        for team in teams(op, src, dst):
            out.update(exchange(op, team, {s: buffers[s] for s in team.senders}, src, dst))
        return out

    def close(self) -> None:
        pass


def rank_part(rank: int, op: ops.Communication, src: TensorType, dst: TensorType, buffers: dict[int, Any],
              run_team: Callable[[Team, Any], Any]) -> dict[int, Any]:
    """One rank's part of a communication, for transports with a rank per
    process: every team it is in runs with its buffer (where it sends), and it
    keeps the result where it receives."""
    out: dict[int, Any] = {}
    for team in teams_of(rank, op, src, dst):
        got = run_team(team, buffers.get(rank) if rank in team.senders else None)
        if rank in team.receivers:
            out[rank] = got
    return out
