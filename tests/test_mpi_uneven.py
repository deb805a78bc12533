"""The MPI transport's allgather, reduce_scatter and allreduce of uneven blocks
(the sharding rule's: the last blocks shorter or empty), under mpiexec: the
bits, shapes and strides of every result against the in-process transport's
exchange (the spec), for six dtypes and four layouts of the source, through
every path (MPI's own call, the window, result slots, held slots); and a
member stalled in the reduce_scatter's window ends the job (on the machine's
nodes, whatever REFIR_MPI_NODE_RANKS says: its subject is the window). Under
REFIR_MPI_NODE_RANKS, where the world spans simulated nodes, every path is
MPI's own collective (the last run: K=1; tests/test_mpi_nodes.py)."""

import os

from helpers import MACHINE_NODES, assert_stall_ends_the_job, run_mpi

UNEVEN_CHILD = r"""
import mmap
import os
import sys
from math import prod
from unittest import mock

import ml_dtypes
import numpy as np
from mpi4py import MPI

from interp.collectives import exchange, split
from interp.mpi import nodes
from interp.mpi.transport import MpiTransport
from refir.ir import ops
from refir.lowering.teams import Team
from refir.ir.types import Axis, Mesh, TensorType

comm = MPI.COMM_WORLD
n, rank = comm.size, comm.rank
mesh = Mesh("m", (n,), tuple(range(n)))
team = Team(tuple(range(n)), tuple(range(n)), tuple(range(n)))
# Slots want a core per member: four ranks on a two-core machine are told the node has enough.
if sys.argv[1] == "force":
    mock.patch("os.cpu_count", return_value=64).start()
slots = n <= os.cpu_count() and (nodes.NODE_RANKS or n) >= n  # where the world is on one (simulated) node
t = MpiTransport()
WINDOW, SLOT = 1 << 16, 1 << 18  # shared_windows's bounds: a rank's bytes for the window, a block's for the slots
RS_WINDOW = 1 << 14  # a reduce_scatter's partial takes the window from this size where members have cores


def in_slot(a):
    # whether `a` lies in a result slot (a mapping of shared memory), not an array of its own
    return a.base is not None and isinstance(a.base.base, memoryview) and isinstance(a.base.base.obj, mmap.mmap)


def every_bit(shape, dtype, seed):
    # every bit pattern (NaNs, -0.0, subnormals): data movement keeps them all
    g = np.random.default_rng(seed)
    if dtype == np.bool_:
        return g.integers(0, 2, shape).astype(np.bool_)
    return np.frombuffer(g.bytes(prod(shape) * np.dtype(dtype).itemsize), dtype).reshape(shape).copy()


def values(shape, dtype, seed):
    # partials whose fold order shows in the bits (floats of mixed magnitude, integers that wrap), a NaN
    g = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return g.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True)
    x = (g.standard_normal(shape) * 10.0 ** g.integers(-3, 4, shape)).astype(dtype)
    x.reshape(-1)[7 % x.size] = np.nan
    return x


def layouts(x):
    # views a transport must read: dense, column-major, with gaps, with negative strides
    wide = np.empty((*x.shape[:-1], 2 * x.shape[-1]), x.dtype)
    wide[..., ::2] = x
    flipped = np.ascontiguousarray(x[::-1])
    return {"c": np.ascontiguousarray(x), "f": np.asfortranarray(x), "gaps": wide[..., ::2], "negative": flipped[::-1]}


def front_first_strides(want, axis):
    return np.moveaxis(np.empty(np.moveaxis(want, axis, 0).shape, want.dtype), 0, axis).strides


def typ(code, extents, sharded=None, partial=""):
    axes = tuple(Axis(e, "DIDx") if a == sharded else Axis(e) for a, e in enumerate(extents))
    return TensorType(code, axes, mesh, None, ("DIDx",) if partial else (), partial)


DTYPES = ((np.float32, "f32"), (np.float64, "f64"), (ml_dtypes.bfloat16, "bf16"), (np.float16, "f16"),
          (np.int32, "i32"), (np.int8, "i8"))
cases = 0

# Allgather: extents of 1 and n + 1 (empty blocks where n > 2), 3n + 2 (MPI's Allgatherv), the largest block
# past the window's bound, and past the slots' (where every member has a core)
for dtype, code in DTYPES + ((np.bool_, "bool"),):
    itemsize = np.dtype(dtype).itemsize
    for axis in (0, 1):
        for extent in (1, n + 1, 3 * n + 2, (WINDOW // (63 * itemsize) + 1) * n - 1,
                       (SLOT // (63 * itemsize) + 1) * n - 1):
            extents = (extent, 63) if axis == 0 else (63, extent)
            whole = every_bit(extents, dtype, cases)
            blocks = split(whole, n, axis)
            src, dst = typ(code, extents, axis), typ(code, extents)
            op = ops.Allgather(axis, "DIDx")
            want = exchange(op, team, dict(enumerate(blocks)), src, dst)[rank]
            assert want.tobytes() == whole.tobytes()
            big = blocks[0].nbytes >= SLOT
            for name, x in layouts(blocks[rank]).items():
                got = t.communicate(op, src, dst, {rank: x})[rank]
                assert got.dtype == want.dtype and got.shape == want.shape, (code, extents, name)
                assert np.ascontiguousarray(got).tobytes() == want.tobytes(), (code, extents, name)
                assert got.strides == front_first_strides(want, axis), (got.strides, code, extents, name)
                assert in_slot(got) == (big and slots), (code, extents, name)
                assert x.tobytes() == blocks[rank].tobytes()  # the input is never written
                del got
                cases += 1

# Held slots: rank 0 holds every result of an uneven allgather past the slots' bound, so its third and
# fourth take the window (its block through its half, the others' still read out of their slots); every
# result keeps its values
extents = ((SLOT // 256 + 1) * n - 1, 64)
src, dst = typ("f32", extents, 0), typ("f32", extents)
held = []
for seed in range(4):
    whole = every_bit(extents, np.float32, 500 + seed)
    got = t.communicate(ops.Allgather(0, "DIDx"), src, dst, {rank: split(whole, n, 0)[rank]})[rank]
    assert got.tobytes() == whole.tobytes(), seed
    if rank == 0:
        held.append((got, whole, in_slot(got)))
    del got
    cases += 1
assert all(g.tobytes() == w.tobytes() for g, w, _ in held)
assert rank != 0 or [s for _, _, s in held] == ([True, True, False, False] if slots else [False] * 4), held
del held

# Reduce_scatter: pieces of n + 1 and 1 (empty ones), 3n + 2 (MPI's Alltoallv), 2n (MPI's Alltoall), past
# the window's bound, and an even one through the window (its pieces equal: the window serves both)
for dtype, code in DTYPES:
    itemsize = np.dtype(dtype).itemsize
    for kind in ("sum", "max") if code in ("f32", "i8") else ("sum",):
        for axis in (0, 1):
            window = RS_WINDOW // (63 * itemsize) + 1
            for extent in (1, n + 1, 3 * n + 2, 2 * n, window * n - 1, window * n):
                extents = (extent, 63) if axis == 0 else (63, extent)
                partials = {d: values(extents, dtype, 1000 * cases + d) for d in range(n)}
                src, dst = typ(code, extents, partial=kind), typ(code, extents, axis)
                op = ops.ReduceScatter(kind, "DIDx", axis)
                with np.errstate(all="ignore"):
                    want = exchange(op, team, partials, src, dst)[rank]
                for name, x in layouts(partials[rank]).items():
                    with np.errstate(all="ignore"):
                        got = t.communicate(op, src, dst, {rank: x})[rank]
                    assert got.dtype == want.dtype and got.shape == want.shape, (code, kind, extents, name)
                    assert got.tobytes() == np.ascontiguousarray(want).tobytes(), (code, kind, extents, name)
                    assert got.flags.c_contiguous, (code, extents, name)
                    assert x.tobytes() == partials[rank].tobytes()
                    cases += 1

# Allreduce: sizes that are not multiples of the team's (the last few elements folded by every member),
# small and past the sliced allreduce's bound, next to one that is
for dtype, code in DTYPES:
    itemsize = np.dtype(dtype).itemsize
    rows = WINDOW // (65 * itemsize) | 1
    for extents in ((3, 5), (rows, 65), (rows + 1, 64)):
        for kind in ("sum", "max") if code == "f32" else ("sum",):
            partials = {d: values(extents, dtype, 7000 + 100 * cases + d) for d in range(n)}
            src, dst = typ(code, extents, partial=kind), typ(code, extents)
            op = ops.Allreduce(kind, ("DIDx",))
            with np.errstate(all="ignore"):
                want = exchange(op, team, partials, src, dst)[rank]
            for name, x in layouts(partials[rank]).items():
                with np.errstate(all="ignore"):
                    got = t.communicate(op, src, dst, {rank: x})[rank]
                assert got.dtype == want.dtype and got.shape == want.shape, (code, extents, name)
                assert got.tobytes() == np.ascontiguousarray(want).tobytes(), (code, kind, extents, name)
                cases += 1
if rank == 0:
    print("agree", cases, "slots" if slots else "window")
"""

GUARD = r"""
try:
    exec(compile(open(sys.argv[2]).read(), "uneven_child", "exec"))
except BaseException:  # a failed check on one rank stops the job at once, not at the others' timeout
    import traceback
    traceback.print_exc()
    MPI.COMM_WORLD.Abort(1)
"""


def test_uneven_allgather_reduce_scatter_allreduce_keep_the_bits(tmp_path):
    child = tmp_path / "child.py"
    child.write_text(UNEVEN_CHILD)
    runner = "import sys\nfrom mpi4py import MPI\n" + GUARD
    # the last run on four simulated nodes (REFIR_MPI_NODE_RANKS=1): every path MPI's own, past the window's
    # and the slots' bounds too, which on one node no run takes (tests/test_mpi_nodes.py)
    for n, mode, node_ranks in ((2, "plain", None), (4, "plain", None), (4, "force", None), (4, "plain", "1")):
        done = run_mpi(n, ["-c", runner, mode, str(child)], timeout=300,
                       env={"REFIR_MPI_NODE_RANKS": node_ranks} if node_ranks else None)
        assert done.returncode == 0, done.stdout + done.stderr
        # the suite may run on simulated nodes
        one_node = int(node_ranks or os.environ.get("REFIR_MPI_NODE_RANKS") or n) >= n
        slots = "slots" if (n == 2 or mode == "force") and one_node else "window"
        assert done.stdout.split() == ["agree", "752", slots], done.stdout


# A member that stops before the barrier of a reduce_scatter through the window: rank 0 gives up within
# REFIR_MPI_TIMEOUT and ends the job, as at every other wait.
STALL_CHILD = r"""
import sys
import time

import numpy as np
from mpi4py import MPI

import interp.mpi.shared_windows as shared
from interp.mpi.transport import MpiTransport
from refir.ir import ops
from refir.errors import RunError
from refir.ir.types import Axis, Mesh, TensorType

comm = MPI.COMM_WORLD
n, rank = comm.size, comm.rank
mesh = Mesh("m", (n,), tuple(range(n)))
src = TensorType("f32", (Axis(1025), Axis(64)), mesh, None, ("DIDx",), "sum")
dst = TensorType("f32", (Axis(1025, "DIDx"), Axis(64)), mesh)
t = MpiTransport()
partial = np.full((1025, 64), rank, np.float32)
t.communicate(ops.ReduceScatter("sum", "DIDx", 0), src, dst, {rank: partial})
if rank == 1:
    shared.barrier = lambda c: time.sleep(3600)
start = time.monotonic()
try:
    t.communicate(ops.ReduceScatter("sum", "DIDx", 0), src, dst, {rank: partial})
except RunError as exc:  # told through a file: mpiexec may drop a rank's last output when the job aborts
    with open(sys.argv[1], "w") as f:
        f.write(f"rank {rank} gave up after {time.monotonic() - start:.0f} s: {exc}")
    comm.Abort(3)
"""


def test_a_member_stalled_in_a_reduce_scatter_through_the_window_ends_the_job(tmp_path):
    assert_stall_ends_the_job(STALL_CHILD, [], tmp_path / "said", "a barrier", env=MACHINE_NODES)
