"""Wires: how dense device buffers travel between ranks.

A wire is handed DeviceBuffers whose elements fill data[offset:offset+size]
(dense in some order) and moves them as they lie in memory.

`NcclWire` keeps them on the GPU: nccl4py communicators, one per team (the
world's for point-to-point), bootstrapped with a unique id sent over the
team's MPI communicator, one GPU per rank. They live in refir.world.mpi_job.COMMS, made
on a team's first use and kept for every later run (NCCL sets up connections
lazily on first use: about a second that only the first run pays). NCCL runs
on a stream of its own (as torch runs it; one for the process), after
everything issued before on the legacy default stream, where the kernels
run, and the default stream waits for it in turn: kernels after a collective
run after it, and a pooled block freed after it (gpu_backend/buffers/pool.py) is
reused only by work ordered after it. The host does not wait per call: each
operation is marked as queued, and the next copy between host and device
first waits for it, politely and within REFIR_MPI_TIMEOUT
(gpu_backend/transports/pending.py), so a rank that never joins ends the job instead of
hanging it, while the host goes on queueing the steps after a collective.
Calls go through nccl4py's bindings with raw pointers (its Communicator
methods resolve each buffer through cuda.core, tens of µs a call). Data moves
as bytes (NCCL knows no bool or int16, and ignores strides).
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

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.launches import recording
from gpu_backend.transports import pending
from interp.mpi.transport import MpiTransport
from interp.sentinel import empty_bytes
from refir.errors import RunError
from refir.world.mpi_job import COMMS, bcast_bytes, wait

DATA_TAG = 22


def _host(b: DeviceBuffer) -> np.ndarray:
    """The bytes of a dense buffer, on the host (never hand MPI a device array)."""
    host = b.flat().view(np.uint8).copy_to_host()
    assert isinstance(host, np.ndarray)
    return host


def _to_device(host: np.ndarray, b: DeviceBuffer) -> None:
    if b.size:
        b.flat().view(np.uint8).copy_to_device(host)


def _nbytes(b: DeviceBuffer) -> int:
    return b.size * b.data.dtype.itemsize


class MpiWire:
    def __init__(self, mpi: MpiTransport) -> None:
        self.mpi = mpi

    def start(self) -> None:
        pass

    def native(self, kind: str, dtype: np.dtype) -> bool:
        return False

    def allgather(self, team: tuple[int, ...], send: DeviceBuffer, recv: DeviceBuffer) -> None:
        got = empty_bytes(_nbytes(recv), recv.dtype)
        wait(self.mpi.team_comm(team).Iallgather(_host(send), got), "an allgather")
        _to_device(got, recv)

    def alltoall(self, team: tuple[int, ...], send: DeviceBuffer, recv: DeviceBuffer) -> None:
        got = empty_bytes(_nbytes(recv), recv.dtype)
        wait(self.mpi.team_comm(team).Ialltoall(_host(send), got), "an all_to_all")
        _to_device(got, recv)

    def broadcast(self, team: tuple[int, ...], buf: DeviceBuffer, root: int) -> None:
        comm = self.mpi.team_comm(team)
        host = _host(buf) if comm.rank == root else empty_bytes(_nbytes(buf), buf.dtype)
        wait(comm.Ibcast(host, root=root), "a broadcast")
        if comm.rank != root:
            _to_device(host, buf)

    def allreduce(self, team: tuple[int, ...], send: DeviceBuffer, recv: DeviceBuffer, kind: str) -> None:
        raise NotImplementedError("MpiWire never reduces: native() is False")

    def reduce_scatter(self, team: tuple[int, ...], send: DeviceBuffer, recv: DeviceBuffer, kind: str) -> None:
        raise NotImplementedError("MpiWire never reduces: native() is False")

    def start_reduce_scatter(self, team: tuple[int, ...], send: DeviceBuffer, recv: DeviceBuffer,
                             kind: str) -> None:
        raise NotImplementedError("MpiWire never reduces: native() is False")

    def p2p(self, sends: list[tuple[int, DeviceBuffer]], recvs: list[tuple[int, DeviceBuffer]]) -> None:
        comm = self.mpi.comm
        got = [empty_bytes(_nbytes(a), a.dtype) for _, a in recvs]
        requests = [comm.Irecv(g, source=peer, tag=DATA_TAG) for (peer, _), g in zip(recvs, got)]
        requests += [comm.Isend(_host(a), dest=peer, tag=DATA_TAG) for peer, a in sends]
        wait(requests, "a point-to-point exchange")
        for (_, a), g in zip(recvs, got):
            _to_device(g, a)

    def start_p2p(self, sends: list[tuple[int, DeviceBuffer]], recvs: list[tuple[int, DeviceBuffer]]) -> None:
        self.p2p(sends, recvs)  # staged through the host: done when it returns

    def finish(self, what: str) -> None:
        pass


# NCCL's stream and the two events that order it, one set per CUDA context for
# the process's life (a wire is made per run): context handle -> (stream, ready, done).
_STREAMS: dict[int, tuple[Any, Any, Any]] = {}

# NCCL's types, and the reductions whose result may come in NCCL's order.
_NCCL_TYPES = {np.dtype(t) for t in (np.int8, np.uint8, np.int32, np.int64, np.float16, np.float32, np.float64)}


class NcclWire:
    def __init__(self, mpi: MpiTransport) -> None:
        import nccl.core as nccl
        from cuda.bindings import driver
        from nccl.bindings import nccl as raw

        self.nccl, self.raw, self.driver = nccl, raw, driver
        self.mpi = mpi
        self.world: Any = None
        self.stream: Any = None  # and its two events: the process's, found on first use
        self.ready = self.done = None

    def _init(self, comm: Any) -> Any:
        """A NCCL communicator over the ranks of MPI communicator `comm` (collective)."""
        uid = np.frombuffer(bytes(self.nccl.get_unique_id()), np.uint8).copy() if comm.rank == 0 else None
        uid = bcast_bytes(comm, uid, 0, "a NCCL unique id")
        return self.nccl.Communicator.init(comm.size, comm.rank, self.nccl.UniqueId.from_bytes(uid.tobytes()))

    @staticmethod
    def _free(comm: Any) -> None:
        comm.abort()  # unlike destroy, it never waits for operations a failed run left behind

    def start(self) -> None:
        self.world = self.team(self._everyone())

    def _everyone(self) -> tuple[int, ...]:
        return tuple(range(self.mpi.comm.size))

    def team(self, devices: tuple[int, ...]) -> Any:
        return COMMS.other("nccl", devices, self._init, self._free)

    def _comm(self, devices: tuple[int, ...]) -> Any:
        """The team's communicator as the bindings take it (a handle, not owning
        it); a replay of this run must find the same communicator for the team."""
        owner = self.team(devices)
        recording.require(("nccl", devices), lambda: COMMS.found("nccl", devices) is owner)
        return self.raw.Comm(owner.ptr)

    def _check(self, result: tuple[Any, ...]) -> tuple[Any, ...]:
        if result[0] != self.driver.CUresult.CUDA_SUCCESS:
            raise RunError(f"a CUDA driver call for NCCL failed: {result[0]!r}")
        return result

    def _begin(self) -> int:
        """The wire's stream, made to wait for what the legacy default stream has queued."""
        cu = self.driver
        if self.stream is None:
            context = int(self._check(cu.cuCtxGetCurrent())[1])
            if context not in _STREAMS:  # the highest priority: its blocks go first where kernels run alongside
                highest = self._check(cu.cuCtxGetStreamPriorityRange())[2]
                flags = int(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
                _STREAMS[context] = (
                    self._check(cu.cuStreamCreateWithPriority(int(cu.CUstream_flags.CU_STREAM_NON_BLOCKING),
                                                              highest))[1],
                    self._check(cu.cuEventCreate(flags))[1], self._check(cu.cuEventCreate(flags))[1])
            self.stream, self.ready, self.done = _STREAMS[context]
        self._check(cu.cuEventRecord(self.ready, cu.CUstream(0)))
        self._check(cu.cuStreamWaitEvent(self.stream, self.ready, 0))
        return int(self.stream)

    def settle(self, what: str) -> None:
        """`what` is queued on the wire's stream: the kernels' stream waits for it
        on the GPU, and the host (boundedly) before it next blocks on the GPU."""
        cu = self.driver
        self._check(cu.cuEventRecord(self.done, self.stream))
        self._check(cu.cuStreamWaitEvent(cu.CUstream(0), self.done, 0))
        pending.queued(what)

    def native(self, kind: str, dtype: np.dtype) -> bool:
        exact = kind in ("sum", "prod") or (kind in ("max", "min") and dtype.kind in "iu")
        return exact and dtype in _NCCL_TYPES

    def _op(self, kind: str) -> int:
        return int({"sum": self.nccl.SUM, "prod": self.nccl.PROD, "max": self.nccl.MAX, "min": self.nccl.MIN}[kind])

    def _typed(self, b: DeviceBuffer) -> tuple[int, int, int]:
        """Pointer, element count and NCCL type of a dense buffer's elements."""
        return _pointer(b), b.size, int(self.nccl.NcclDataType.from_numpy_dtype(b.data.dtype))

    def _bytes(self, b: DeviceBuffer) -> tuple[int, int, int]:
        """Pointer, byte count and NCCL's uint8 type of a dense buffer's bytes."""
        return _pointer(b), _nbytes(b), int(self.nccl.UINT8)

    def _queue(self, team: tuple[int, ...] | None, call: Any, *args: Any) -> None:
        """`call(*args, the team's communicator (None: the world's), the wire's
        stream)` after everything issued so far; noted for a replay
        (gpu_backend/launches/recording.py), which must find the very communicator again."""
        if team is not None:
            comm = self._comm(team)
        else:
            owner = self.world
            recording.require(("nccl", "world"), lambda: COMMS.found("nccl", self._everyone()) is owner)
            comm = self.raw.Comm(owner.ptr)
        recording.collective(self._on_stream, call, (*args, comm))
        self._on_stream(call, (*args, comm))

    def _on_stream(self, call: Any, args: tuple[Any, ...]) -> None:
        call(*args, self._begin())

    def in_graph(self, fn: Any, args: tuple[Any, ...], stream: int | None) -> bool:
        """A noted call of this wire queued on a capturing `stream` (gpu_backend/launches/graph.py;
        None: only whether it can be): the NCCL call itself on that stream; the
        ordering between streams is not needed there (everything is on one)."""
        if getattr(fn, "__self__", None) is not self:
            return False
        if fn.__func__ is NcclWire._on_stream:
            if stream is not None:
                call, call_args = args
                call(*call_args, stream)
            return True
        return fn.__func__ is NcclWire.settle

    def _settled(self, what: str) -> None:
        recording.collective(self.settle, what)
        self.settle(what)

    def allgather(self, team: tuple[int, ...], send: DeviceBuffer, recv: DeviceBuffer) -> None:
        if recv.size:
            (s, count, u8), r = self._bytes(send), _pointer(recv)
            self._queue(team, self.raw.all_gather, s, r, count, u8)
            self._settled("an NCCL allgather")

    def alltoall(self, team: tuple[int, ...], send: DeviceBuffer, recv: DeviceBuffer) -> None:
        if recv.size:
            (s, count, u8), r = self._bytes(send), _pointer(recv)
            self._queue(team, self.raw.allto_all, s, r, count // len(team), u8)
            self._settled("an NCCL alltoall")

    def broadcast(self, team: tuple[int, ...], buf: DeviceBuffer, root: int) -> None:
        if buf.size:
            b, count, u8 = self._bytes(buf)
            self._queue(team, self.raw.broadcast, b, b, count, u8, root)
            self._settled("an NCCL broadcast")

    def allreduce(self, team: tuple[int, ...], send: DeviceBuffer, recv: DeviceBuffer, kind: str) -> None:
        if recv.size:
            (s, count, dtype), r = self._typed(send), _pointer(recv)
            self._queue(team, self.raw.all_reduce, s, r, count, dtype, self._op(kind))
            self._settled("an NCCL allreduce")

    def reduce_scatter(self, team: tuple[int, ...], send: DeviceBuffer, recv: DeviceBuffer, kind: str) -> None:
        if recv.size:
            self.start_reduce_scatter(team, send, recv, kind)
            self._settled("an NCCL reduce scatter")

    def start_reduce_scatter(self, team: tuple[int, ...], send: DeviceBuffer, recv: DeviceBuffer,
                             kind: str) -> None:
        """Queue a reduce_scatter after everything issued so far, as start_p2p
        does an exchange: `finish` orders the rest after it."""
        if recv.size:
            s, (r, count, dtype) = _pointer(send), self._typed(recv)
            self._queue(team, self.raw.reduce_scatter, s, r, count, dtype, self._op(kind))

    def p2p(self, sends: list[tuple[int, DeviceBuffer]], recvs: list[tuple[int, DeviceBuffer]]) -> None:
        self.start_p2p(sends, recvs)
        self.finish("an NCCL point-to-point exchange")

    def start_p2p(self, sends: list[tuple[int, DeviceBuffer]], recvs: list[tuple[int, DeviceBuffer]]) -> None:
        """Queue an exchange after everything issued so far; `finish` waits for it.
        Until then its buffers must stay alive and unwritten."""
        self._queue(None, self._group, tuple((*self._bytes(a), peer) for peer, a in sends if a.size),
                    tuple((*self._bytes(a), peer) for peer, a in recvs if a.size))

    def _group(self, sends: tuple[tuple[int, int, int, int], ...], recvs: tuple[tuple[int, int, int, int], ...],
               world: Any, stream: int) -> None:
        """One NCCL group of sends and receives (pointer, bytes, type, peer) on the world's communicator."""
        self.raw.group_start()
        try:
            for args in sends:
                self.raw.send(*args, world, stream)
            for args in recvs:
                self.raw.recv(*args, world, stream)
        finally:
            self.raw.group_end()

    def finish(self, what: str) -> None:
        self._settled(what)


def _pointer(b: DeviceBuffer) -> int:
    """The device address of a buffer's element [0, ..., 0]."""
    return int(b.data.__cuda_array_interface__["data"][0]) + b.offset * b.data.dtype.itemsize
