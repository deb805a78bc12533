"""One rank per MPI process, through mpi4py.

Every buffer crosses MPI as C-contiguous bytes (mpi4py reads an F-ordered array
as raw memory, and has no float16), with the communicated axis moved to the
front. Reductions never use MPI's own: partials are gathered and folded in team
order, so the bits equal the in-process transport's. Every wait is a polite,
bounded poll: four ranks on two cores would otherwise busy-spin each other.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from math import prod

import numpy as np
from mpi4py import MPI

from interp.collectives import block_index, split
from interp.impls import fold
from interp.transport import rank_part
from refir import ops
from refir.errors import RunError
from refir.tables import registrar
from refir.teams import Team
from refir.types import TensorType, block_size, local_shape

TIMEOUT_S = float(os.environ.get("REFIR_MPI_TIMEOUT", "120"))
HEADER_TAG, DATA_TAG = 11, 12  # point-to-point: a block's shape, then its bytes


def wait(req: MPI.Request | list[MPI.Request], what: str = "a communication") -> None:
    """Wait for requests with short sleeps, and give up after TIMEOUT_S."""
    reqs = req if isinstance(req, list) else [req]
    start = time.monotonic()
    while not MPI.Request.Testall(reqs):
        waited = time.monotonic() - start
        if waited > TIMEOUT_S:
            raise RunError(f"rank {MPI.COMM_WORLD.rank}: gave up waiting for {what} after {TIMEOUT_S:.0f} s")
        # Yield the core at once for the first few milliseconds (fast collectives
        # stay fast), then sleep: ranks that wait long should leave it to those working.
        time.sleep(0 if waited < 5e-3 else 2e-4)


def barrier(comm: MPI.Comm = MPI.COMM_WORLD) -> None:
    wait(comm.Ibarrier(), "a barrier")


def to_bytes(x: np.ndarray, axis: int = 0) -> np.ndarray:
    front = np.moveaxis(x, axis, 0) if x.ndim else x  # a 0-d buffer has no axis to move
    return np.ascontiguousarray(front).reshape(-1).view(np.uint8)


def from_bytes(buf: np.ndarray, shape: tuple[int, ...], dtype: np.dtype, axis: int = 0) -> np.ndarray:
    """Bytes of a C-contiguous array whose `axis` was moved to the front."""
    if not shape:
        return buf.view(dtype).reshape(())
    front = (shape[axis],) + shape[:axis] + shape[axis + 1:]
    return np.moveaxis(buf.view(dtype).reshape(front), 0, axis)


class MpiTransport:
    def __init__(self, comm: MPI.Comm = MPI.COMM_WORLD) -> None:
        self.comm = comm
        self.rank = comm.rank
        self.hosted = (comm.rank,)
        self.comms: dict[tuple[int, ...], MPI.Comm] = {}

    def team_comm(self, devices: tuple[int, ...]) -> MPI.Comm:
        """A communicator whose ranks are the team's devices in team order."""
        if devices not in self.comms:
            group = self.comm.Get_group().Incl(list(devices))
            self.comms[devices] = self.comm.Create_group(group)
            group.Free()
        return self.comms[devices]

    def close(self) -> None:
        """Free the team communicators: MPICH runs out after about 2,000."""
        for comm in self.comms.values():
            comm.Free()
        self.comms.clear()

    def communicate(self, op: ops.Communication, src: TensorType, dst: TensorType,
                    buffers: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        rule = MPI_RULES[type(op)]
        return rank_part(self.rank, op, src, dst, buffers, lambda team, x: rule(self, op, team, x, src, dst))

    # ---- building blocks ---------------------------------------------------------------

    def send_shape(self, shape: tuple[int, ...], dest: int) -> None:
        """Tell a point-to-point receiver, who may know no symbol, what it gets."""
        wait(self.comm.Isend(np.array(shape, np.int64), dest=dest, tag=HEADER_TAG), "a shape header")

    def recv_shape(self, source: int, rank: int) -> tuple[int, ...]:
        header = np.empty(rank, np.int64)
        wait(self.comm.Irecv(header, source=source, tag=HEADER_TAG), "a shape header")
        return tuple(int(n) for n in header)

    def shape_from(self, comm: MPI.Comm, root: int, x: np.ndarray | None, rank: int) -> tuple[int, ...]:
        """The shape of the root's buffer, for members that hold none."""
        header = np.array(x.shape if x is not None else [0] * rank, np.int64)
        wait(comm.Ibcast(header, root=root), "a shape header")
        return tuple(int(n) for n in header)

    def allgather(self, comm: MPI.Comm, x: np.ndarray, axis: int,
                  shapes: list[tuple[int, ...]] | None = None) -> list[np.ndarray]:
        """Every member's block on every member; `shapes` gives each member's
        block shape where they differ (uneven blocks: MPI's v-variant)."""
        shapes = shapes or [x.shape] * comm.size
        send = to_bytes(x, axis)
        counts = [prod(s) * x.dtype.itemsize for s in shapes]
        recv = np.empty(sum(counts), np.uint8)
        if len(set(counts)) == 1:  # equal blocks (every rank sees the same counts): the plain collective
            wait(comm.Iallgather(send, recv), "an allgather")
        else:
            wait(comm.Iallgatherv(send, [recv, counts, _displs(counts), MPI.BYTE]), "an allgather")
        return [from_bytes(p, s, x.dtype, axis) for p, s in zip(_cut(recv, counts), shapes)]

    def gather_to(self, comm: MPI.Comm, root: int, x: np.ndarray | None, shapes: list[tuple[int, ...]],
                  dtype: np.dtype) -> list[np.ndarray]:
        """Blocks of the first len(shapes) team ranks (of those shapes), on team rank `root`."""
        counts = [prod(shapes[i]) * dtype.itemsize if i < len(shapes) else 0 for i in range(comm.size)]
        send = to_bytes(x) if x is not None else np.empty(0, np.uint8)
        recv = np.empty(sum(counts), np.uint8) if comm.rank == root else None
        spec = [recv, counts, _displs(counts), MPI.BYTE]
        wait(comm.Igatherv(send, spec if comm.rank == root else None, root=root), "a gather")
        if comm.rank != root:
            return []
        return [from_bytes(p, s, dtype) for p, s in zip(_cut(recv, counts), shapes)]

    def alltoall(self, comm: MPI.Comm, pieces: list[np.ndarray], shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
        """pieces[k] to member k; from member k, a piece of shapes[k] (MPI's v-variant)."""
        send = np.concatenate([to_bytes(p) for p in pieces])
        dtype = pieces[0].dtype
        sent = [p.nbytes for p in pieces]
        counts = [prod(s) * dtype.itemsize for s in shapes]
        recv = np.empty(sum(counts), np.uint8)
        # Always the v-variant: whether pieces are equal differs from rank to rank,
        # and every rank must make the same call.
        wait(comm.Ialltoallv([send, sent, _displs(sent), MPI.BYTE], [recv, counts, _displs(counts), MPI.BYTE]),
             "an all_to_all")
        return [from_bytes(p, s, dtype) for p, s in zip(_cut(recv, counts), shapes)]


def _displs(counts: list[int]) -> list[int]:
    return [sum(counts[:i]) for i in range(len(counts))]


def _cut(buf: np.ndarray, counts: list[int]) -> list[np.ndarray]:
    return [buf[o:o + c] for o, c in zip(_displs(counts), counts)]


def _blocks(t: TensorType, devices: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Each device's block shape under a resolved (symbol-free) type."""
    return [local_shape(t, {}, d) for d in devices]


Arr = np.ndarray | None  # None where this rank sends or receives nothing
Rule = Callable[[MpiTransport, object, Team, Arr, TensorType, TensorType], Arr]
MPI_RULES: dict[type, Rule] = {}


rule = registrar(MPI_RULES)


@rule(ops.Allgather)
def _allgather(t: MpiTransport, op: ops.Allgather, team: Team, x: Arr, src: TensorType,
               dst: TensorType) -> Arr:
    return np.concatenate(t.allgather(t.team_comm(team.devices), x, op.axis, _blocks(src, team.devices)),
                          axis=op.axis)


@rule(ops.Allreduce)
def _allreduce(t: MpiTransport, op: ops.Allreduce, team: Team, x: Arr, src: TensorType,
               dst: TensorType) -> Arr:
    return fold(op.kind, t.allgather(t.team_comm(team.devices), x, 0))


@rule(ops.ReduceScatter)
def _reduce_scatter(t: MpiTransport, op: ops.ReduceScatter, team: Team, x: Arr, src: TensorType,
                    dst: TensorType) -> Arr:
    comm = t.team_comm(team.devices)
    pieces = split(x, comm.size, op.axis)  # piece k to team member k, which expects block k
    return fold(op.kind, t.alltoall(comm, pieces, [pieces[comm.rank].shape] * comm.size))


@rule(ops.AllToAll)
def _all_to_all(t: MpiTransport, op: ops.AllToAll, team: Team, x: Arr, src: TensorType,
                dst: TensorType) -> Arr:
    comm = t.team_comm(team.devices)
    mine = block_size(src.axes[op.split_axis].extent, comm.size, comm.rank)
    shapes = [tuple(mine if i == op.split_axis else n for i, n in enumerate(s)) for s in _blocks(src, team.devices)]
    return np.concatenate(t.alltoall(comm, split(x, comm.size, op.split_axis), shapes), axis=op.concat_axis)


def _gathered(t: MpiTransport, team: Team, x: Arr, src: TensorType) -> list[np.ndarray]:
    """Every receiver collects the senders' blocks (team ranks 0..senders-1)."""
    comm = t.team_comm(team.devices)
    shapes = _blocks(src, team.senders)
    mine: list[np.ndarray] = []
    for r in team.receivers:
        got = t.gather_to(comm, team.index(r), x, shapes, src.np_dtype)
        if r == t.rank:
            mine = got
    return mine


@rule(ops.Gather)
def _gather(t: MpiTransport, op: ops.Gather, team: Team, x: Arr, src: TensorType,
            dst: TensorType) -> Arr:
    blocks = _gathered(t, team, x, src)
    return np.concatenate(blocks, axis=op.axis) if blocks else None


@rule(ops.Reduce)
def _reduce(t: MpiTransport, op: ops.Reduce, team: Team, x: Arr, src: TensorType,
            dst: TensorType) -> Arr:
    blocks = _gathered(t, team, x, src)
    return fold(op.kind, blocks) if blocks else None


@rule(ops.Broadcast)
def _broadcast(t: MpiTransport, op: ops.Broadcast, team: Team, x: Arr, src: TensorType,
               dst: TensorType) -> Arr:
    comm = t.team_comm(team.devices)
    shape = t.shape_from(comm, 0, x, src.rank)
    buf = to_bytes(x) if x is not None else np.empty(int(np.prod(shape)) * src.np_dtype.itemsize, np.uint8)
    wait(comm.Ibcast(buf, root=0), "a broadcast")
    return from_bytes(buf, shape, src.np_dtype)


@rule(ops.Scatter)
def _scatter(t: MpiTransport, op: ops.Scatter, team: Team, x: Arr, src: TensorType,
             dst: TensorType) -> Arr:
    comm = t.team_comm(team.devices)
    n = len(team.receivers)
    counts = [prod(local_shape(dst, {}, d)) * src.np_dtype.itemsize if d in team.receivers else 0
              for d in team.devices]
    displs = _displs(counts)
    spec = None
    if comm.rank == 0:
        parts = split(x, n, op.axis)
        send = [to_bytes(parts[block_index(dst, d, op.axis)], op.axis)
                for d in team.devices if d in team.receivers]
        spec = [np.concatenate(send) if send else np.empty(0, np.uint8), counts, displs, MPI.BYTE]
    recv = np.empty(counts[comm.rank], np.uint8)
    wait(comm.Iscatterv(spec, recv, root=0), "a scatter")
    if team.devices[comm.rank] not in team.receivers:
        return None
    return from_bytes(recv, local_shape(dst, {}, t.rank), src.np_dtype, op.axis)


@rule(ops.SendRecv)
def _send_recv(t: MpiTransport, op: ops.SendRecv, team: Team, x: Arr, src: TensorType,
               dst: TensorType) -> Arr:
    (s,), (r,) = team.senders, team.receivers
    if s == r:
        return x
    if t.rank == s:
        t.send_shape(x.shape, r)
        wait(t.comm.Isend(to_bytes(x), dest=r, tag=DATA_TAG), "a send")
        return None
    shape = t.recv_shape(s, src.rank)
    buf = np.empty(int(np.prod(shape)) * src.np_dtype.itemsize, np.uint8)
    wait(t.comm.Irecv(buf, source=s, tag=DATA_TAG), "a receive")
    return from_bytes(buf, shape, src.np_dtype)
