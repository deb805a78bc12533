"""The fixed host cost of one `refir.run` call on the spmd backend, next to the
same arithmetic done directly in numpy (and, under MPI, MPI's own allreduce).

    python -m benchmarks.run_overhead                    (every rank in this process: 2 and 4)
    mpiexec -n 2 python -m benchmarks.run_overhead       (one rank per process)
    python -m benchmarks.run_overhead --profile          (and a cProfile of the smallest size)

The program is issue 15's seed-2 pattern (benchmarks/gpu_runs.py), built once
and run again and again. Per size: the median ms of a run, its spread (the
25th and 75th percentiles), the numpy peer's median (refir's numerics: each
device's matmul in float64 rounded to float32, partials folded in device
order, bias, relu) and their ratio; under MPI also two bare rounds of
refir's small messages (the floor of a run's agreement and result headers);
then the median ms of each phase of a run (the functions refir.run calls,
timed by wrapping them for the measurement only; "rest" is what no phase
covers). It uses only names that older versions of refir have too, so it
measures them alike (a phase that is missing there is left out).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import numpy as np

from benchmarks.phases import PATTERN, nested, phase_medians

SIZES = [tuple(int(n) for n in s.split(",")) for s in os.environ.get("RUN_SIZES", "8,16,8 256,512,256").split()]
REPEATS = int(os.environ.get("RUN_REPEATS", "300"))
# (module, attribute, label); a label in parentheses is part of the phase before it. Each
# function is wrapped where its caller looks it up: refir.running.run_setup's, refir.running.runner's and
# refir.world.exchange's names (before the runner's split, refir.world.exchange looked both up in
# refir.running.runner, and has neither).
SPOTS = [("refir.running.run_setup", "verified", "verify"), ("refir.running.run_setup", "bind_and_check", "bind"),
         ("refir.world.exchange", "bind_and_check", "bind"), ("refir.world.exchange", "settle", "agree"),
         ("refir.running.run_setup", "shard_inputs", "shard"), ("refir.world.exchange", "shard_inputs", "shard"),
         ("refir.world.exchange", "deliver_inputs", "deliver"), ("interp.backend", "run_spmd", "backend"),
         ("interp.spmd.NumpyLocal", "__call__", "(local steps"),
         ("interp.spmd.NumpyTransport", "communicate", "communication)"),
         ("refir.running.runner", "gather_outputs", "gather")]


def inputs(m: int, k: int, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.integers(-4, 5, (m, k)).astype(np.float32), "w": rng.integers(-4, 5, (k, n)).astype(np.float32),
            "bias": rng.integers(-4, 5, n).astype(np.float32)}


def numpy_peer(given: dict[str, np.ndarray], parts: int) -> Callable[[], np.ndarray]:
    """The run's arithmetic alone, in one process: every device's block product."""
    xs, ws = np.array_split(given["x"], parts, 1), np.array_split(given["w"], parts, 0)
    bias = given["bias"][None]

    def peer() -> np.ndarray:
        partials = [(a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32) for a, b in zip(xs, ws)]
        acc = partials[0].copy()
        for p in partials[1:]:
            acc = np.add(acc, p)
        return np.maximum(acc + bias, np.float32(0))

    return peer


def mpi_peers(given: dict[str, np.ndarray], comm) -> tuple[Callable[[], object], Callable[[], object]]:  # noqa: ANN001
    """This rank's arithmetic with MPI's own allreduce of the partial; and that allreduce alone."""
    from mpi4py import MPI

    k = given["x"].shape[1] // comm.size
    a = np.ascontiguousarray(given["x"][:, comm.rank * k:(comm.rank + 1) * k])
    b = np.ascontiguousarray(given["w"][comm.rank * k:(comm.rank + 1) * k])
    bias = given["bias"][None]
    partial = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    whole = np.empty_like(partial)

    def peer() -> np.ndarray:
        p = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
        out = np.empty_like(p)
        comm.Allreduce(p, out, op=MPI.SUM)
        return np.maximum(out + bias, np.float32(0))

    return peer, lambda: comm.Allreduce(partial, whole, op=MPI.SUM)


def two_rounds() -> Callable[[], object]:
    """The floor of a run's own MPI rounds: two of refir's small allgathers
    (the agreement on the inputs, the result headers), with nothing to check."""
    from refir.world.mpi_job import COMMS, allgather_obj

    comm = COMMS.world()
    return lambda: (allgather_obj(comm, (None, {"M": 1}), "a round"), allgather_obj(comm, [], "a round"))


def timed(fn: Callable[[], object], barrier: Callable[[], object], repeats: int = REPEATS) -> list[float]:
    fn()
    times = []
    for _ in range(repeats):
        barrier()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _target(path: str, attr: str) -> tuple[object, str] | None:
    import importlib

    module, _, cls = path.rpartition(".") if path.endswith(("NumpyLocal", "NumpyTransport")) else (path, "", "")
    try:
        owner = importlib.import_module(module)
        owner = getattr(owner, cls) if cls else owner
    except (ImportError, AttributeError):
        return None
    return (owner, attr) if hasattr(owner, attr) else None


def phases(fn: Callable[[], object], barrier: Callable[[], object], mpi: bool) -> str:
    """Median ms of each phase of a run (see the module's docstring). Under MPI
    the inputs are bound inside the agreement."""
    spots = [(path, attr, "(of which bind)" if mpi and label == "bind" else label) for path, attr, label in SPOTS]
    found = [(*t, label) for path, attr, label in spots if (t := _target(path, attr)) is not None]
    fn()
    parts, total = phase_medians(fn, barrier, found, REPEATS)
    parts["rest"] = total - sum(t for label, t in parts.items() if not nested(label))
    return ", ".join(f"{label} {t * 1e3:.3f}" for label, t in parts.items()) + f" (of {total * 1e3:.3f} ms)"


def summary(times: list[float]) -> str:
    q1, q2, q3 = np.percentile(times, [25, 50, 75]) * 1e3
    return f"{q2:.3f} ms [{q1:.3f}-{q3:.3f}]"


def profile(fn: Callable[[], object]) -> str:
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    fn()
    prof.enable()
    for _ in range(100):
        fn()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    return text.getvalue()


def report(devices: int, comm=None, with_profile: bool = False) -> list[str]:  # noqa: ANN001
    import refir

    barrier = comm.Barrier if comm is not None else (lambda: None)
    program = refir.load(PATTERN.format(devices=", ".join(map(str, range(devices)))))
    where = f"{devices} ranks, one per MPI process" if comm is not None else f"{devices} ranks in one process"
    lines = [f"{where}: refir.run(backend='spmd'), median [25th-75th percentile] of {REPEATS}"]
    for m, k, n in SIZES:
        given = inputs(m, k, n)
        run = lambda given=given: refir.run(program, given, backend="spmd")  # noqa: E731
        ours = timed(run, barrier)
        if comm is None:
            peer = timed(numpy_peer(given, devices), barrier)
            lines.append(f"  {m},{k},{n}: refir {summary(ours)}, numpy {summary(peer)}, "
                         f"refir/numpy {np.median(ours) / np.median(peer):.1f}")
        else:
            with_mpi, allreduce = mpi_peers(given, comm)
            peer, alone, rounds = timed(with_mpi, barrier), timed(allreduce, barrier), timed(two_rounds(), barrier)
            lines.append(f"  {m},{k},{n}: refir {summary(ours)}, numpy + MPI allreduce {summary(peer)} "
                         f"(the allreduce alone {summary(alone)}), refir/peer {np.median(ours) / np.median(peer):.1f}; "
                         f"two of refir's small rounds alone (a run's agreement and result headers) {summary(rounds)}")
        lines.append("    phases (rank 0): " + phases(run, barrier, comm is not None))
        if with_profile and (m, k, n) == SIZES[0]:
            lines.append(profile(run))
    return lines


def main() -> None:
    with_profile = "--profile" in sys.argv[1:]
    from refir.world.ranks import launched_by_mpi

    if launched_by_mpi():
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        lines = report(comm.size, comm, with_profile)
        if comm.rank == 0:
            sys.stdout.write("\n".join(lines) + "\n")
        return
    for devices in (2, 4):
        sys.stdout.write("\n".join(report(devices, None, with_profile and devices == 2)) + "\n")


if __name__ == "__main__":
    main()
