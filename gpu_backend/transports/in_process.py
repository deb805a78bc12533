"""Communications on device buffers: every rank in this process, or one per MPI
process, and in both cases results laid out as their type declares.

All ranks in one process (a single GPU, or the simulator) share one device, so
a communication is its spec, interp.collectives.exchange, run on device
buffers: concatenation and folds are kernels, splits are views, and a team of
one device hands its own block back (the device side of the arrays:
device_arrays.py). One rank per process goes through
gpu_backend/transports/rank_transport.py, which `transport_for` picks under MPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_backend.kernels.elementwise import laid_out
from gpu_backend.transports.device_arrays import Buffers, DeviceArrays
from interp.collectives import exchange
from interp.transport import Transport
from refir.ir import ops
from refir.ir.types import TensorType
from refir.lowering.teams import teams
from refir.world.ranks import World

if TYPE_CHECKING:
    from gpu_backend.transports.rank_transport import RankTransport


def alone(senders: tuple[int, ...], receivers: tuple[int, ...]) -> bool:
    """A team of one device that sends to itself: every communication's rule
    (interp.collectives) then gives back its own block (a fold of one part, a
    concatenation or split of one), so the block itself is the result; values
    are never written after they are made, so sharing it is exact, and
    LaidOut still lays it out in the result's order."""
    return len(senders) == 1 and senders == receivers


class DeviceInProcess:
    """Every rank in this process, every buffer on this process's device."""

    def __init__(self, world: int) -> None:
        self.hosted = tuple(range(world))

    def communicate(self, op: ops.Communication, src: TensorType, dst: TensorType, buffers: Buffers) -> Buffers:
        out: Buffers = {}
        for team in teams(op, src, dst):
            if alone(team.senders, team.receivers):
                out[team.senders[0]] = buffers[team.senders[0]]
                continue
            out.update(exchange(op, team, {s: buffers[s] for s in team.senders}, src, dst, DeviceArrays(dst.order)))
        return out

    def close(self) -> None:
        pass


class LaidOut:
    """Wraps a transport so received buffers land in the result's layout."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.hosted = inner.hosted

    def communicate(self, op: ops.Communication, src: TensorType, dst: TensorType, buffers: Buffers) -> Buffers:
        got = self.inner.communicate(op, src, dst, buffers)
        return {d: laid_out(x, dst.order) for d, x in got.items()}


def transport_for(world: World) -> DeviceInProcess | RankTransport:
    """In-process without MPI; under MPI, NCCL on GPUs or MPI under the simulator."""
    if world.comm is None:
        return DeviceInProcess(world.size)
    from gpu_backend.device import SIMULATED
    from gpu_backend.transports.rank_transport import RankTransport  # under MPI only
    from gpu_backend.transports.wires import MpiWire, NcclWire
    from interp.mpi.transport import MpiTransport

    mpi = MpiTransport()
    return RankTransport(mpi, MpiWire(mpi) if SIMULATED else NcclWire(mpi))
