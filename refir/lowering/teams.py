"""Which devices take part in a communication, and in which order.

Every transport (in-process, MPI, NCCL) forms its groups here and nowhere else.
A team lists its devices in team order, the order a cross-device reduction
folds in and an allgather concatenates in: the order of the mesh.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache

from refir.ir import ops
from refir.ir.program_cache import by_identity
from refir.ir.types import Mesh, TensorType


@dataclass(frozen=True)
class Team:
    devices: tuple[int, ...]  # everyone taking part, in team order
    senders: tuple[int, ...]  # whose buffers are read, in team order
    receivers: tuple[int, ...]  # who gets a result

    def index(self, device: int) -> int:
        """The device's place in team order (a dict: asked for every receiver
        of a team of thousands, a search of the tuple would be quadratic)."""
        return self._places[device]

    @cached_property
    def _places(self) -> dict[int, int]:
        return {d: i for i, d in enumerate(self.devices)}


def _along(mesh: Mesh, dids: tuple[str, ...]) -> list[Team]:
    """The distinct teams along mesh axes `dids`, in the order their first members come."""
    return [Team(t, t, t) for t in mesh.teams(dids)]


def _plus(first: tuple[int, ...], more: tuple[int, ...]) -> tuple[int, ...]:
    seen = set(first)  # a set: a gather onto a mesh of thousands asks once per device
    return first + tuple(d for d in more if d not in seen)


def teams(op: ops.Communication, src: TensorType, dst: TensorType) -> list[Team]:
    """All teams of one communication from a value of type `src` to `dst`."""
    return list(_teams(op, src, dst))


@lru_cache(maxsize=1024)  # asked on every rank at every communication of every run: types and ops are frozen
def _teams(op: ops.Communication, src: TensorType, dst: TensorType) -> tuple[Team, ...]:
    return tuple(_formed(op, src, dst))


def _formed(op: ops.Communication, src: TensorType, dst: TensorType) -> list[Team]:
    mesh = src.mesh
    match op:
        case ops.Allgather(mesh_axis=k) | ops.ReduceScatter(mesh_axis=k) | ops.AllToAll(mesh_axis=k):
            return _along(mesh, (k,))
        case ops.Allreduce(mesh_axes=ks):
            return _along(mesh, tuple(ks))
        case ops.Gather() | ops.Reduce():
            return [Team(_plus(mesh.devices, dst.mesh.devices), mesh.devices, dst.mesh.devices)]
        case ops.Scatter(root=root) | ops.Broadcast(root=root):
            return [Team(_plus((root,), dst.mesh.devices), (root,), dst.mesh.devices)]
        case ops.SendRecv():
            pairs = zip(mesh.devices, dst.mesh.devices)
            return [Team(_plus((s,), (r,)), (s,), (r,)) for s, r in pairs]
    raise TypeError(f"not a communication: {op!r}")


def teams_of(device: int, op: ops.Communication, src: TensorType, dst: TensorType) -> tuple[Team, ...]:
    """The teams `device` takes part in (two at most: a send_recv may both send
    its block and receive another)."""
    return _team_index(teams, op, src, dst).get(device, ())  # `teams` as it is now (conformance mutants replace it)


@by_identity  # asked on every rank at every communication of every run
def _team_index(form: Callable[..., list[Team]], op: ops.Communication, src: TensorType,
                dst: TensorType) -> dict[int, tuple[Team, ...]]:
    """Each device's teams, indexed in one pass (a linear search per device is quadratic)."""
    index: dict[int, list[Team]] = {}
    for team in form(op, src, dst):
        for d in team.devices:
            index.setdefault(d, []).append(team)
    return {d: tuple(ts) for d, ts in index.items()}
