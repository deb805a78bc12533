"""refir's MPI transport next to MPI's own collectives, in one run.

    mpiexec -n 4 python -m benchmarks.transport_bench
    mpiexec -n 4 python -m benchmarks.transport_bench runs    (whole refir.run calls only)

refir never lets MPI reduce (the fold order would be MPI's): an allreduce is,
for small buffers, an allgather of partials and a fold in team order, and for
large ones a slice of every partial to each rank, folded there in team order,
then an allgather of the folded slices. Each of refir's communications is timed
next to the MPI collective that moves the same bytes from contiguous buffers:
the column-major allgather row shows what reading a strided source costs.
Rank 0 prints a table of times and ratios, then the layout changes alone (every
rank copying at once, as inside the collectives): what the column-major
allgather and the all_to_all must add to MPI's collective of contiguous blocks.

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


def timed(fn, repeats: int = 9) -> tuple[float, float]:
    """Best and median seconds of `fn` on this rank, every rank starting together."""
    comm = MPI.COMM_WORLD
    times = []
    for _ in range(repeats):
        comm.Barrier()
        start = time.perf_counter()
        fn()
        comm.Barrier()
        times.append(time.perf_counter() - start)
    return min(times), float(np.median(times))


Row = tuple[str, int, tuple[float, float], tuple[float, float]]


def measure(transport: MpiTransport, mesh: Mesh, elems: int) -> list[Row]:
    """refir's communication next to the MPI collective that moves the same bytes."""
    comm = transport.comm
    n, cols = comm.size, 64
    rows_of = elems // cols
    block = np.random.default_rng(comm.rank).standard_normal((rows_of, cols)).astype(np.float32)
    whole = TensorType("f32", (Axis(rows_of), Axis(cols)), mesh)
    partial = TensorType("f32", (Axis(rows_of), Axis(cols)), mesh, None, ("DIDx",), "sum")
    out = np.empty_like(block)
    recv = np.empty((n,) + block.shape, np.float32)
    gathered = TensorType("f32", (Axis(rows_of * n), Axis(cols)), mesh)
    by_rows = TensorType("f32", (Axis(rows_of * n, "DIDx"), Axis(cols)), mesh)
    by_rows_f = TensorType("f32", (Axis(rows_of * n, "DIDx"), Axis(cols)), mesh, (1, 0))
    scattered = TensorType("f32", (Axis(rows_of, "DIDx"), Axis(cols)), mesh)
    cols_split = TensorType("f32", (Axis(rows_of * n), Axis(cols, "DIDx")), mesh)
    piece = np.empty(block.size // n, np.float32)
    strided = np.asfortranarray(block)  # column-major: refir sends it through a datatype, MPI would misread it

    def ours(op: ops.Communication, src: TensorType, dst: TensorType, x: np.ndarray) -> tuple[float, float]:
        return timed(lambda: transport.communicate(op, src, dst, {comm.rank: x}))

    return [
        ("allreduce", elems, ours(ops.Allreduce("sum", ("DIDx",)), partial, whole, block),
         timed(lambda: comm.Allreduce(block, out, op=MPI.SUM))),
        ("allgather", elems, ours(ops.Allgather(0, "DIDx"), by_rows, gathered, block),
         timed(lambda: comm.Allgather(block, recv))),
        ("allgather, column-major source", elems, ours(ops.Allgather(0, "DIDx"), by_rows_f, gathered, strided),
         timed(lambda: comm.Allgather(block, recv))),
        ("reduce_scatter", elems, ours(ops.ReduceScatter("sum", "DIDx", 0), partial, scattered, block),
         timed(lambda: comm.Reduce_scatter_block(block, piece, op=MPI.SUM))),
        ("all_to_all", elems, ours(ops.AllToAll("DIDx", 1, 0), by_rows, cols_split, block),
         timed(lambda: comm.Alltoall(block, out))),
    ]


def layout_bounds(elems: int) -> list[tuple[str, tuple[float, float]]]:
    """Copies of one rank's block, every rank at once: plain, the column-major
    block into row-major order (numpy's copy and host_copy's tiled one), and the
    all_to_all's packing of column pieces one after another (numpy's copy and the
    transport's)."""
    from interp.host_copy import copy_into
    from interp.mpi_transport import _pieces

    n, cols = MPI.COMM_WORLD.size, 64
    block = np.random.default_rng(0).standard_normal((elems // cols, cols)).astype(np.float32)
    strided, out = np.asfortranarray(block), np.empty_like(block)
    stacked = block.reshape(block.shape[0], n, cols // n).transpose(1, 0, 2)
    packed = np.empty(stacked.shape, np.float32)
    return [("plain copy", timed(lambda: np.copyto(out, block))),
            ("column-major to row-major, numpy", timed(lambda: np.copyto(out, strided))),
            ("column-major to row-major, tiled", timed(lambda: copy_into(out, strided))),
            ("all_to_all packing, numpy", timed(lambda: np.copyto(packed, stacked))),
            ("all_to_all packing, refir", timed(lambda: _pieces(block, n, 1, 0)))]


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
    measure(transport, mesh, 1 << 10)  # warm-up: the first calls of a process pay for imports, caches, communicators
    rows = [r for elems in (1 << 10, 1 << 14, 1 << 18, 1 << 20) for r in measure(transport, mesh, elems)]
    if comm.rank == 0:
        lines = [f"{comm.size} ranks, float32, ms per call, best and median of 9", "",
                 f"{'collective':<31} {'elements':>9} {'refir':>8} {'MPI':>8} {'refir/MPI':>9}"
                 f" {'median':>8} {'median':>8} {'ratio':>6}"]
        for name, elems, (a, am), (b, bm) in rows:
            lines.append(f"{name:<31} {elems:>9} {a * 1e3:>8.3f} {b * 1e3:>8.3f} {a / b:>9.2f}"
                         f" {am * 1e3:>8.3f} {bm * 1e3:>8.3f} {am / bm:>6.2f}")
        sys.stdout.write("\n".join(lines) + "\n")
    bounds = [(elems, name, t) for elems in (1 << 18, 1 << 20) for name, t in layout_bounds(elems)]
    if comm.rank == 0:
        lines = ["", "layout changes alone, every rank at once (ms, best and median of 9)", ""]
        lines += [f"{name:<36} {elems:>9} {a * 1e3:>8.3f} {am * 1e3:>8.3f}" for elems, name, (a, am) in bounds]
        sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
