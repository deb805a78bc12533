"""Wires: how packed device arrays travel between ranks.

`NcclWire` keeps them on the GPU: nccl4py communicators, one per team (the
world's for point-to-point), bootstrapped with a unique id sent over the
team's MPI communicator, one GPU per rank. They live in refir.mpi.COMMS, made
on a team's first use and kept for every later run (NCCL sets up connections
lazily on first use: about a second that only the first run pays). Each
operation is marked as queued, and the next copy between host and device
first waits for it, politely and boundedly (gpu_backend/pending.py), so that
a rank that never joins ends the job within REFIR_MPI_TIMEOUT instead of
hanging it, while the host goes on queueing the steps after a collective.
Data moves as bytes (NCCL knows no bool or int16, and ignores strides: the
arrays here are always contiguous).
NCCL reduces natively only where refir's numerics allow its order: integer
sum, prod, max and min are exact in any order; float sum and prod come within
the spec's bound (not bit-identical to spmd's team-order fold); float max/min
are folded by refir itself, since NCCL's need not propagate NaN.

`MpiWire` serves the simulator: MPI cannot read device memory, so each array
is staged through the host as bytes, and never reduces (the caller folds on
the device, in team order).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_backend import pending
from gpu_backend.memory import Memory
from interp.mpi_transport import MpiTransport
from refir.mpi import COMMS, bcast_bytes, wait

Arr = Any  # a 1-D contiguous device array
DATA_TAG = 22


def _host(a: Arr) -> np.ndarray:
    """The bytes of a device array, on the host (never hand MPI a device array)."""
    host = a.view(np.uint8).copy_to_host()
    assert isinstance(host, np.ndarray)
    return host


def _to_device(host: np.ndarray, a: Arr) -> None:
    if a.size:
        a.view(np.uint8).copy_to_device(host)


class MpiWire:
    def __init__(self, mpi: MpiTransport) -> None:
        self.mpi = mpi

    def start(self) -> None:
        pass

    def native(self, kind: str, dtype: np.dtype) -> bool:
        return False

    def allgather(self, team: tuple[int, ...], send: Arr, recv: Arr) -> None:
        got = np.empty(recv.nbytes, np.uint8)
        wait(self.mpi.team_comm(team).Iallgather(_host(send), got), "an allgather")
        _to_device(got, recv)

    def alltoall(self, team: tuple[int, ...], send: Arr, recv: Arr) -> None:
        got = np.empty(recv.nbytes, np.uint8)
        wait(self.mpi.team_comm(team).Ialltoall(_host(send), got), "an all_to_all")
        _to_device(got, recv)

    def broadcast(self, team: tuple[int, ...], buf: Arr, root: int) -> None:
        comm = self.mpi.team_comm(team)
        host = _host(buf) if comm.rank == root else np.empty(buf.nbytes, np.uint8)
        wait(comm.Ibcast(host, root=root), "a broadcast")
        if comm.rank != root:
            _to_device(host, buf)

    def allreduce(self, team: tuple[int, ...], send: Arr, recv: Arr, kind: str) -> None:
        raise NotImplementedError("MpiWire never reduces: native() is False")

    def reduce_scatter(self, team: tuple[int, ...], send: Arr, recv: Arr, kind: str) -> None:
        raise NotImplementedError("MpiWire never reduces: native() is False")

    def p2p(self, sends: list[tuple[int, Arr]], recvs: list[tuple[int, Arr]]) -> None:
        comm = self.mpi.comm
        got = [np.empty(a.nbytes, np.uint8) for _, a in recvs]
        requests = [comm.Irecv(g, source=peer, tag=DATA_TAG) for (peer, _), g in zip(recvs, got)]
        requests += [comm.Isend(_host(a), dest=peer, tag=DATA_TAG) for peer, a in sends]
        wait(requests, "a point-to-point exchange")
        for (_, a), g in zip(recvs, got):
            _to_device(g, a)


# NCCL's types, and the reductions whose result may come in NCCL's order.
_NCCL_TYPES = {np.dtype(t) for t in (np.int8, np.uint8, np.int32, np.int64, np.float16, np.float32, np.float64)}


class _Direct:
    """A team's nccl4py communicator whose four common collectives, on Memory
    buffers (gpu_backend/memory.py), call NCCL's binding directly with the
    same arguments nccl4py passes: nccl4py resolves every buffer anew (a torch
    probe, a cupy probe, the array interface, a device query), tens of µs a
    call at small sizes. Anything else, and every other method, is nccl4py's."""

    def __init__(self, comm: Any, nccl: Any) -> None:
        from nccl.bindings import nccl as binding

        self.comm, self.binding, self.types = comm, binding, nccl.NcclDataType
        self.handle, self.nranks = comm._comm, comm.nranks

    def __getattr__(self, name: str) -> Any:
        return getattr(self.comm, name)

    def _type(self, a: Memory) -> int:
        return int(self.types.from_numpy_dtype(a.dtype))

    def allreduce(self, send: Arr, recv: Arr, op: Any) -> None:
        if type(send) is Memory and type(recv) is Memory and send.dtype == recv.dtype and recv.size >= send.size:
            self.binding.all_reduce(send.ptr, recv.ptr, send.size, self._type(send), int(op), self.handle, 0)
        else:
            self.comm.allreduce(send, recv, op)

    def allgather(self, send: Arr, recv: Arr) -> None:
        if type(send) is Memory and type(recv) is Memory and send.dtype == recv.dtype and \
                recv.size >= self.nranks * send.size:
            self.binding.all_gather(send.ptr, recv.ptr, send.size, self._type(send), self.handle, 0)
        else:
            self.comm.allgather(send, recv)

    def reduce_scatter(self, send: Arr, recv: Arr, op: Any) -> None:
        count = send.size // self.nranks
        if type(send) is Memory and type(recv) is Memory and send.dtype == recv.dtype and recv.size >= count >= 1:
            self.binding.reduce_scatter(send.ptr, recv.ptr, count, self._type(send), int(op), self.handle, 0)
        else:
            self.comm.reduce_scatter(send, recv, op)

    def broadcast(self, send: Arr, recv: Arr, root: int) -> None:
        if type(send) is Memory and type(recv) is Memory and send.dtype == recv.dtype and send.size == recv.size:
            self.binding.broadcast(send.ptr, recv.ptr, recv.size, self._type(recv), root, self.handle, 0)
        else:
            self.comm.broadcast(send, recv, root)


class NcclWire:
    def __init__(self, mpi: MpiTransport) -> None:
        import nccl.core as nccl

        self.nccl = nccl
        self.mpi = mpi
        self.world: Any = None

    def _init(self, comm: Any) -> Any:
        """A NCCL communicator over the ranks of MPI communicator `comm` (collective)."""
        uid = np.frombuffer(bytes(self.nccl.get_unique_id()), np.uint8).copy() if comm.rank == 0 else None
        uid = bcast_bytes(comm, uid, 0, "a NCCL unique id")
        made = self.nccl.Communicator.init(comm.size, comm.rank, self.nccl.UniqueId.from_bytes(uid.tobytes()))
        return _Direct(made, self.nccl)

    @staticmethod
    def _free(comm: Any) -> None:
        comm.abort()  # unlike destroy, it never waits for operations a failed run left behind

    def start(self) -> None:
        self.world = self.team(tuple(range(self.mpi.comm.size)))

    def team(self, devices: tuple[int, ...]) -> Any:
        return COMMS.other("nccl", devices, self._init, self._free)

    def settle(self, what: str) -> None:
        """`what` is queued: the host waits for it (bounded) before it next blocks on the GPU."""
        pending.queued(what)

    def native(self, kind: str, dtype: np.dtype) -> bool:
        exact = kind in ("sum", "prod") or (kind in ("max", "min") and dtype.kind in "iu")
        return exact and dtype in _NCCL_TYPES

    def _op(self, kind: str) -> Any:
        return {"sum": self.nccl.SUM, "prod": self.nccl.PROD, "max": self.nccl.MAX, "min": self.nccl.MIN}[kind]

    def allgather(self, team: tuple[int, ...], send: Arr, recv: Arr) -> None:
        if recv.size:
            self.team(team).allgather(send.view(np.uint8), recv.view(np.uint8))
            self.settle("an NCCL allgather")

    def alltoall(self, team: tuple[int, ...], send: Arr, recv: Arr) -> None:
        if recv.size:
            self.team(team).alltoall(send.view(np.uint8), recv.view(np.uint8))
            self.settle("an NCCL alltoall")

    def broadcast(self, team: tuple[int, ...], buf: Arr, root: int) -> None:
        if buf.size:
            self.team(team).broadcast(buf.view(np.uint8), buf.view(np.uint8), root)
            self.settle("an NCCL broadcast")

    def allreduce(self, team: tuple[int, ...], send: Arr, recv: Arr, kind: str) -> None:
        if recv.size:
            self.team(team).allreduce(send, recv, self._op(kind))
            self.settle("an NCCL allreduce")

    def reduce_scatter(self, team: tuple[int, ...], send: Arr, recv: Arr, kind: str) -> None:
        if recv.size:
            self.team(team).reduce_scatter(send, recv, self._op(kind))
            self.settle("an NCCL reduce scatter")

    def p2p(self, sends: list[tuple[int, Arr]], recvs: list[tuple[int, Arr]]) -> None:
        with self.nccl.group():
            for peer, a in sends:
                if a.size:
                    self.world.send(a.view(np.uint8), peer)
            for peer, a in recvs:
                if a.size:
                    self.world.recv(a.view(np.uint8), peer)
        self.settle("an NCCL point-to-point exchange")
