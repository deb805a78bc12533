"""refir's MPI transport next to MPI's own collectives, in one run.

    mpiexec -n 4 python -m benchmarks.transport_bench [--sizes 1024,1048576] [--repeats 9] [--no-bounds] [--one-node]
    mpiexec -n 4 python -m benchmarks.transport_bench runs    (whole refir.run calls only)

refir never lets MPI reduce (the fold order would be MPI's): an allreduce is,
for small buffers, an allgather of partials and a fold in team order, and for
large ones a slice of every partial to each rank, folded there in team order,
then an allgather of the folded slices. Each of refir's communications is timed
next to the MPI collective that moves the same bytes from contiguous buffers,
their calls alternating (a burst of load on a shared machine falls on both):
the column-major allgather row shows what reading a strided source costs, and
the uneven rows (63 columns, one row short in all, so the last member's block
is shorter; a partial of one row fewer and 63 columns for reduce_scatter, cut
along its rows and along its columns) what
uneven blocks cost next to MPI's plain call of the even 64-column blocks
(Alltoall, Allgather, Reduce_scatter_block: MPI's Allgatherv of the uneven
blocks took 2-3x Allgather's time here, its Reduce_scatter about
Reduce_scatter_block's, benchmarks/HISTORY.md, `uneven`; so the even call is the
stricter or an equal peer), and the odd-sized allreduce (uneven slices)
next to MPI's Allreduce of the same buffer.
Each row has a twin, `..., across nodes`: refir's call as it goes where every
rank is on a node of its own (interp/mpi/nodes.py's rule of
REFIR_MPI_NODE_RANKS=1, set around its calls: no shared-memory window or result
slots, MPI's own collectives), its last column its time over the one-node
row's (the machine's nodes, whatever the launch's REFIR_MPI_NODE_RANKS says);
the three calls alternate. `--one-node` leaves the twins out (as does a
checkout without interp/mpi/nodes.py, for benchmarks/transport_ab.py).
Rank 0 prints a table of times and ratios, then the layout changes alone (every
rank copying at once, as inside the collectives): what the column-major
allgather and the all_to_all must add to MPI's collective of contiguous blocks.

`runs` times whole `refir.run(..., backend="spmd")` calls of a small program
(an allreduce and an allgather) in a loop: what a run costs beyond its
communications (communicators, inputs out, results back). It uses only the
public API, so it measures older versions of refir as well.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from mpi4py import MPI

from interp.mpi.transport import MpiTransport

try:
    from interp.mpi import nodes
except ImportError:  # a checkout from before simulated nodes (benchmarks/transport_ab.py runs this file there)
    nodes = None
from refir.ir import ops
from refir.ir.types import Axis, Mesh, TensorType


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


def timed_all(fns: list, repeats: int) -> list[tuple[float, float]]:
    """`timed` of each, their calls alternating: a burst of load from elsewhere
    on a shared machine falls on all, not on one side of a ratio."""
    comm = MPI.COMM_WORLD
    times: list[list[float]] = [[] for _ in fns]
    for fn in fns:  # the first call of a plan or a communicator is not timed
        fn()
    for _ in range(repeats):
        for fn, out in zip(fns, times):
            comm.Barrier()
            start = time.perf_counter()
            fn()
            comm.Barrier()
            out.append(time.perf_counter() - start)
    return [(min(t), float(np.median(t))) for t in times]


def timed_pair(ours, theirs, repeats: int) -> tuple[tuple[float, float], tuple[float, float]]:
    a, b = timed_all([ours, theirs], repeats)
    return a, b


def on_nodes(fn, node_ranks: int | None):
    """`fn` under a node rule: None the machine's nodes, 1 every rank its own."""
    def call() -> None:
        with nodes.simulated(node_ranks):
            fn()
    return call


Pair = tuple[float, float]
Row = tuple[str, int, Pair, Pair, Pair | None]  # name, elements, refir, MPI; an across-nodes row: the one-node refir


def measure(transport: MpiTransport, mesh: Mesh, elems: int, repeats: int = 9, across: bool = True) -> list[Row]:
    """refir's communication next to the MPI collective that moves the same bytes
    (and, `across`, refir's as it goes across nodes)."""
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
    # Uneven blocks: one row fewer in all (the last member's block is short) and 63 columns cut over the team
    by_rows_uneven = TensorType("f32", (Axis(rows_of * n - 1, "DIDx"), Axis(cols - 1)), mesh)
    cols_split_uneven = TensorType("f32", (Axis(rows_of * n - 1), Axis(cols - 1, "DIDx")), mesh)
    uneven = np.ascontiguousarray(block[:rows_of - (comm.rank == n - 1), :cols - 1])
    gathered_uneven = TensorType("f32", (Axis(rows_of * n - 1), Axis(cols - 1)), mesh)
    # A partial of one row fewer and 63 columns on every member: reduce_scatter's last block is short, and
    # the allreduce's element count is odd (its slices uneven)
    short = np.ascontiguousarray(block[:rows_of - 1, :cols - 1])
    partial_short = TensorType("f32", (Axis(rows_of - 1), Axis(cols - 1)), mesh, None, ("DIDx",), "sum")
    whole_short = TensorType("f32", (Axis(rows_of - 1), Axis(cols - 1)), mesh)
    scattered_short = TensorType("f32", (Axis(rows_of - 1, "DIDx"), Axis(cols - 1)), mesh)
    scattered_cols = TensorType("f32", (Axis(rows_of - 1), Axis(cols - 1, "DIDx")), mesh)
    short_out = np.empty_like(short)

    def row(name: str, op: ops.Communication, src: TensorType, dst: TensorType, x: np.ndarray,
            theirs) -> list[Row]:
        def ours() -> None:
            transport.communicate(op, src, dst, {comm.rank: x})

        if not across or nodes is None:
            return [(name, elems, *timed_pair(ours, theirs, repeats), None)]
        one, apart, mpi = timed_all([on_nodes(ours, None), on_nodes(ours, 1), theirs], repeats)
        return [(name, elems, one, mpi, None), (f"{name}, across nodes", elems, apart, mpi, one)]

    return [r for rows in [
        row("allreduce", ops.Allreduce("sum", ("DIDx",)), partial, whole, block,
            lambda: comm.Allreduce(block, out, op=MPI.SUM)),
        row("allgather", ops.Allgather(0, "DIDx"), by_rows, gathered, block, lambda: comm.Allgather(block, recv)),
        row("allgather, column-major source", ops.Allgather(0, "DIDx"), by_rows_f, gathered, strided,
            lambda: comm.Allgather(block, recv)),
        row("reduce_scatter", ops.ReduceScatter("sum", "DIDx", 0), partial, scattered, block,
            lambda: comm.Reduce_scatter_block(block, piece, op=MPI.SUM)),
        row("all_to_all", ops.AllToAll("DIDx", 1, 0), by_rows, cols_split, block,
            lambda: comm.Alltoall(block, out)),
        row("all_to_all, uneven blocks", ops.AllToAll("DIDx", 1, 0), by_rows_uneven, cols_split_uneven, uneven,
            lambda: comm.Alltoall(block, out)),
        row("allgather, uneven blocks", ops.Allgather(0, "DIDx"), by_rows_uneven, gathered_uneven, uneven,
            lambda: comm.Allgather(block, recv)),
        row("reduce_scatter, uneven blocks", ops.ReduceScatter("sum", "DIDx", 0), partial_short, scattered_short,
            short, lambda: comm.Reduce_scatter_block(block, piece, op=MPI.SUM)),
        row("reduce_scatter, uneven columns", ops.ReduceScatter("sum", "DIDx", 1), partial_short, scattered_cols,
            short, lambda: comm.Reduce_scatter_block(block, piece, op=MPI.SUM)),
        row("allreduce, odd size", ops.Allreduce("sum", ("DIDx",)), partial_short, whole_short, short,
            lambda: comm.Allreduce(short, short_out, op=MPI.SUM)),
    ] for r in rows]


def layout_bounds(elems: int) -> list[tuple[str, tuple[float, float]]]:
    """Copies of one rank's block, every rank at once: plain, the column-major
    block into row-major order (numpy's copy and host_copy's tiled one), and the
    all_to_all's packing of column pieces one after another (numpy's copy and the
    transport's)."""
    from interp.mpi.host_copy import copy_into
    from interp.mpi.layout import sender

    n, cols = MPI.COMM_WORLD.size, 64
    block = np.random.default_rng(0).standard_normal((elems // cols, cols)).astype(np.float32)
    strided, out = np.asfortranarray(block), np.empty_like(block)
    stacked = block.reshape(block.shape[0], n, cols // n).transpose(1, 0, 2)
    packed = np.empty(stacked.shape, np.float32)
    return [("plain copy", timed(lambda: np.copyto(out, block))),
            ("column-major to row-major, numpy", timed(lambda: np.copyto(out, strided))),
            ("column-major to row-major, tiled", timed(lambda: copy_into(out, strided))),
            ("all_to_all packing, numpy", timed(lambda: np.copyto(packed, stacked))),
            ("all_to_all packing, refir", timed(lambda: sender(block.shape, n, 1, 0)(block)))]


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


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transport_bench", description=__doc__.split("\n")[0])
    parser.add_argument("what", nargs="?", choices=["collectives", "runs"], default="collectives")
    parser.add_argument("--sizes", default="1024,16384,262144,1048576",
                        help="elements per rank, comma-separated (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=9, help="timed calls of each side (default: %(default)s)")
    parser.add_argument("--no-bounds", action="store_true", help="skip the layout changes timed alone")
    parser.add_argument("--one-node", action="store_true", help="leave out the rows across nodes")
    return parser.parse_args(argv)


def main() -> None:
    comm = MPI.COMM_WORLD
    args = parse_args(sys.argv[1:])
    if args.what == "runs":
        lines = repeated_runs()
        if comm.rank == 0:
            sys.stdout.write(f"{comm.size} ranks, spmd\n" + "\n".join(lines) + "\n")
        return
    mesh = Mesh("m", (comm.size,), tuple(range(comm.size)))
    transport = MpiTransport()
    # warm-up: the first calls of a process pay for imports, caches, communicators
    measure(transport, mesh, 1 << 10, across=not args.one_node)
    sizes = [int(n) for n in args.sizes.split(",")]
    rows = [r for elems in sizes for r in measure(transport, mesh, elems, args.repeats, not args.one_node)]
    if comm.rank == 0:
        lines = [f"{comm.size} ranks, float32, ms per call, best and median of {args.repeats}"
                 " (refir's and MPI's calls alternating)", "",
                 f"{'collective':<45} {'elements':>9} {'refir':>8} {'MPI':>8} {'refir/MPI':>9}"
                 f" {'median':>8} {'median':>8} {'ratio':>6} {'/one node':>9}"]
        for name, elems, (a, am), (b, bm), one in rows:
            apart = f" {a / one[0]:>9.2f}" if one else ""  # across nodes over one node, best calls
            lines.append(f"{name:<45} {elems:>9} {a * 1e3:>8.3f} {b * 1e3:>8.3f} {a / b:>9.2f}"
                         f" {am * 1e3:>8.3f} {bm * 1e3:>8.3f} {am / bm:>6.2f}{apart}")
        sys.stdout.write("\n".join(lines) + "\n")
    if args.no_bounds:
        return
    bounds = [(elems, name, t) for elems in (1 << 18, 1 << 20) for name, t in layout_bounds(elems)]
    if comm.rank == 0:
        lines = ["", "layout changes alone, every rank at once (ms, best and median of 9)", ""]
        lines += [f"{name:<36} {elems:>9} {a * 1e3:>8.3f} {am * 1e3:>8.3f}" for elems, name, (a, am) in bounds]
        sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
