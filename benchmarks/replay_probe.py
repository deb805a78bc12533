"""Where a replayed seed-2 run's time goes, and the same calls as one CUDA graph.

    python -m benchmarks.replay_probe      (one GPU)

After a run is recorded (gpu_backend/replay.py), times each piece of its
replay as it comes in a run (host µs, median of 50 runs on fresh inputs):
the pool's takes and gives, each upload, each recorded call (the cuBLAS call,
the launches), the download; then captures the recorded calls once into a
CUDA graph (on a stream of its own, cuBLAS's call included through cupy's
current stream) and replays runs as uploads, one cuGraphLaunch, download:
its host time against the replay's, and its results' bits against the
replay's on the same fresh inputs.
"""

from __future__ import annotations

import ctypes
import sys
import time
from typing import Any

import numpy as np

import refir
from benchmarks.phases import PATTERN
from gpu_backend import replay
from gpu_backend.buffer import host_span, shaped
from gpu_backend.device import SIMULATED, cuda
from gpu_backend.driver_launch import DirectLaunch, LaunchError, _libcuda, copy_bytes, error_name
from refir import runner

SIZES = [(256, 512, 256), (512, 512, 512)]
RUNS = 50


def checked(what: str, rc: int) -> None:
    if rc:
        raise LaunchError(f"{what}: {error_name(rc)} ({rc})")


def inputs_of(m: int, k: int, n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.random((m, k), np.float32) - 0.5, "w": rng.random((k, n), np.float32) - 0.5,
            "bias": rng.random(n, np.float32) - 0.5}


def pieces(trace: replay.Trace, shards: dict[str, dict[int, np.ndarray]]) -> dict[str, float]:
    """One replay, each piece timed (seconds)."""
    spent: dict[str, float] = {}
    pool = trace.pool
    t0 = time.perf_counter()
    held: dict[int, tuple[Any, int]] = {}
    with pool.lock:
        for taken, size, address in trace.blocks:
            if taken:
                held[address] = (pool.take_exact(size, address), size)
            else:
                pool.give(*held.pop(address))
        spent["pool takes and gives"] = time.perf_counter() - t0
        for i, entry in enumerate(trace.calls):
            t = time.perf_counter()
            if entry[0] == "call":
                entry[1](*entry[2])
                fn = entry[1]
                label = ("launch" if type(fn) is DirectLaunch else "device copy" if fn is copy_bytes
                         else getattr(fn, "__name__", "call"))
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


class Graph:
    """The trace's recorded calls captured once into a CUDA graph on a stream of its own."""

    def __init__(self, trace: replay.Trace, cupy: Any) -> None:
        lib = _libcuda()
        vp = ctypes.c_void_p
        for name, args in (("cuStreamCreate", [ctypes.POINTER(vp), ctypes.c_uint]),
                           ("cuStreamBeginCapture_v2", [vp, ctypes.c_int]),
                           ("cuStreamEndCapture", [vp, ctypes.POINTER(vp)]),
                           ("cuGraphInstantiateWithFlags", [ctypes.POINTER(vp), vp, ctypes.c_ulonglong]),
                           ("cuGraphLaunch", [vp, vp]), ("cuStreamSynchronize", [vp])):
            getattr(lib, name).argtypes = args
            getattr(lib, name).restype = ctypes.c_int
        self.lib, self.trace = lib, trace
        self.stream = vp()
        checked("cuStreamCreate", lib.cuStreamCreate(ctypes.byref(self.stream), 0))  # blocking: ordered with stream 0
        graph, self.exec = vp(), vp()
        cuda.synchronize()
        checked("cuStreamBeginCapture", lib.cuStreamBeginCapture_v2(self.stream, 2))  # relaxed
        try:
            with cupy.cuda.ExternalStream(self.stream.value):
                for entry in trace.calls:
                    if entry[0] != "call":
                        continue
                    fn, args = entry[1], entry[2]
                    if type(fn) is DirectLaunch:
                        grid, block, values = args
                        fn.layout.pack_into(fn.buffer, 0, *values)
                        gx, gy, gz = (grid, 1, 1) if type(grid) is int else (*grid, 1, 1)[:3]
                        bx, by, bz = (block, 1, 1) if type(block) is int else (*block, 1, 1)[:3]
                        checked("cuLaunchKernel", fn.call(fn.function, gx, gy, gz, bx, by, bz, 0, self.stream,
                                                          fn.params, None))
                    elif fn is copy_bytes:
                        copy_bytes(args[0], args[1], args[2], self.stream.value)
                    else:
                        fn(*args)  # cupy's gemmEx: the handle on cupy's current stream, this one
        finally:
            checked("cuStreamEndCapture", lib.cuStreamEndCapture(self.stream, ctypes.byref(graph)))
        checked("cuGraphInstantiate", lib.cuGraphInstantiateWithFlags(ctypes.byref(self.exec), graph, 0))

    def run(self, shards: dict[str, dict[int, np.ndarray]]) -> dict[str, np.ndarray]:
        trace, pool = self.trace, self.trace.pool
        out = {}
        with pool.lock:
            held: dict[int, tuple[Any, int]] = {}
            for taken, size, address in trace.blocks:
                if taken:
                    held[address] = (pool.take_exact(size, address), size)
                else:
                    pool.give(*held.pop(address))
            launched = False
            for entry in trace.calls:
                if entry[0] == "input":
                    replay.DriverTransfers.up(entry[3], host_span(shards[entry[1]][entry[2]])[0])
                elif entry[0] == "output":
                    if not launched:
                        checked("cuGraphLaunch", self.lib.cuGraphLaunch(self.exec, self.stream))
                        launched = True
                    _, name, d, address, count, storage, dtype, offset, shape, strides = entry
                    host = np.empty(count, storage)
                    replay.DriverTransfers.down(host, address)  # stream 0 waits for the graph's blocking stream
                    out[name] = shaped(host.view(dtype), offset, shape, strides)
        return out


def main() -> int:
    if SIMULATED:
        sys.stderr.write("replay_probe needs a GPU\n")
        return 1
    import cupy

    program = refir.load(PATTERN.format(devices="0"))
    for m, k, n in SIZES:
        for seed in range(3):  # compile, record, replay
            refir.run(program, inputs_of(m, k, n, seed), backend="gpu")
        checked_ = runner.verified(program, None)
        lowered = runner.lowered_of(checked_)
        bindings = runner.bind_and_check(checked_, inputs_of(m, k, n, 0))
        world = runner.world_for(checked_, None, None)
        trace = next(t for t in replay._traces.values() if t.lowered is lowered and t.calls[-1][4] == m * n)
        times: dict[str, list[float]] = {}
        for seed in range(RUNS):
            local = runner.shard_inputs(checked_, inputs_of(m, k, n, 10 + seed), (0,))
            for label, t in pieces(trace, local).items():
                times.setdefault(label, []).append(t)
            cuda.synchronize()
        print(f"{m}, {k}, {n}: a replay's pieces, host µs (median of {RUNS}): " + ", ".join(
            f"{label} {np.median(t) * 1e6:.1f}" for label, t in times.items()), flush=True)
        try:
            graph = Graph(trace, cupy)
        except Exception as exc:  # capture refused (cuBLAS under capture, an older driver): say so
            print(f"  no CUDA graph: {type(exc).__name__}: {exc}", flush=True)
            continue
        same, graphed, replayed = True, [], []
        for seed in range(RUNS):
            fresh = inputs_of(m, k, n, 100 + seed)
            local = runner.shard_inputs(checked_, fresh, (0,))
            t = time.perf_counter()
            got = graph.run(local)["out"]
            graphed.append(time.perf_counter() - t)
            t = time.perf_counter()
            want = replay.replayed(lowered, local, bindings, world)["out"][0]
            replayed.append(time.perf_counter() - t)
            same &= got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()
        print(f"  as one CUDA graph (uploads, cuGraphLaunch, download): host µs {np.median(graphed) * 1e6:.1f} "
              f"against the replay's {np.median(replayed) * 1e6:.1f}; the same bits as the replay: {same}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
