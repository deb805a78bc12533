"""Communications on device buffers: every rank in this process, or one per MPI
process, and in both cases results laid out as their type declares.

All ranks in one process (a single GPU, or the simulator) share one device, so
a communication is its spec, interp.collectives.exchange, run on device
buffers: concatenation and folds are kernels, splits are views, and a team of
one device hands its own block back. One rank per process goes through
gpu_backend/rank_transport.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gpu_backend import functions
from gpu_backend.buffer import DeviceBuffer, upload
from gpu_backend.kernels import copy_into, elementwise, laid_out
from interp import sentinel
from interp.collectives import exchange
from interp.transport import Transport
from refir.ir import ops
from refir.ir.types import TensorType
from refir.lowering.teams import teams
from refir.world.ranks import World

if TYPE_CHECKING:
    from gpu_backend.rank_transport import RankTransport

Buffers = dict[int, DeviceBuffer]
_SENTINELS: dict[np.dtype, DeviceBuffer] = {}  # one element of each dtype's sentinel, on the device


def received(shape: tuple[int, ...], dtype: np.dtype, order: tuple[int, ...] | None = None) -> DeviceBuffer:
    """DeviceBuffer.empty for what a communication writes: filled with the
    sentinel first where it is armed (interp/sentinel.py), by a copy kernel
    from one element kept on the device (no upload per buffer)."""
    out = DeviceBuffer.empty(shape, dtype, order)
    if sentinel.armed() and out.size:
        one = _SENTINELS.get(np.dtype(dtype))
        if one is None:
            one = _SENTINELS[np.dtype(dtype)] = upload(sentinel.value(dtype).reshape(1))
        copy_into(out, one.broadcast_to(out.shape) if out.ndim else DeviceBuffer(one.data, one.offset, (), ()))
    return out


class DeviceArrays:
    """interp.collectives.Arrays on the device; new buffers are dense in `order`."""

    def __init__(self, order: tuple[int, ...]) -> None:
        self.order = order

    def concatenate(self, xs: list[DeviceBuffer], axis: int) -> DeviceBuffer:
        shape = list(xs[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        out = received(tuple(shape), xs[0].dtype, self.order)
        start = 0
        for x in xs:
            copy_into(out.take(axis, start, start + x.shape[axis]), x)
            start += x.shape[axis]
        return out

    def split(self, x: DeviceBuffer, n: int, axis: int) -> list[DeviceBuffer]:
        return x.split(n, axis)

    def fold(self, kind: str, parts: list[DeviceBuffer]) -> DeviceBuffer:
        """Left to right in team order, in the parts' own dtype (interp.impls.fold)."""
        out = received(parts[0].shape, parts[0].dtype, self.order)
        if len(parts) == 1:
            return copy_into(out, parts[0])
        combine = functions.binary(functions.COMBINE[kind], parts[0].dtype)
        elementwise(combine, out, parts[0], parts[1])
        for p in parts[2:]:
            elementwise(combine, out, out, p)
        return out


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
    from gpu_backend.rank_transport import RankTransport  # it builds on this module
    from gpu_backend.wires import MpiWire, NcclWire
    from interp.mpi.transport import MpiTransport

    mpi = MpiTransport()
    return RankTransport(mpi, MpiWire(mpi) if SIMULATED else NcclWire(mpi))
