"""The MPI transport's allgather, reduce_scatter, allreduce and all_to_all
results on two checkouts, compared bit for bit: a change of their paths must
keep every bit.

    mpiexec -n 4 python -m benchmarks.collective_bits dump PREFIX      (in each checkout, PYTHONPATH=the checkout)
    python -m benchmarks.collective_bits compare BEFORE_PREFIX AFTER_PREFIX 4

`dump` writes each rank's results (as bytes, with their shapes) to
PREFIX.RANK.npz: six dtypes, even and uneven extents from 5 elements to past
the result slots' bound (1 MiB blocks of float32), both axes, row- and
column-major sources, sums and maxima of partials whose fold order shows in
the bits; all_to_alls of 63 and 64 columns (uneven and equal pieces) cut
along either axis, to past the slots' bound (pieces of 256 KiB). `compare`
names every result that differs.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

DTYPES = ((np.float32, "f32"), (np.float64, "f64"), (ml_dtypes.bfloat16, "bf16"), (np.float16, "f16"),
          (np.int32, "i32"), (np.int8, "i8"))


def data(shape: tuple[int, ...], dtype: type, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return g.integers(-100, 100, shape).astype(dtype)
    return (g.standard_normal(shape) * 100).astype(dtype)


def dump(prefix: str) -> None:
    from mpi4py import MPI

    from interp.collectives import split
    from interp.mpi.transport import MpiTransport
    from refir.ir import ops
    from refir.ir.types import Axis, Mesh, TensorType

    comm = MPI.COMM_WORLD
    n, rank = comm.size, comm.rank
    mesh = Mesh("m", (n,), tuple(range(n)))
    t = MpiTransport()
    out: dict[str, np.ndarray] = {}
    for dtype, code in DTYPES:
        isz = np.dtype(dtype).itemsize
        for rows in (5, 3 * n + 1, (100 * 4 // isz) * n - 1, (300 * 4 // isz) * n - 1, (1100 * 4 // isz) * n - 1,
                     (1100 * 4 // isz) * n):
            for axis in (0, 1):
                ext = (rows, 63) if axis == 0 else (63, rows)
                mine = split(data(ext, dtype, rows + axis), n, axis)[rank]
                src = TensorType(code, tuple(Axis(e, "DIDx") if a == axis else Axis(e) for a, e in enumerate(ext)),
                                 mesh)
                dst = TensorType(code, tuple(Axis(e) for e in ext), mesh)
                sdst = TensorType(code, tuple(Axis(e, "DIDx") if a == axis else Axis(e) for a, e in enumerate(ext)),
                                  mesh)
                part = data(ext, dtype, 1000 + rows + axis + 7 * rank)
                for lay, make in (("c", np.ascontiguousarray), ("f", np.asfortranarray)):
                    got = t.communicate(ops.Allgather(axis, "DIDx"), src, dst, {rank: make(mine)})[rank]
                    out[f"ag {code} {rows} {axis} {lay}"] = np.ascontiguousarray(got).copy()
                    for kind in ("sum", "max"):
                        psrc = TensorType(code, tuple(Axis(e) for e in ext), mesh, None, ("DIDx",), kind)
                        got = t.communicate(ops.ReduceScatter(kind, "DIDx", axis), psrc, sdst, {rank: make(part)})
                        out[f"rs {kind} {code} {rows} {axis} {lay}"] = np.ascontiguousarray(got[rank]).copy()
                        got = t.communicate(ops.Allreduce(kind, ("DIDx",)), psrc, dst, {rank: make(part)})
                        out[f"ar {kind} {code} {rows} {axis} {lay}"] = np.ascontiguousarray(got[rank]).copy()
        for rows in (5, 3 * n + 1, (300 * 4 // isz) * n - 1, (4400 * 4 // isz) * n - 1, (4400 * 4 // isz) * n):
            for cols in (63, 64):
                for concat in (0, 1):
                    ext = (rows, cols) if concat == 0 else (cols, rows)
                    mine = split(data(ext, dtype, 2000 + rows + cols + concat), n, concat)[rank]
                    src = TensorType(code, tuple(Axis(e, "DIDx") if a == concat else Axis(e)
                                                 for a, e in enumerate(ext)), mesh)
                    dst = TensorType(code, tuple(Axis(e, "DIDx") if a != concat else Axis(e)
                                                 for a, e in enumerate(ext)), mesh)
                    for lay, make in (("c", np.ascontiguousarray), ("f", np.asfortranarray)):
                        got = t.communicate(ops.AllToAll("DIDx", 1 - concat, concat), src, dst, {rank: make(mine)})
                        out[f"a2a {code} {rows} {cols} {concat} {lay}"] = np.ascontiguousarray(got[rank]).copy()
    np.savez(f"{prefix}.{rank}.npz", **{k: v.view(np.uint8).reshape(-1) for k, v in out.items()},
             **{"shape " + k: np.array(v.shape) for k, v in out.items()})
    if rank == 0:
        print("results", len(out))


def compare(before: str, after: str, ranks: int) -> None:
    for rank in range(ranks):
        a, b = np.load(f"{before}.{rank}.npz"), np.load(f"{after}.{rank}.npz")
        differ = sorted(set(a.files) ^ set(b.files)) + [k for k in a.files if k in b.files
                                                         and a[k].tobytes() != b[k].tobytes()]
        print(f"rank {rank}: {len(a.files) // 2} results, differ: {differ or 'none'}")


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        dump(sys.argv[2])
    else:
        compare(sys.argv[2], sys.argv[3], int(sys.argv[4]))
