"""refir's MPI transport next to MPI's own collectives, in one run.

    mpiexec -n 4 python -m benchmarks.transport_bench
    mpiexec -n 4 python -m benchmarks.transport_bench runs    (whole refir.run calls only)

refir never lets MPI reduce (the fold order would be MPI's): an allreduce is an
allgather of partials plus a fold in team order. This measures what that
exactness costs against MPI_Allreduce, and what refir's packing costs on an
allgather of a strided (column-major) buffer against a plain MPI_Allgather of a
contiguous one. Rank 0 prints a table of times and ratios.

`runs` times whole `refir.run(..., backend="spmd")` calls of a small program
(an allreduce and an allgather) in a loop: what a run costs beyond its
communications (communicators, inputs out, results back). It uses only the
public API, so it measures older versions of refir as well.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

from interp.mpi_transport import MpiTransport
from refir import ops
from refir.types import Axis, Mesh, TensorType


def best_of(fn, repeats: int = 7) -> float:
    comm = MPI.COMM_WORLD
    times = []
    for _ in range(repeats):
        comm.Barrier()
        start = time.perf_counter()
        fn()
        comm.Barrier()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(transport: MpiTransport, mesh: Mesh, elems: int) -> list[tuple[str, int, float, float]]:
    comm = transport.comm
    n, cols = comm.size, 64
    block = np.random.default_rng(comm.rank).standard_normal((elems // cols, cols)).astype(np.float32)
    partial = TensorType("f32", (Axis(elems // cols), Axis(cols)), mesh, None, ("DIDx",), "sum")
    whole = TensorType("f32", (Axis(elems // cols), Axis(cols)), mesh)
    allreduce = ops.Allreduce("sum", ("DIDx",))
    out = np.empty_like(block)
    rows = [("allreduce", elems,
             best_of(lambda: transport.communicate(allreduce, partial, whole, {comm.rank: block})),
             best_of(lambda: comm.Allreduce(block, out, op=MPI.SUM)))]
    strided = np.asfortranarray(block)  # column-major: refir packs it, MPI would misread it
    sharded = TensorType("f32", (Axis(elems // cols * n, "DIDx"), Axis(cols)), mesh, (1, 0))
    gathered = TensorType("f32", (Axis(elems // cols * n), Axis(cols)), mesh)
    allgather = ops.Allgather(0, "DIDx")
    recv = np.empty((n,) + block.shape, np.float32)
    rows.append(("allgather", elems,
                 best_of(lambda: transport.communicate(allgather, sharded, gathered, {comm.rank: strided})),
                 best_of(lambda: comm.Allgather(block, recv))))
    return rows


RUN_PROGRAM = """mesh m = [{devices}]
func main(x: f32[R@DIDx, C]) {{
  s = sum(x, dims=[0])
  g: f32[R, C] = set(x)
  return s, g
}}
"""


def repeated_runs(runs: int = 30) -> list[str]:
    import refir

    comm = MPI.COMM_WORLD
    program = refir.load(RUN_PROGRAM.format(devices=", ".join(map(str, range(comm.size)))))
    lines = []
    for rows in (8 * comm.size, 1024 * comm.size):
        x = np.random.default_rng(0).standard_normal((rows, 64)).astype(np.float32)
        comm.Barrier()
        start = time.perf_counter()
        refir.run(program, {"x": x})
        first = time.perf_counter() - start
        times = []
        for _ in range(runs):
            comm.Barrier()
            start = time.perf_counter()
            refir.run(program, {"x": x})
            times.append(time.perf_counter() - start)
        lines.append(f"refir.run, x: f32[{rows}, 64]: first {first * 1e3:.2f} ms, then median "
                     f"{np.median(times) * 1e3:.2f} ms, best {min(times) * 1e3:.2f} ms over {runs} runs")
    return lines


def main() -> None:
    comm = MPI.COMM_WORLD
    if sys.argv[1:] == ["runs"]:
        lines = repeated_runs()
        if comm.rank == 0:
            sys.stdout.write(f"{comm.size} ranks, spmd\n" + "\n".join(lines) + "\n")
        return
    mesh = Mesh("m", (comm.size,), tuple(range(comm.size)))
    transport = MpiTransport()
    rows = [r for elems in (1 << 10, 1 << 14, 1 << 18, 1 << 20) for r in measure(transport, mesh, elems)]
    if comm.rank == 0:
        lines = [f"{comm.size} ranks, float32, best of 7", "",
                 f"{'collective':<11} {'elements':>9} {'refir ms':>9} {'MPI ms':>9} {'refir/MPI':>9}"]
        for name, elems, a, b in rows:
            lines.append(f"{name:<11} {elems:>9} {a * 1e3:>9.3f} {b * 1e3:>9.3f} {a / b:>9.2f}")
        sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
