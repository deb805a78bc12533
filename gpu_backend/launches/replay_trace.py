"""One recorded run (gpu_backend/launches/replay.py), and how it is made again: call
by call, or as CUDA graphs (gpu_backend/launches/graph.py) tried at its first replay
and kept only where they give that replay's results bit for bit. Under MPI
the NCCL calls stay calls between graphs (REFIR_GPU_GRAPH_NCCL=1: inside
one graph, made and kept on every rank or none); replay.py's docstring says
why, and how every rank decides to replay together."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_backend.buffers.buffer import host_span, shaped
from gpu_backend.kernels import gemm
from gpu_backend.launches import graph as graphs
from gpu_backend.launches import recording
from gpu_backend.transports import pending
from refir.errors import RunError
from refir.lowering.lower import Lowered

counts = {"replayed": 0, "recorded": 0, "refused": 0, "declined": 0, "tainted": 0,  # for benchmarks and tests
          "graphed": 0, "graphs kept": 0, "graphs with other bits": 0, "no graph": 0}
capture_graph = graphs.capture  # (tests put a fake in its place)


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
    """A collective queued on a capturing stream by its own wire (gpu_backend/transports/wires.py's in_graph)."""
    owner = getattr(fn, "__self__", None)
    return owner is not None and hasattr(owner, "in_graph") and owner.in_graph(fn, args, stream)


def _every(comm: Any, mine: bool) -> bool:
    """Whether every rank says so (one small allreduce)."""
    from mpi4py import MPI

    from refir.world.mpi_job import wait

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


def _cupy() -> Any:
    from gpu_backend.kernels.matmul import _cupy as found

    return found()
