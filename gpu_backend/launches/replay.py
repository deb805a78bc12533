"""A gpu run replayed: the driver calls a run made, made again, without the step loop.

A run of a program on inputs of given layouts makes the same device work
every time: the same pool blocks taken and given back in the same order (the
pool hands out blocks by size class), the same kernel launches with the
same parameters, the same cuBLAS call, the same host copies, all of it a
pure function of the program, the inputs' shapes, strides and dtypes, the
scalars, the world and the backend's knobs; only the data differ. So a full
run is recorded (gpu_backend/launches/recording.py notes each call as it is queued,
the pool's takes and gives are watched), and a later run with the same key
takes the very same blocks back from the pool, uploads its inputs into them,
queues the recorded calls as they are, and downloads its results: a dict
lookup and a few driver calls instead of interp.spmd.execute's loop, the
launch plans and the Python of every step. From a trace's second replay on,
its device calls are one CUDA graph (gpu_backend/launches/graph.py), made at its
first replay and kept only where it gives that replay's results bit for bit
(a trace, and how it is made again: gpu_backend/launches/replay_trace.py).

What a replay assumes, and how each assumption is checked (anything else
runs the full path, which records afresh):

- the same lowered program (by identity), the same inputs: per parameter and
  device, shape, byte strides and dtype; the same scalars; the same world
  (size, hosted ranks, and under MPI the world's communicator); the same thread (cupy's cuBLAS handle is
  per thread); the same pool object (a new CUDA context has a new one);
  the same knobs: launch.FAST (which tests set for a fake device), and
  recording.generation, which every clear_plans (the launch geometry knobs)
  bumps; REFIR_GPU_REPLAY=0 turns replays off. These make the key.
- the pool's blocks: every block the recorded run took is free in the pool
  again, at the same address and of the same class (pool.retake), else
  nothing is queued and the full path runs;
- cupy's compute type for each recorded cuBLAS call is still the one it had;
  REFIR_GPU_GRAPH=0 keeps the calls one by one.

Under MPI (one rank per process, NCCL between GPUs) each rank records its
NCCL calls too (gpu_backend/transports/wires.py notes each as a collective: the NCCL
call on the wire's stream, and the stream ordering around it, made again on
the same device pointers), with the requirement that the communicator found
for the team in refir.world.mpi_job.COMMS is still the very one the call used
(refir.close() frees them; a trace never calls a freed one). A rank cannot
replay alone: its collectives, and the shape headers the full path sends
through MPI, would not be matched by a rank on the full path. So all ranks
decide together (`_together`): each finds its trace and retakes its blocks,
then one small allreduce carries every rank's "the trace of run R" (-1:
none, not ready, or a block not free) and its count of runs; all replay
where every rank named the same R, else the ranks that retook give their
blocks back (pool.Retaken.undo) and all run in full, recording afresh. The
same allreduce numbers the runs alike on every rank (its maximum), so R
names one run on every rank and traces of different runs (say each rank's
inputs laid out as in another earlier run) are never replayed together.
The round is taken by every rank of every gpu run under MPI, also by a
rank without a key or with replays off; it carries the replay and graph
knobs too, and where REFIR_GPU_REPLAY, REFIR_GPU_GRAPH or
REFIR_GPU_GRAPH_NCCL differ between ranks every rank stops with a RunError
(a rank replaying, or graphing around NCCL, alone would hang its peers).

Graphs under MPI: NCCL can be captured, but a rank whose capture failed or
whose graph gave other bits would then make other calls than its peers, and
nothing of it could be measured on two GPUs here; so NCCL calls stay calls,
and each stretch of device calls between them is a graph of its own
(gpu_backend/launches/graph.py's stream is blocking: ordered with the legacy stream,
on which the wire's events are recorded). The trial run that decides
whether graphs are kept is made by every rank at the same replay (its
collectives need every rank's), graphs or not. REFIR_GPU_GRAPH_NCCL=1 (for
measuring it on two GPUs) captures the NCCL calls too, into one graph made
and kept on every rank or on none (replay_trace.py's `_whole_graph`: two more rounds, at a
trace's first replay only).

A recording is kept only if the run did nothing a replay would not repeat:
every launch went through a DirectLaunch (no numba or cuda.core launch), a
matmul through the direct cuBLAS call (not cupy's matmul), no host copy but
its own inputs and results, no empty result, only pooled memory for inputs
and results, every block it took it gave back (none from before), and no
other thread queued device work or took a pool block meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

import numpy as np

from gpu_backend.buffers import memory
from gpu_backend.buffers.buffer import DeviceBuffer, storage, upload
from gpu_backend.buffers.memory import Memory
from gpu_backend.device import SIMULATED
from gpu_backend.launches import graph as graphs
from gpu_backend.launches import launch, recording
from gpu_backend.launches.replay_trace import Trace, counts, folded  # noqa: F401 (folded: for tests and probes)
from gpu_backend.transports import pending
from refir import env
from refir.errors import RunError
from refir.lowering.lower import Lowered
from refir.world.ranks import World

ENABLED = not SIMULATED and env.flag("REFIR_GPU_REPLAY", True)
KEPT = 64  # traces per process; then they start again
last_taint: list[str] = []  # why the last recording was not kept


class DriverTransfers:
    """The host copies of a replay: the driver calls Memory.upload and .download make."""

    @staticmethod
    def up(address: int, host: np.ndarray) -> None:
        pending.settle()  # the copy waits for the stream: first, boundedly, for queued collectives
        host = host.view(storage(host.dtype))  # bfloat16 goes as its bits, as buffer.to_device sends it
        Memory(address, host.size, host.dtype, None).upload(host)

    @staticmethod
    def down(host: np.ndarray, address: int) -> None:
        pending.settle()
        Memory(address, host.size, host.dtype, None).download(host)


_traces: dict[tuple[Any, ...], Trace] = {}


def key_of(lowered: Lowered, inputs: dict[str, dict[int, Any]], scalars: dict[str, int], world: World,
           pool: Any) -> tuple[Any, ...] | None:
    """Everything a recorded run assumed but the pool's blocks (None: never replayed)."""
    if not ENABLED or not pool or not launch.FAST:
        return None
    layouts = []
    for name, blocks in inputs.items():
        for d, x in blocks.items():
            if type(x) is not np.ndarray:
                return None
            layouts.append((name, d, x.shape, x.strides, x.dtype))
    return (id(lowered), tuple(layouts), tuple(scalars.items()), world.size, world.hosted, id(world.comm), id(pool),
            threading.get_ident(), recording.generation)


def replayed(lowered: Lowered, inputs: dict[str, dict[int, Any]], scalars: dict[str, int], world: World,
             transfers: Any = DriverTransfers) -> dict[str, dict[int, np.ndarray]] | None:
    """The run's results by a replay of its recording, or None: run it in full.
    Under MPI every rank says whether it can replay, and all replay or none
    (`_together`): a rank on the full path while others replay would leave
    their collectives unmatched."""
    pool = memory._pool
    key = key_of(lowered, inputs, scalars, world, pool)
    trace = None if key is None else _traces.get(key)
    if trace is not None and (trace.lowered is not lowered or trace.pool is not pool or trace.comm is not world.comm):
        trace = None
    if world.comm is not None:
        return _together(trace, inputs, transfers, world.comm)  # the round also where replays are off
    if trace is None:
        return None
    with pool.lock:  # no other thread takes one of the run's blocks before the calls that use it are queued
        if not trace.ready() or pool.retake(*trace.retake) is None:
            counts["refused"] += 1
            return None
        counts["replayed"] += 1
        return trace.replay(inputs, transfers)


def _together(trace: Trace | None, inputs: dict[str, dict[int, Any]], transfers: Any,
              comm: Any) -> dict[str, dict[int, np.ndarray]] | None:
    """A replay under MPI: this rank retakes its trace's blocks, then one
    small allreduce says whether every rank did so for a trace of the same
    recorded run (traces carry the run's agreed number); else the blocks go
    back, untouched, and every rank runs in full, recording afresh."""
    pool = trace.pool if trace is not None else None
    with pool.lock if pool is not None else _NO_LOCK:
        retaken = pool.retake(*trace.retake) if trace is not None and trace.ready() else None
        if trace is not None and retaken is None:
            counts["refused"] += 1
        try:
            run_id, every = _agreed(comm, trace.run_id if retaken is not None else -1)
        except BaseException:
            if retaken is not None:
                retaken.undo()
            raise
        _last_run[0] = -1 if every else run_id  # what this run records, if it runs in full
        if retaken is None:
            return None
        if not every:
            retaken.undo()
            counts["declined"] += 1
            return None
        counts["replayed"] += 1
        return trace.replay(inputs, transfers)  # type: ignore[union-attr]


_NO_LOCK = contextlib.nullcontext()
_last_run: list[int] = [-1]  # the number the last round agreed for this run (a recording under MPI keeps it)
_runs_seen = [0]  # runs under MPI so far, as the last round agreed (every rank's the same after it)


def _agreed(comm: Any, mine: int) -> tuple[int, bool]:
    """One allreduce (max) of every rank's count of runs and its trace's run
    number (-1: none): this run's agreed number, and whether every rank
    holds a trace of one and the same recorded run, ready to replay."""
    from mpi4py import MPI

    from refir.world.mpi_job import wait

    knobs = int(ENABLED) | int(graphs.ENABLED) << 1 | int(graphs.WITH_NCCL) << 2
    sent = np.array([_runs_seen[0], mine, -mine, knobs, -knobs], np.int64)
    got = np.empty(5, np.int64)
    wait(comm.Iallreduce(sent, got, op=MPI.MAX), "every rank to say whether it replays its run")
    _runs_seen[0] = int(got[0]) + 1
    if got[3] != -got[4]:  # a rank alone replaying, or graphing around NCCL, would leave its peers' calls unmatched
        raise RunError("REFIR_GPU_REPLAY, REFIR_GPU_GRAPH and REFIR_GPU_GRAPH_NCCL must be set alike on every rank "
                       f"(this rank: {os.environ.get('REFIR_GPU_REPLAY', '1')}, "
                       f"{os.environ.get('REFIR_GPU_GRAPH', '1')}, {os.environ.get('REFIR_GPU_GRAPH_NCCL', '0')})")
    return int(got[0]), bool(got[1] >= 0 and got[1] == -got[2])


class Recorder:
    """Records the full run made inside it, where it may be replayed: `uploads`
    and `downloads` make the run's own host copies (noted as such)."""

    def __init__(self, lowered: Lowered, inputs: dict[str, dict[int, Any]], scalars: dict[str, int],
                 world: World) -> None:
        self.lowered, self.comm = lowered, world.comm
        self.pool = memory._pool
        self.key = None if recording.active is not None else key_of(lowered, inputs, scalars, world, self.pool)
        self.run_id = -1
        if world.comm is not None:  # the number this run's round agreed (_together), taken once
            self.run_id, _last_run[0] = _last_run[0], -1
            if self.run_id < 0:
                self.key = None
        self.blocks: list[tuple[bool, int, int]] = []
        self.record: recording.Recording | None = None
        self.results: tuple[str, ...] = ()

    def __enter__(self) -> Recorder:
        if self.key is None:
            return self
        record = self.record = recording.active = recording.Recording()
        self.launches = (launch.counts["fast"], launch.counts["numba"])
        pool, blocks = self.pool, self.blocks
        take, give = pool.take, pool.give

        def watched_take(nbytes: int) -> tuple[Any, int]:
            if threading.get_ident() != record.thread:
                recording.taint("a pool block taken by another thread")
            block, size = take(nbytes)
            blocks.append((True, size, block.device_pointer_value))
            return block, size

        def watched_give(block: Any, size: int) -> None:
            blocks.append((False, size, block.device_pointer_value))
            give(block, size)

        pool.take, pool.give = watched_take, watched_give
        return self

    def uploads(self, inputs: dict[str, dict[int, np.ndarray]]) -> dict[str, dict[int, DeviceBuffer]]:
        """The inputs on the device (gpu_backend.buffers.buffer.upload), each noted as an input."""
        record = self.record
        if record is None:
            return {name: {d: upload(x) for d, x in blocks.items()} for name, blocks in inputs.items()}
        out: dict[str, dict[int, DeviceBuffer]] = {}
        record.host_copies = True
        for name, blocks in inputs.items():
            for d, x in blocks.items():
                b = out.setdefault(name, {})[d] = upload(x)
                if type(b.data) is not Memory:
                    recording.taint("an input outside the pool")
                else:
                    record.calls.append(("input", name, d, b.data.ptr))
        record.host_copies = False
        return out

    def downloads(self, results: dict[str, dict[int, DeviceBuffer]]) -> dict[str, dict[int, np.ndarray]]:
        """The results on the host (gpu_backend.buffers.buffer.download), each noted as
        an output; `results` is emptied, so that their blocks go back to the
        pool while the recording watches."""
        from gpu_backend.buffers.buffer import download

        record = self.record
        out: dict[str, dict[int, np.ndarray]] = {}
        if record is not None:
            record.host_copies = True
        self.results = tuple(results)
        for name, blocks in results.items():
            out[name] = {}  # also where this process hosts none of its devices
            for d, b in blocks.items():
                out[name][d] = download(b)
                if record is not None:
                    self._output(record, name, d, b)
        results.clear()
        if record is not None:
            record.host_copies = False
        return out

    @staticmethod
    def _output(record: recording.Recording, name: str, d: int, b: DeviceBuffer) -> None:
        if type(b.data) is not Memory or b.size == 0:
            recording.taint("a result outside the pool, or empty")
            return
        low, high = b.span()
        data = b.data
        record.calls.append(("output", name, d, data.ptr + low * data.dtype.itemsize, high - low, data.dtype,
                             b.dtype, b.offset - low, b.shape, b.strides))

    def __exit__(self, kind: Any, exc: Any, trace: Any) -> None:
        record = self.record
        if record is None:
            return
        recording.active = None
        del self.pool.take, self.pool.give  # the class's own again
        if kind is not None:
            return
        why = record.tainted or self._unkept()
        if why is not None:
            counts["tainted"] += 1
            last_taint[:] = [why]
            return
        if len(_traces) >= KEPT:
            _traces.clear()
        _traces[self.key] = Trace(self.lowered, self.pool, self.blocks, record, self.results,  # type: ignore[index]
                                  self.comm, self.run_id)
        counts["recorded"] += 1

    def _unkept(self) -> str | None:
        """Why the run's launches or pool traffic cannot be replayed (None: they can)."""
        if (launch.counts["fast"], launch.counts["numba"]) != self.launches:
            return "a launch through numba or cuda.core"
        live: set[int] = set()
        for taken, _, address in self.blocks:
            if taken:
                live.add(address)
            elif address in live:
                live.remove(address)
            else:
                return "a block taken before the run was given back in it"
        return "a block taken in the run is still held" if live else None


def forget() -> None:
    """Drop every trace (tests; a changed knob bumps recording.generation instead)."""
    _traces.clear()
