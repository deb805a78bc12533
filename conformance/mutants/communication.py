"""Mutants of how a communication moves blocks: which devices form a team and
in what order, which mesh axis a reduction runs over, how a sender's buffer is
read and the result laid out. Under MPI every rank patches the transport's
rules alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any
from unittest import mock

import numpy as np

import interp.collectives
import interp.spmd
from conformance.mutants.patching import OTHER, TeamsOf, as_row_major, even, mpi_rules, patch_teams
from conformance.mutants.registry import mutant
from refir.ir import ops
from refir.ir.types import TensorType, local_shape
from refir.lowering.teams import Team


def _reading(rule: Callable[..., Any], fix: Callable[[np.ndarray], np.ndarray]) -> Callable[..., Any]:
    """An exchange rule that first passes every sender's block through `fix`."""

    def wrapped(op: object, team: Team, x: dict[int, np.ndarray], *rest: Any) -> Any:
        return rule(op, team, {d: fix(b) for d, b in x.items()}, *rest)

    return wrapped


def _mpi_reading(rule: Callable[..., Any], fix: Callable[[np.ndarray], np.ndarray]) -> Callable[..., Any]:
    """An MPI rule that first passes this rank's block (if it sends one) through `fix`."""

    def wrapped(t: object, op: object, team: Team, x: np.ndarray | None, *rest: Any) -> Any:
        return rule(t, op, team, None if x is None else fix(x), *rest)

    return wrapped


@mutant("communications read a strided buffer as if it were row-major", by="values")
def strided_comm_as_row_major() -> Iterator[None]:
    rules, mpi = interp.collectives.EXCHANGES, mpi_rules()
    with mock.patch.dict(rules, {c: _reading(r, as_row_major) for c, r in rules.items()}), \
            mock.patch.dict(mpi, {c: _mpi_reading(r, as_row_major) for c, r in mpi.items()}):
        yield


@mutant("the teams of a collective along a mesh axis list their devices in sorted order, not in mesh order",
        by="values")
def teams_sorted() -> Iterator[None]:
    def change(op: ops.Communication, src: TensorType, dst: TensorType, original: TeamsOf) -> list[Team]:
        # Teams with a root (gather, scatter, broadcast, send_recv), and teams moving uneven
        # blocks, keep their order: reordering them breaks the MPI transport's protocol on some
        # ranks only (block sizes follow the types), a hang rather than a bug.
        if not even(src, dst):
            return original(op, src, dst)
        return [Team(*(tuple(sorted(t.devices)),) * 3) if t.senders == t.receivers == t.devices else t
                for t in original(op, src, dst)]

    with ExitStack() as stack:
        patch_teams(stack, change)
        yield


@mutant("a reduction on a 2-D mesh reduces over the other mesh axis", by="values")
def reduction_wrong_mesh_axis() -> Iterator[None]:
    def change(op: ops.Communication, src: TensorType, dst: TensorType, original: TeamsOf) -> list[Team]:
        if not even(src, dst):  # as in teams_sorted: uneven blocks in the wrong team would hang MPI
            return original(op, src, dst)
        if src.mesh.ndim >= 2 and isinstance(op, ops.Allreduce):
            op = ops.Allreduce(op.kind, tuple(OTHER[k] for k in op.mesh_axes))
        elif src.mesh.ndim >= 2 and isinstance(op, ops.ReduceScatter):
            op = ops.ReduceScatter(op.kind, OTHER[op.mesh_axis], op.axis)
        return original(op, src, dst)

    with ExitStack() as stack:
        patch_teams(stack, change)
        yield


@mutant("an allgather concatenates blocks in rank order, not in mesh order", by="values")
def allgather_rank_order() -> Iterator[None]:
    original = interp.collectives.EXCHANGES[ops.Allgather]

    def local(op: object, team: Team, x: dict, *rest: Any) -> Any:
        ranked = Team(team.devices, tuple(sorted(team.senders)), team.receivers)
        return original(op, ranked, x, *rest)

    mpi = mpi_rules()
    patches = {}
    if ops.Allgather in mpi:
        def remote(t: Any, op: Any, team: Team, x: np.ndarray, src: TensorType, *rest: Any) -> np.ndarray:
            shapes = [local_shape(src, {}, d) for d in team.devices]
            blocks = t.allgather(t.team_comm(team.devices), x, op.axis, shapes)
            return np.concatenate([blocks[team.index(d)] for d in sorted(team.devices)], axis=op.axis)
        patches = {ops.Allgather: remote}
    with mock.patch.dict(interp.collectives.EXCHANGES, {ops.Allgather: local}), mock.patch.dict(mpi, patches):
        yield


@mutant("a communication leaves its result row-major, whatever its layout", by="strides")
def comm_result_row_major() -> Iterator[None]:
    def communicate(self: interp.spmd.NumpyTransport, op: ops.Communication, src: TensorType, dst: TensorType,
                    buffers: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        return {d: np.array(x, order="C") for d, x in self.inner.communicate(op, src, dst, buffers).items()}

    with mock.patch.object(interp.spmd.NumpyTransport, "communicate", communicate):
        yield
