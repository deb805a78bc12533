"""Whole refir.run calls of the seed-2 pattern next to torch (benchmarks/gpu_bench.py run)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np

from benchmarks.gpu_timing import REPEATS, median_time, torch_group
from gpu_backend.buffer import DeviceBuffer
from gpu_backend.device import cuda
from gpu_backend.kernels import copy_into
from refir.world import World

PATTERN = """mesh m = [{devices}]
func main(x: f32[M, K@DIDx], w: f32[K@DIDx, N], bias: f32[N]) {{
  c: f32[M, N] = matmul(x, w)
  bb: f32[b, N] = unsqueeze(bias, dims=[0])
  y = add(c, bb)
  out = relu(y)
  return out
}}
"""
SIZES = [tuple(int(n) for n in s.split(",")) for s in
         os.environ.get("GPU_BENCH_SIZES", "256,512,256 4096,4096,4096 8192,8192,8192").split()]


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
    import gpu_backend.impls as gi
    import gpu_backend.transports as gt
    import refir.ranks as rr
    import refir.runner as rn

    spots = [(rn, "verified", "verify"), (rn, "gather_outputs", "gather"), (rr, "settle", "agree"),
             (gb, "upload", "upload"), (gb, "execute", "steps"), (gi, "matmul_into", "(of which matmul"),
             (gi, "elementwise", "elementwise"), (gt.LaidOut, "communicate", "allreduce)"),
             (gb, "download", "download")]
    spent: dict[str, list[float]] = {label: [] for _, _, label in spots}
    total: list[float] = []
    originals = [(module, name, getattr(module, name)) for module, name, _ in spots]

    def timed(f: Callable, label: str) -> Callable:
        def inner(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                spent[label][-1] += time.perf_counter() - start
        return inner

    for (module, name, label), (_, _, f) in zip(spots, originals):
        setattr(module, name, timed(f, label))
    try:
        for _ in range(REPEATS):
            for times in spent.values():
                times.append(0.0)
            barrier()
            start = time.perf_counter()
            fn()
            total.append(time.perf_counter() - start)
    finally:
        for module, name, f in originals:
            setattr(module, name, f)
    parts = {label: float(np.median(t)) for label, t in spent.items()}
    parts["rest"] = float(np.median(total)) - sum(t for label, t in parts.items() if label[0] != "(" and
                                                 label[-1] != ")" and label != "elementwise")
    return ", ".join(f"{label} {t * 1e3:.2f}" for label, t in parts.items()) + f" (of {np.median(total) * 1e3:.2f} ms)"


def floor(barrier: Callable[[], object]) -> str:
    """What numba-cuda's Python side costs for the smallest operations (µs)."""
    host = np.zeros(1, np.float32)
    one = DeviceBuffer.dense(cuda.to_device(host), (1,))
    out = DeviceBuffer.empty((1,), np.dtype(np.float32))
    sync = cuda.synchronize
    costs = {"to_device of 4 bytes": median_time(lambda: cuda.to_device(host), sync, barrier),
             "device_array(1)": median_time(lambda: cuda.device_array(1, np.float32), sync, barrier),
             "copy kernel on 1 element": median_time(lambda: copy_into(out, one), sync, barrier),
             "copy_to_host of 4 bytes": median_time(lambda: one.data.copy_to_host(), sync, barrier)}
    return "numba floor, µs: " + ", ".join(f"{k} {v * 1e6:.0f}" for k, v in costs.items())


def whole_runs(torch: object, world: World) -> list[str]:
    """refir.run of the seed-2 pattern next to torch, per size; lines for rank 0 to print."""
    import torch.distributed as dist

    import refir
    from refir.mpi import COMMS

    torch_group(torch, world, 29600)
    program = refir.load(PATTERN.format(devices=", ".join(map(str, range(world.size)))))
    barrier, sync = world.comm.Barrier, torch.cuda.synchronize
    lines = [f"{'M, K, N':<18} {'refir first':>11} {'refir':>9} {'rank 0 in':>9} {'torch host':>10} "
             f"{'torch dev':>9} {'refir/host':>10} {'refir/dev':>9}  (ms, median of {REPEATS})"]
    notes: list[str] = []
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
        assert COMMS.created == created, "a later run made a communicator"
        mine = inputs if world.is_root else {}
        root_in = median_time(lambda: refir.run(program, mine, backend="gpu"), sync, barrier)  # noqa: B023

        def torch_host() -> np.ndarray:
            c = torch.from_numpy(x[:, lo:hi]).cuda() @ torch.from_numpy(w[lo:hi]).cuda()  # noqa: B023
            dist.all_reduce(c)
            return torch.relu(c + torch.from_numpy(bias).cuda()).cpu().numpy()  # noqa: B023

        dev = {name: torch.from_numpy(a).cuda() for name, a in (("x", x[:, lo:hi]), ("w", w[lo:hi]), ("b", bias))}

        def torch_device() -> object:
            c = dev["x"] @ dev["w"]  # noqa: B023
            dist.all_reduce(c)
            return torch.relu(c + dev["b"])  # noqa: B023

        theirs = median_time(torch_host, sync, barrier)
        on_device = median_time(torch_device, sync, barrier)
        got = refir.run(program, inputs, backend="gpu").outputs
        want = torch_host()
        if world.is_root:
            tol = 1e-4 * k ** 0.5
            assert np.allclose(got["out"], want, atol=tol), "refir and torch disagree"
        lines.append(f"{f'{m}, {k}, {n}':<18} {first * 1e3:>11.2f} {ours * 1e3:>9.2f} {root_in * 1e3:>9.2f} "
                     f"{theirs * 1e3:>10.2f} {on_device * 1e3:>9.2f} {ours / theirs:>10.2f} {ours / on_device:>9.1f}")
        dev.clear()
        if (m, k, n) == SIZES[0]:
            notes += ["", floor(barrier)]
        if (m, k, n) in (SIZES[0], SIZES[-1]):
            notes += ["", f"phases of a run at {m}, {k}, {n} on rank {world.rank}, ms: "
                      + phases(lambda: refir.run(program, inputs, backend="gpu"), barrier)]  # noqa: B023
            notes += profiled(lambda: refir.run(program, inputs, backend="gpu"), barrier,  # noqa: B023
                              f"one run at {m}, {k}, {n} on rank {world.rank}")
    dist.destroy_process_group()
    return lines + notes

