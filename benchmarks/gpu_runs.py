"""Whole refir.run calls of the seed-2 pattern next to torch (benchmarks/gpu_bench.py run)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np

from benchmarks.gpu_timing import REPEATS, median_time, torch_group
from benchmarks.phases import PATTERN, nested, phase_medians
from gpu_backend.buffers import memory, pool
from gpu_backend.buffers.buffer import DeviceBuffer, to_device, to_host
from gpu_backend.device import cuda
from gpu_backend.kernels.elementwise import copy_into
from refir.world.ranks import World

# Issue 15's three sizes, and issue 10's whole program at 1 MiB and 1 GiB (x: f32[M, K] of that size).
SIZES = [tuple(int(n) for n in s.split(",")) for s in os.environ.get(
    "GPU_BENCH_SIZES", "256,512,256 512,512,512 4096,4096,4096 8192,8192,8192 16384,16384,16384").split()]
ROOT_IN_LIMIT = 8192 * 8192  # "rank 0 in" sends x and w through MPI's shared memory (~0.6 GB/s): not beyond


def profiled(fn: Callable[[], object], barrier: Callable[[], object], what: str) -> list[str]:
    """Where one call of `fn` spends its time (cProfile, by own time)."""
    import cProfile
    import io
    import pstats

    profile = cProfile.Profile()
    barrier()
    profile.enable()
    fn()
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(20)
    return ["", f"profile of {what}:", text.getvalue()]


def phases(fn: Callable[[], object], barrier: Callable[[], object]) -> str:
    """Median ms of each phase of a refir.run on this rank (the functions it
    calls, timed by wrapping them for the measurement only)."""
    import gpu_backend.backend as gb
    import gpu_backend.buffers.buffer as gbuf
    import gpu_backend.impls as gi
    import gpu_backend.kernels.matmul_ranks as gmr
    import gpu_backend.launches.replay as rp
    import gpu_backend.transports.in_process as gt
    import gpu_backend.transports.pending as gp
    import refir.running.run_setup as rs
    import refir.running.runner as rn
    import refir.world.exchange as rr

    spots = [(rs, "verified", "verify"), (rn, "gather_outputs", "gather"), (rr, "settle", "agree"),
             (rr, "deliver_inputs", "deliver"), (rp, "_agreed", "replay round"),
             (rs, "host_arrays", "host_arrays"), (rr, "host_arrays", "host_arrays"), (rs, "bind_and_check", "bind"),
             (rr, "bind_and_check", "bind"), (rs, "world_for", "world"), (rs, "shard_inputs", "shard"),
             (rr, "shard_inputs", "shard"), (gb, "check_local_inputs", "check inputs"),
             (gb, "use_device", "use_device"), (gb, "transport_for", "transport_for"),
             (rp, "upload", "upload"), (gb, "execute", "steps"), (gi.GpuLocal, "__call__", "(local steps)"),
             (gmr, "matmul_into", "(of which matmul"),
             (gi, "elementwise", "elementwise"), (gt.LaidOut, "communicate", "allreduce)"),
             (gbuf, "download", "download"), (gp, "settle", "(of which the wait for collectives)"),
             (rp.DriverTransfers, "up", "upload"), (rp.DriverTransfers, "down", "download"),
             (rp.Trace, "replay", "(replay, all of it)")]
    import gpu_backend.kernels.matmul as gm

    if gm._cupy() is not None:  # cupy's own call, within matmul
        spots.insert(spots.index((gmr, "matmul_into", "(of which matmul")) + 1, (gm, "library_matmul", "(cupy's call)"))
    parts, total = phase_medians(fn, barrier, spots, REPEATS)
    if parts["(replay, all of it)"]:
        parts["(replay's pool and calls)"] = parts["(replay, all of it)"] - parts["upload"] - parts["download"]
    parts["rest"] = total - sum(t for label, t in parts.items() if not nested(label) and label != "elementwise")
    return ", ".join(f"{label} {t * 1e3:.2f}" for label, t in parts.items()) + f" (of {total * 1e3:.2f} ms)"


def floor(barrier: Callable[[], object]) -> str:
    """What numba-cuda's Python side costs for the smallest operations (µs),
    with a synchronize after each (as before), and per call without one."""
    host = np.zeros(1, np.float32)
    one = DeviceBuffer.dense(cuda.to_device(host), (1,))
    out = DeviceBuffer.empty((1,), np.dtype(np.float32))
    sync = cuda.synchronize
    costs = {"to_device of 4 bytes": median_time(lambda: cuda.to_device(host), sync, barrier),
             "device_array(1)": median_time(lambda: cuda.device_array(1, np.float32), sync, barrier),
             "copy kernel on 1 element": median_time(lambda: copy_into(out, one), sync, barrier),
             "copy_to_host of 4 bytes": median_time(lambda: one.data.copy_to_host(), sync, barrier)}
    lines = ["numba floor with a synchronize, µs: " + ", ".join(f"{k} {v * 1e6:.0f}" for k, v in costs.items())]
    return "\n".join(lines + launch_costs(one, out))


def per_call(fn: Callable[[], object], n: int = 300) -> float:
    """µs per call of `fn`, n calls back to back, then one synchronize (best of 3)."""
    fn()
    cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def launch_costs(one: DeviceBuffer, out: DeviceBuffer) -> list[str]:
    """The launch path and the allocator, piece by piece (gpu_backend/launches/launch.py, buffers/pool.py)."""
    from gpu_backend.kernels.elementwise import _same, elementwise
    from gpu_backend.kernels.elementwise_kernels import ignoring_scalar, map_kernel
    from gpu_backend.launches import launch as gl

    kernel = map_kernel(ignoring_scalar(_same), 1)
    args = (out.data, 0, (0, 0, 0, 0), 0, 1, one.data, 0, (0, 0, 0, 0), 0, 1, (1, 1, 1, 1), (1, 1, 1, 1, 1, 1), 1, 0)
    fast = gl.FAST
    costs = {"numba kernel[grid, block](*args)": per_call(lambda: kernel[1, (1, 256)](*args))}
    gl.FAST = True
    costs["launch(), cached signature"] = per_call(lambda: gl.launch(kernel, 1, (1, 256), *args))
    costs["elementwise() of 1 element"] = per_call(lambda: elementwise(_same, out, one))
    pooled = DeviceBuffer.empty((1,), np.dtype(np.float32))  # pooled Memory: after its first call, a kept launch
    costs["elementwise() of 1 pooled element"] = per_call(lambda: elementwise(_same, out, pooled))
    costs["copy_into() of 1 element"] = per_call(lambda: copy_into(out, one))
    gl.FAST = False
    costs["copy_into(), numba launch"] = per_call(lambda: copy_into(out, one))
    gl.FAST = fast
    manager = cuda.current_context().memory_manager
    costs["device_array(1)"] = per_call(lambda: cuda.device_array(1, np.float32))
    costs["memory.empty(1) and its release"] = per_call(lambda: memory.empty(1, np.dtype(np.float32)))
    costs["DeviceBuffer.empty((1,))"] = per_call(lambda: DeviceBuffer.empty((1,), np.dtype(np.float32)))
    costs["memalloc(4) via the context"] = per_call(lambda: cuda.current_context().memalloc(4))
    if hasattr(manager, "numba"):
        costs["numba's own memalloc(4) (no pool)"] = per_call(lambda: manager.numba.memalloc(4), 100)
    host = np.zeros(1, np.float32)
    costs["to_device of 4 bytes"] = per_call(lambda: cuda.to_device(host))
    costs["copy_to_host of 4 bytes"] = per_call(lambda: one.data.copy_to_host())
    costs["buffer.to_device of 4 bytes"] = per_call(lambda: to_device(host))
    costs["buffer.to_host of 4 bytes"] = per_call(lambda: to_host(one.data))
    return ["per call, no synchronize, µs: " + ", ".join(f"{k} {v:.1f}" for k, v in costs.items()),
            f"launches so far: {gl.counts}; direct launch refused: {getattr(gl, 'refused', [])[:3]}; "
            f"memory manager {type(manager).__name__}"]


def memory_row(program: object, inputs: dict[str, np.ndarray], world: World) -> str:
    """Rank's pool peak during one run next to the program's largest live set on its device."""
    import refir
    from interp.liveness import largest_live
    from refir.lowering.lower import lower
    from refir.running.bindings import bind_inputs

    low = lower(refir.verify(program))
    live = largest_live(low, bind_inputs(low.checked, inputs), world.rank)
    current = pool.current()
    if current is None:
        return f"largest live {live / 2**20:.2f} MiB; no pool"
    cuda.synchronize()
    before = current.stats()
    current.reset_peak()
    refir.run(program, inputs, backend="gpu")
    cuda.synchronize()
    after = current.stats()
    peak = after.peak - before.in_use  # what this run added to what was held in use before it
    return (f"pool peak {peak / 2**20:.2f} MiB over {before.in_use / 2**20:.2f} in use before, largest live "
            f"{live / 2**20:.2f} MiB, peak/live {peak / live:.2f}; held {after.held / 2**20:.1f} MiB, "
            f"fresh {after.fresh}, reused {after.reused}")


def whole_runs(torch: object, world: World) -> list[str]:
    """refir.run of the seed-2 pattern next to torch, per size; lines for rank 0 to print."""
    import torch.distributed as dist

    import refir
    from refir.world.mpi_job import COMMS

    solo = world.comm is None  # one GPU in this process: no allreduce, for host costs where no two GPUs are lent
    if not solo:
        torch_group(torch, world, 29600)
    os.environ.setdefault("REFIR_MAX_ELEMENTS", str(1 << 29))  # the 1 GiB program's x has 2^28 elements
    # 8192^3 counts 13 GiB summed over the devices (scratch as the numpy backends hold it): over the default 8
    os.environ.setdefault("REFIR_MAX_RUN_BYTES", str(64 << 30))
    program = refir.load(PATTERN.format(devices=", ".join(map(str, range(world.size)))))
    barrier, sync = (lambda: None) if solo else world.comm.Barrier, torch.cuda.synchronize
    all_reduce = (lambda c: None) if solo else dist.all_reduce
    import gpu_backend.launches.replay as rp

    lines = [f"{'M, K, N':<18} {'refir first':>11} {'refir':>9} {'no replay':>9} {'rank 0 in':>9} {'torch host':>10} "
             f"{'torch dev':>9} {'refir/host':>10} {'refir/dev':>9}  (ms, median of {REPEATS})"]
    notes: list[str] = []
    memory: list[str] = ["", "device memory of one run (gpu_backend/buffers/pool.py against interp/liveness.py):"]
    for m, k, n in SIZES:
        rng = np.random.default_rng(2)
        x = rng.random((m, k), np.float32) - 0.5
        w = rng.random((k, n), np.float32) - 0.5
        bias = rng.random(n, np.float32) - 0.5
        inputs = {"x": x, "w": w, "bias": bias}
        lo, hi = world.rank * k // world.size, (world.rank + 1) * k // world.size
        barrier()
        start = time.perf_counter()
        refir.run(program, inputs, backend="gpu")
        first = time.perf_counter() - start
        created = dict(COMMS.created)
        ours = median_time(lambda: refir.run(program, inputs, backend="gpu"), sync, barrier)  # noqa: B023
        rp.ENABLED, replaying = False, rp.ENABLED  # the full path every run (the direct cuBLAS call still)
        full = median_time(lambda: refir.run(program, inputs, backend="gpu"), sync, barrier)  # noqa: B023
        rp.ENABLED = replaying
        assert COMMS.created == created, "a later run made a communicator"
        mine = inputs if world.is_root else {}
        root_in = (median_time(lambda: refir.run(program, mine, backend="gpu"), sync, barrier)  # noqa: B023
                   if m * k <= ROOT_IN_LIMIT else float("nan"))

        def torch_host() -> np.ndarray:
            c = torch.from_numpy(x[:, lo:hi]).cuda() @ torch.from_numpy(w[lo:hi]).cuda()  # noqa: B023
            all_reduce(c)
            return torch.relu(c + torch.from_numpy(bias).cuda()).cpu().numpy()  # noqa: B023

        dev = {name: torch.from_numpy(a).cuda() for name, a in (("x", x[:, lo:hi]), ("w", w[lo:hi]), ("b", bias))}

        def torch_device() -> object:
            c = dev["x"] @ dev["w"]  # noqa: B023
            all_reduce(c)
            return torch.relu(c + dev["b"])  # noqa: B023

        theirs = median_time(torch_host, sync, barrier)
        on_device = median_time(torch_device, sync, barrier)
        got = refir.run(program, inputs, backend="gpu").outputs
        want = torch_host()
        if world.is_root:
            tol = 1e-4 * k ** 0.5
            assert np.allclose(got["out"], want, atol=tol), "refir and torch disagree"
        lines.append(f"{f'{m}, {k}, {n}':<18} {first * 1e3:>11.2f} {ours * 1e3:>9.2f} {full * 1e3:>9.2f} "
                     f"{root_in * 1e3:>9.2f} "
                     f"{theirs * 1e3:>10.2f} {on_device * 1e3:>9.2f} {ours / theirs:>10.2f} {ours / on_device:>9.1f}")
        if world.is_root:  # as it comes: a later size may fail or run out of time
            print("\n".join(lines[-2 if len(lines) == 2 else -1:]), flush=True)
        dev.clear()
        memory.append(f"{f'{m}, {k}, {n}':<18} rank {world.rank}: {memory_row(program, inputs, world)}")
        if (m, k, n) == SIZES[0]:
            notes += ["", floor(barrier)]
        if (m, k, n) in (SIZES[0], SIZES[1]):
            notes += ["", f"phases of a run at {m}, {k}, {n} on rank {world.rank}, ms: "
                      + phases(lambda: refir.run(program, inputs, backend="gpu"), barrier)]  # noqa: B023
            rp.ENABLED = False
            notes += [f"phases of a run without replays at {m}, {k}, {n} on rank {world.rank}, ms: "
                      + phases(lambda: refir.run(program, inputs, backend="gpu"), barrier)]  # noqa: B023
            rp.ENABLED = replaying
            notes += [f"replays so far: {rp.counts}; last recording not kept: {rp.last_taint}"]
            notes += profiled(lambda: refir.run(program, inputs, backend="gpu"), barrier,  # noqa: B023
                              f"one run at {m}, {k}, {n} on rank {world.rank}")
        torch.cuda.empty_cache()
        if (held := pool.current()) is not None:
            held.trim()  # the next size's blocks are of other classes
    if not solo:
        dist.destroy_process_group()
    return memory + notes  # the table's rows were printed as they came

