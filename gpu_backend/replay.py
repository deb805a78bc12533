"""A gpu run replayed: the driver calls a run made, made again, without the step loop.

A run of a program on inputs of given layouts makes the same device work
every time: the same pool blocks taken and given back in the same order (the
pool hands out blocks by size class), the same kernel launches with the
same parameters, the same cuBLAS call, the same host copies, all of it a
pure function of the program, the inputs' shapes, strides and dtypes, the
scalars, the world and the backend's knobs; only the data differ. So a full
run is recorded (gpu_backend/recording.py notes each call as it is queued,
the pool's takes and gives are watched), and a later run with the same key
takes the very same blocks back from the pool, uploads its inputs into them,
queues the recorded calls as they are, and downloads its results: a dict
lookup and a few driver calls instead of interp.spmd.execute's loop, the
launch plans and the Python of every step. From a trace's second replay on,
its device calls are one CUDA graph (gpu_backend/graph.py), made at its
first replay and kept only where it gives that replay's results bit for bit.

What a replay assumes, and how each assumption is checked (anything else
runs the full path, which records afresh):

- the same lowered program (by identity), the same inputs: per parameter and
  device, shape, byte strides and dtype; the same scalars; the same world
  (size, hosted ranks, and under MPI the world's communicator); the same thread (cupy's cuBLAS handle is
  per thread); the same pool object (a new CUDA context has a new one);
  the same knobs: launch.FAST, launch.DIRECT, gemm.ENABLED, and
  recording.generation, which every clear_plans (the launch geometry knobs)
  bumps; REFIR_GPU_REPLAY=0 turns replays off. These make the key.
- the pool's blocks: every block the recorded run took is free in the pool
  again, at the same address and of the same class (pool.retake), else
  nothing is queued and the full path runs;
- cupy's compute type for each recorded cuBLAS call is still the one it had;
  REFIR_GPU_GRAPH=0 keeps the calls one by one.

Under MPI (one rank per process, NCCL between GPUs) each rank records its
NCCL calls too (gpu_backend/wires.py notes each as a collective: the NCCL
call on the wire's stream, and the stream ordering around it, made again on
the same device pointers), with the requirement that the communicator found
for the team in refir.mpi.COMMS is still the very one the call used
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
The round is taken whenever replays are on (REFIR_GPU_REPLAY must be the
same on every rank), also by a rank without a key.

Graphs under MPI: NCCL can be captured, but a rank whose capture failed or
whose graph gave other bits would then make other calls than its peers, and
nothing of it could be measured on two GPUs here; so NCCL calls stay calls,
and each stretch of device calls between them is a graph of its own
(gpu_backend/graph.py's stream is blocking: ordered with the legacy stream,
on which the wire's events are recorded). The trial run that decides
whether graphs are kept is made by every rank at the same replay (its
collectives need every rank's), graphs or not. REFIR_GPU_GRAPH_NCCL=1 (for
measuring it on two GPUs) captures the NCCL calls too, into one graph made
and kept on every rank or on none (`_whole_graph`: two more rounds, at a
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

from gpu_backend import gemm, launch, memory, pending, recording
from gpu_backend import graph as graphs
from gpu_backend.buffer import DeviceBuffer, host_span, shaped, storage, upload
from gpu_backend.device import SIMULATED
from gpu_backend.memory import Memory
from refir.errors import RunError
from refir.lower import Lowered
from refir.world import World

ENABLED = not SIMULATED and os.environ.get("REFIR_GPU_REPLAY", "1") != "0"
KEPT = 64  # traces per process; then they start again
counts = {"replayed": 0, "recorded": 0, "refused": 0, "declined": 0, "tainted": 0,  # for benchmarks and tests
          "graphed": 0, "graphs kept": 0, "graphs with other bits": 0, "no graph": 0}
capture_graph = graphs.capture  # (tests put a fake in its place)
last_taint: list[str] = []  # why the last recording was not kept


class Trace:
    """One recorded run: its pool traffic and its calls, in order."""

    __slots__ = ("lowered", "pool", "comm", "blocks", "calls", "computes", "results", "parts", "graph", "retake",
                 "requires", "collectives", "run_id")

    def __init__(self, lowered: Lowered, pool: Any, blocks: list[tuple[bool, int, int]], record: recording.Recording,
                 results: tuple[str, ...], comm: Any = None, run_id: int = -1) -> None:
        self.lowered, self.pool, self.results = lowered, pool, results
        self.comm, self.run_id = comm, run_id  # under MPI: the world's communicator, the run's agreed number
        self.blocks = tuple(blocks)  # (taken, class size, address)
        self.retake = folded(blocks)  # their net effect on the pool: pool.retake's arguments
        calls = record.calls
        # ("call", fn, args), ("collective", fn, args), ("input", name, device, address), ("output", ...)
        self.calls = tuple(calls)
        self.computes = tuple(record.gemms)  # (cudaDataType, cuBLAS compute type) of each recorded gemm
        self.requires = tuple(record.requires.values())  # checked before each replay
        self.collectives = record.collectives
        kinds = [c[0] for c in calls]
        ins, outs = kinds.count("input"), kinds.count("output")
        ordered = kinds[:ins] == ["input"] * ins and kinds[len(kinds) - outs:] == ["output"] * outs \
            and "input" not in kinds[ins:] and "output" not in kinds[:len(kinds) - outs]
        # the uploads, the device calls, the downloads, where the run made them in that order (run_gpu does)
        self.parts = (self.calls[:ins], self.calls[ins:len(kinds) - outs], self.calls[len(kinds) - outs:])
        # None: not tried yet; False: no graph (off, refused, or other bits); else the pieces: graph.Graph
        # objects, and between them the collectives, made as they are (replay.py's docstring says why)
        self.graph: Any = None if ordered and graphs.ENABLED else False

    def ready(self) -> bool:
        """Whether what the recorded run assumed beyond the key still holds
        (cupy's compute types, the communicators it used)."""
        if self.computes:
            blas = gemm.cublas_of(_cupy())
            if blas is None or any(blas.compute_type(blas.chars[c]) != t for c, t in self.computes):
                return False
        return all(check() for check in self.requires)

    def replay(self, inputs: dict[str, dict[int, np.ndarray]],
               transfers: Any) -> dict[str, dict[int, np.ndarray]]:
        """Queue the recorded calls on this run's inputs (the caller has
        retaken the run's blocks and holds the pool's lock)."""
        try:
            if self.graph and graphs.ENABLED:
                counts["graphed"] += 1
                return self._run(inputs, transfers, self.graph)
            out = self._run(inputs, transfers, None)
            if self.graph is None and graphs.ENABLED:
                self.graph = self._graph_of(inputs, transfers, out)
            return out
        except Exception as exc:
            raise RunError(f"a replayed gpu run failed: {type(exc).__name__}: {exc}") from exc

    def _run(self, inputs: dict[str, dict[int, np.ndarray]], transfers: Any,
             graph: Any) -> dict[str, dict[int, np.ndarray]]:
        """The uploads, the device calls (as they are, or the graph's pieces), the downloads."""
        out: dict[str, dict[int, np.ndarray]] = {name: {} for name in self.results}
        ins, calls, outs = (self.parts[0], (), self.parts[2]) if graph else ((), self.calls, ())
        for _, name, d, address in ins:
            transfers.up(address, host_span(inputs[name][d])[0])
        for piece in graph or ():
            if type(piece) is tuple:  # a collective, made as it is
                piece[1](*piece[2])
            else:
                piece.launch()
        if graph and self.collectives:
            pending.queued("a replay's NCCL calls")  # the host's next copy waits for them, boundedly
        for entry in calls:
            kind = entry[0]
            if kind == "call" or kind == "collective":
                entry[1](*entry[2])
            elif kind == "input":
                transfers.up(entry[3], host_span(inputs[entry[1]][entry[2]])[0])
            else:
                _download(entry, transfers, out)
        for entry in outs:
            _download(entry, transfers, out)
        return out

    def _graph_of(self, inputs: dict[str, dict[int, np.ndarray]], transfers: Any,
                  want: dict[str, dict[int, np.ndarray]]) -> Any:
        """The device calls as graphs, one for each stretch between collectives
        (which stay calls), run once more on these inputs and kept only where
        they give `want` (the calls' own results) bit for bit; False where
        there are none. Under MPI every rank makes this second run, graphs or
        not, since its collectives need every rank's."""
        blas = gemm.cublas_of(_cupy()) if self.computes else None
        gemm_ex = None if blas is None else blas.gemm_ex
        if graphs.WITH_NCCL and self.comm is not None:
            return self._whole_graph(inputs, transfers, want, gemm_ex)
        pieces: list[Any] = []
        stretch: list[tuple[Any, ...]] = []
        for entry in (*self.parts[1], None):
            if entry is not None and entry[0] == "call":
                stretch.append(entry)
                continue
            if stretch:
                pieces.append(capture_graph([(c[1], c[2]) for c in stretch], gemm_ex))
                stretch = []
            if entry is not None:
                pieces.append(entry)
        if not pieces or any(p is None for p in pieces):
            counts["no graph"] += 1
            if self.collectives:
                self._run(inputs, transfers, None)  # the second run every rank makes
            return False
        got = self._run(inputs, transfers, tuple(pieces))
        same = all(got[name][d].tobytes() == a.tobytes() and got[name][d].strides == a.strides
                   for name, blocks in want.items() for d, a in blocks.items())
        counts["graphs kept" if same else "graphs with other bits"] += 1
        return tuple(pieces) if same else False

    def _whole_graph(self, inputs: dict[str, dict[int, np.ndarray]], transfers: Any,
                     want: dict[str, dict[int, np.ndarray]], gemm_ex: Any) -> Any:
        """REFIR_GPU_GRAPH_NCCL=1 under MPI: every device call, NCCL's too, in
        one graph; made and kept on every rank or on none (two rounds, at this
        first replay only), so that no rank makes its NCCL calls through a
        graph while a peer makes them one by one."""
        calls = [(c[1], c[2]) for c in self.parts[1]]
        graph = capture_graph(calls, gemm_ex, _in_graph) if calls else None
        if not _every(self.comm, graph is not None):
            counts["no graph"] += 1
            return False
        got = self._run(inputs, transfers, (graph,))
        same = all(got[name][d].tobytes() == a.tobytes() and got[name][d].strides == a.strides
                   for name, blocks in want.items() for d, a in blocks.items())
        keep = _every(self.comm, same)
        counts["graphs kept" if keep else "graphs with other bits"] += 1
        return (graph,) if keep else False


def _in_graph(fn: Any, args: tuple[Any, ...], stream: int | None) -> bool:
    """A collective queued on a capturing stream by its own wire (gpu_backend/wires.py's in_graph)."""
    owner = getattr(fn, "__self__", None)
    return owner is not None and hasattr(owner, "in_graph") and owner.in_graph(fn, args, stream)


def _every(comm: Any, mine: bool) -> bool:
    """Whether every rank says so (one small allreduce)."""
    from mpi4py import MPI

    from refir.mpi import wait

    got = np.empty(1, np.int64)
    wait(comm.Iallreduce(np.array([int(mine)], np.int64), got, op=MPI.MIN), "every rank to say whether it graphs")
    return bool(got[0])


def folded(blocks: list[tuple[bool, int, int]]) -> tuple[list[tuple[int, int]], list[tuple[int, int]], int, int]:
    """A run's pool takes and gives (taken, class size, address), each block
    taken first and given back last in it, as what they do together: the
    blocks (class, address) in the order first taken, the same in the order
    last given back (their places on the free lists after the run), the
    number of takes, and the most bytes in use above the run's start."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    in_use = rise = takes = 0
    for taken, size, address in blocks:
        if taken:
            first.setdefault(address, size)
            takes += 1
            in_use += size
            rise = max(rise, in_use)
        else:
            last.pop(address, None)
            last[address] = size
            in_use -= size
    return ([(s, a) for a, s in first.items()], [(s, a) for a, s in last.items()], takes, rise)


def _download(entry: tuple[Any, ...], transfers: Any, out: dict[str, dict[int, np.ndarray]]) -> None:
    """A recorded output into a fresh host array, laid out as download lays it out."""
    _, name, d, address, count, storage, dtype, offset, shape, strides = entry
    host = np.empty(count, storage)
    transfers.down(host, address)
    out[name][d] = shaped(host.view(dtype), offset, shape, strides)


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


def _cupy() -> Any:
    from gpu_backend.matmul import _cupy as found

    return found()


def key_of(lowered: Lowered, inputs: dict[str, dict[int, Any]], scalars: dict[str, int], world: World,
           pool: Any) -> tuple[Any, ...] | None:
    """Everything a recorded run assumed but the pool's blocks (None: never replayed)."""
    if not ENABLED or not pool or not (launch.FAST and launch.DIRECT):
        return None
    layouts = []
    for name, blocks in inputs.items():
        for d, x in blocks.items():
            if type(x) is not np.ndarray:
                return None
            layouts.append((name, d, x.shape, x.strides, x.dtype))
    return (id(lowered), tuple(layouts), tuple(scalars.items()), world.size, world.hosted, id(world.comm), id(pool),
            threading.get_ident(), recording.generation, gemm.ENABLED)


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
        return _together(trace, inputs, transfers, world.comm) if ENABLED else None
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
        run_id, every = _agreed(comm, trace.run_id if retaken is not None else -1)
        _last_run[0] = run_id
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

    from refir.mpi import wait

    sent = np.array([_runs_seen[0], mine, -mine], np.int64)
    got = np.empty(3, np.int64)
    wait(comm.Iallreduce(sent, got, op=MPI.MAX), "every rank to say whether it replays its run")
    _runs_seen[0] = int(got[0]) + 1
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
        """The inputs on the device (gpu_backend.buffer.upload), each noted as an input."""
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
        """The results on the host (gpu_backend.buffer.download), each noted as
        an output; `results` is emptied, so that their blocks go back to the
        pool while the recording watches."""
        from gpu_backend.buffer import download

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
