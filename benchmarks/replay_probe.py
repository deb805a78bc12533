"""Where a replayed seed-2 run's time goes, and the same calls as one CUDA graph.

    python -m benchmarks.replay_probe      (one GPU)
    REFIR_MPI_ALONE=1 mpiexec -n 1 python -m benchmarks.replay_probe   (one GPU, refir's MPI path:
                                           the NCCL calls of a one-rank communicator among the pieces)

After a run is recorded (gpu_backend/replay.py), times each piece of its
replay made call by call, as it comes in a run (host µs, median of 50 runs
on fresh inputs): the pool's takes and gives, each upload, each recorded
call (the cuBLAS call, the launches), the download; then the whole replay
call by call against the same with its calls as one CUDA graph
(gpu_backend/graph.py), alternating on the same fresh inputs, and whether
the two give the same bits.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import refir
from benchmarks.phases import PATTERN
from gpu_backend import gemm, replay
from gpu_backend import graph as graphs
from gpu_backend.buffer import host_span
from gpu_backend.device import SIMULATED, cuda
from gpu_backend.driver_launch import DirectLaunch, copy_bytes
from refir.backends import backend_world, world_for
from refir.prepare import bind_and_check, lowered_of, verified
from refir.shard import shard_inputs
from refir.world import mpi_world

SIZES = [(256, 512, 256), (512, 512, 512)]
RUNS = 50


def inputs_of(m: int, k: int, n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.random((m, k), np.float32) - 0.5, "w": rng.random((k, n), np.float32) - 0.5,
            "bias": rng.random(n, np.float32) - 0.5}


def pieces(trace: replay.Trace, shards: dict[str, dict[int, np.ndarray]]) -> dict[str, float]:
    """One replay, each piece timed (seconds)."""
    spent: dict[str, float] = {}
    pool = trace.pool
    t0 = time.perf_counter()
    with pool.lock:
        if not pool.retake(*trace.retake):
            raise RuntimeError("the recorded blocks are not free")
        spent["pool takes and gives"] = time.perf_counter() - t0
        for i, entry in enumerate(trace.calls):
            t = time.perf_counter()
            if entry[0] in ("call", "collective"):
                entry[1](*entry[2])
                fn = entry[1]
                label = ("launch" if type(fn) is DirectLaunch else "device copy" if fn is copy_bytes
                         else getattr(fn, "__name__", "call"))
                if entry[0] == "collective":
                    label = f"collective {label}" + (f" ({entry[2][0].__name__})" if fn.__name__ == "_on_stream"
                                                     else "")
            elif entry[0] == "input":
                replay.DriverTransfers.up(entry[3], host_span(shards[entry[1]][entry[2]])[0])
                label = f"upload {entry[1]}"
            else:
                host = np.empty(entry[4], entry[5])
                replay.DriverTransfers.down(host, entry[3])
                label = "download"
            spent[f"{i}: {label}"] = time.perf_counter() - t
    spent["whole"] = time.perf_counter() - t0
    return spent


def timed(fn: object) -> float:
    t = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t


def main() -> int:
    if SIMULATED:
        sys.stderr.write("replay_probe needs a GPU\n")
        return 1
    import cupy

    program = refir.load(PATTERN.format(devices="0"))
    for m, k, n in SIZES:
        for seed in range(3):  # compile, record, replay
            refir.run(program, inputs_of(m, k, n, seed), backend="gpu")
        checked_ = verified(program, None)
        lowered = lowered_of(checked_)
        bindings = bind_and_check(checked_, inputs_of(m, k, n, 0))
        world = backend_world(world_for(checked_, None, mpi_world()))
        trace = next(t for t in replay._traces.values() if t.lowered is lowered and t.calls[-1][4] == m * n)
        times: dict[str, list[float]] = {}
        for seed in range(RUNS):
            local = shard_inputs(checked_, inputs_of(m, k, n, 10 + seed), (0,))
            if world.comm is not None:
                replay._agreed(world.comm, -1)  # each replay under MPI takes its round first
            for label, t in pieces(trace, local).items():
                times.setdefault(label, []).append(t)
            cuda.synchronize()
        print(f"{m}, {k}, {n}: a replay's pieces, host µs (median of {RUNS}): " + ", ".join(
            f"{label} {np.median(t) * 1e6:.1f}" for label, t in times.items()), flush=True)
        if trace.collectives:
            print(f"  the replay round alone, host µs (median of {RUNS}): "
                  f"{np.median([timed(lambda c=world.comm: replay._agreed(c, -1)) for _ in range(RUNS)]) * 1e6:.1f}")
            print("  (no single graph of a trace with collectives: its graphs are the stretches between them)")
            continue
        graph = graphs.capture([(c[1], c[2]) for c in trace.parts[1]], gemm.cublas_of(cupy).gemm_ex)
        if graph is None:
            print("  no CUDA graph: the capture was refused", flush=True)
            continue
        kept, same, graphed, by_call = trace.graph, True, [], []  # type: ignore[var-annotated]
        for seed in range(RUNS):
            local = shard_inputs(checked_, inputs_of(m, k, n, 100 + seed), (0,))
            results = []
            for way, spent in (((graph,), graphed), (False, by_call)):
                trace.graph = way
                t = time.perf_counter()
                results.append(replay.replayed(lowered, local, bindings, world)["out"][0])
                spent.append(time.perf_counter() - t)
            same &= results[0].view(np.uint32).tobytes() == results[1].view(np.uint32).tobytes()
        trace.graph = kept
        print(f"  replay with its calls as one CUDA graph: host µs {np.median(graphed) * 1e6:.1f}, call by call "
              f"{np.median(by_call) * 1e6:.1f}; the same bits: {same}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
