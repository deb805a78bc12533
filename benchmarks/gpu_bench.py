"""refir's gpu kernels and NCCL allreduce next to torch's, on one machine, in one run.

    mpiexec -n 2 python -m benchmarks.gpu_bench      (one GPU per rank)
    python -m benchmarks.gpu_bench                   (no allreduce)
    mpiexec -n 2 python -m benchmarks.gpu_bench run  (whole refir.run calls, below)
    mpiexec -n 2 python -m benchmarks.gpu_bench uneven  (pad-and-slice, below)

At 1 GiB of float32: permutes (2,0,1), (0,2,1) and (1,0,2) into a row-major
result (bandwidth = bytes read + written), a sum over everything (bytes read;
refir accumulates in float64, torch in float32) and, with two or more ranks,
an allreduce through refir's whole communication path (bus bandwidth,
2(n-1)/n x bytes, as nccl-tests count it). Rank 0 prints GB/s and refir/torch.
Set GPU_BENCH_MIB to measure another size.

`run` times whole `refir.run(..., backend="gpu")` calls of the seed-2 pattern
(x: f32[M, K@DIDx] times w: f32[K@DIDx, N], one allreduce, then bias and relu)
at M, K, N = 256, 512, 256; 4096^3; 8192^3 (GPU_BENCH_SIZES="M,K,N M,K,N ..."),
after a warm-up run, next to torch doing the same with host arrays in and out
and with everything already on the device. Every rank holds the global inputs,
as torch's ranks do; refir's rank 0 returns the whole result (torch's every
rank). It also times refir when only rank 0 is given the inputs, the first
(cold) run, and profiles one large run on rank 0.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import numpy as np

from gpu_backend.buffer import DeviceBuffer
from gpu_backend.device import SIMULATED, cuda, use_device
from gpu_backend.kernels import copy_into
from gpu_backend.reduce import reduce_into
from gpu_backend.transports import LaidOut, transport_for
from refir import ops
from refir.types import Axis, Mesh, TensorType, local_shape
from refir.world import World, mpi_world

MIB = int(os.environ.get("GPU_BENCH_MIB", "1024"))
ELEMS = MIB * (1 << 20) // 4
SIDE = 512  # the permuted tensors are [ELEMS / SIDE^2, SIDE, SIDE]
REPEATS = 10


def median_time(fn: Callable[[], object], sync: Callable[[], object], barrier: Callable[[], object]) -> float:
    fn()  # compile, allocate, warm up
    times = []
    for _ in range(REPEATS):
        barrier()
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def single_gpu(torch: object, barrier: Callable[[], object]) -> list[tuple[str, float, float]]:
    n = ELEMS
    shape = (n // (SIDE * SIDE), SIDE, SIDE)
    x = DeviceBuffer.dense(cuda.to_device(np.ones(n, np.float32)), shape)
    tx = torch.ones(shape, device="cuda")
    rows = []
    for perm in [(2, 0, 1), (0, 2, 1), (1, 0, 2)]:
        view = x.transpose(perm)
        out = DeviceBuffer.empty(view.shape, x.dtype)
        tout = torch.empty(tuple(shape[p] for p in perm), device="cuda")
        ours = median_time(lambda: copy_into(out, view), cuda.synchronize, barrier)  # noqa: B023
        theirs = median_time(lambda: tout.copy_(tx.permute(perm)), torch.cuda.synchronize, barrier)  # noqa: B023
        rows.append((f"permute {perm}", 2 * 4 * n / ours, 2 * 4 * n / theirs))
    total = DeviceBuffer.empty((), x.dtype)
    flat = DeviceBuffer.dense(x.data, (n,))
    ours = median_time(lambda: reduce_into(total, flat, (0,), "sum"), cuda.synchronize, barrier)
    theirs = median_time(lambda: torch.sum(tx), torch.cuda.synchronize, barrier)
    rows.append(("sum (all axes)", 4 * n / ours, 4 * n / theirs))
    return rows


def allreduce(torch: object, world: World) -> tuple[str, float, float]:
    import torch.distributed as dist

    n, size = ELEMS, world.size
    mesh = Mesh("m", (size,), tuple(range(size)))
    partial = TensorType("f32", (Axis(n),), mesh, None, ("DIDx",), "sum")
    whole = TensorType("f32", (Axis(n),), mesh)
    buf = DeviceBuffer.dense(cuda.to_device(np.ones(n, np.float32)), (n,))
    transport = transport_for(world)
    laid = LaidOut(transport)
    op = ops.Allreduce("sum", ("DIDx",))
    barrier = world.comm.Barrier
    ours = median_time(lambda: laid.communicate(op, partial, whole, {world.rank: buf}), cuda.synchronize, barrier)
    transport.close()
    port = world.comm.bcast(29500 + os.getpid() % 1000 if world.is_root else None, root=0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=world.rank, world_size=size)
    tensor = torch.ones(n, device="cuda")
    theirs = median_time(lambda: dist.all_reduce(tensor), torch.cuda.synchronize, barrier)
    dist.destroy_process_group()
    bus = 2 * (size - 1) / size * 4 * n
    return (f"allreduce x{size} (bus)", bus / ours, bus / theirs)


PATTERN = """mesh m = [{devices}]
func main(x: f32[M, K@DIDx], w: f32[K@DIDx, N], bias: f32[N]) {{
  c: f32[M, N] = matmul(x, w)
  bb: f32[b, N] = unsqueeze(bias, dims=[0])
  y = add(c, bb)
  out = relu(y)
  return out
}}
"""
def uneven(torch: object, world: World) -> list[str]:
    """What pad-and-slice costs: NCCL has no v-collectives, so an uneven allgather
    or reduce_scatter sends every block padded to ceil(E/n) and slices the padding
    off. Timed through refir's whole communication path at an extent that divides
    (n x c) and at one that does not (n x c - 1, the last block one short), next
    to torch's all_gather_into_tensor and reduce_scatter_tensor at the even one.
    GB/s of the gathered (or reduced) whole tensor."""
    import torch.distributed as dist

    size = world.size
    mesh = Mesh("m", (size,), tuple(range(size)))
    barrier = world.comm.Barrier
    transport = transport_for(world)
    laid = LaidOut(transport)
    chunk = ELEMS // size

    def timed(n: int) -> tuple[int, float, float]:
        sharded = TensorType("f32", (Axis(n, "DIDx"),), mesh)
        whole = TensorType("f32", (Axis(n),), mesh)
        partial = TensorType("f32", (Axis(n),), mesh, None, ("DIDx",), "sum")
        (mine,) = local_shape(sharded, {}, world.rank)
        block = DeviceBuffer.dense(cuda.to_device(np.ones(mine, np.float32)), (mine,))
        full = DeviceBuffer.dense(cuda.to_device(np.ones(n, np.float32)), (n,))
        gather, scatter = ops.Allgather(0, "DIDx"), ops.ReduceScatter("sum", "DIDx", 0)
        return (n, median_time(lambda: laid.communicate(gather, sharded, whole, {world.rank: block}),
                               cuda.synchronize, barrier),
                median_time(lambda: laid.communicate(scatter, partial, sharded, {world.rank: full}),
                            cuda.synchronize, barrier))

    rows = [timed(chunk * size), timed(chunk * size - 1)]
    transport.close()
    port = world.comm.bcast(29500 + os.getpid() % 1000 if world.is_root else None, root=0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=world.rank, world_size=size)
    out, part = torch.empty(chunk * size, device="cuda"), torch.ones(chunk, device="cuda")
    torch_gather = median_time(lambda: dist.all_gather_into_tensor(out, part), torch.cuda.synchronize, barrier)
    torch_scatter = median_time(lambda: dist.reduce_scatter_tensor(part, out), torch.cuda.synchronize, barrier)
    dist.destroy_process_group()
    (n_even, g_even, s_even), (n_odd, g_odd, s_odd) = rows
    gbs = lambda n, s: 4 * n / s / 1e9  # noqa: E731
    return [f"{MIB} MiB float32 over {size} ranks, median of {REPEATS}; GB/s of the whole tensor", "",
            f"{'':<16} {'torch even':>11} {'refir even':>11} {'refir uneven':>13} {'uneven/even':>12}",
            f"{'allgather':<16} {gbs(n_even, torch_gather):>11.1f} {gbs(n_even, g_even):>11.1f} "
            f"{gbs(n_odd, g_odd):>13.1f} {g_even / g_odd * n_odd / n_even:>12.2f}",
            f"{'reduce_scatter':<16} {gbs(n_even, torch_scatter):>11.1f} {gbs(n_even, s_even):>11.1f} "
            f"{gbs(n_odd, s_odd):>13.1f} {s_even / s_odd * n_odd / n_even:>12.2f}"]


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

    port = world.comm.bcast(29600 + os.getpid() % 1000 if world.is_root else None, root=0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=world.rank, world_size=world.size)
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


def main() -> int:
    if SIMULATED:
        sys.stderr.write("gpu_bench needs a real GPU\n")
        return 1
    import torch

    world = mpi_world()
    if world is not None:
        use_device(world.comm)
        torch.cuda.set_device(cuda.get_current_device().id)
    barrier = world.comm.Barrier if world else (lambda: None)
    if sys.argv[1:] in (["run"], ["uneven"]):
        if world is None:
            sys.stderr.write(f"gpu_bench {sys.argv[1]} needs mpiexec with one rank per GPU\n")
            return 1
        lines = (whole_runs if sys.argv[1] == "run" else uneven)(torch, world)
        if world.is_root:
            sys.stdout.write("\n".join(lines) + "\n")
        return 0
    rows = single_gpu(torch, barrier)
    if world is not None:
        rows.append(allreduce(torch, world))
    if world is None or world.is_root:
        lines = [f"{MIB} MiB float32, median of {REPEATS}; GB/s", "",
                 f"{'':<24} {'refir':>9} {'torch':>9} {'refir/torch':>12}"]
        lines += [f"{name:<24} {a / 1e9:>9.1f} {b / 1e9:>9.1f} {a / b:>12.2f}" for name, a, b in rows]
        sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
