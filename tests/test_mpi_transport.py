"""The MPI transport's building blocks, in a child process of one MPI rank (a
plain test run never loads mpi4py): a strided buffer laid out in place by
pack_into, and equal pieces packed by one stacked copy, give the bytes
to_bytes gives (small buffers through numpy's copy, large ones through the
tiled and in-order copies of interp/mpi/host_copy.py), and the fold both transports
use (interp.impls.fold) combines left to right in the parts' dtype, into any
layout. Under mpiexec: the collectives that go through a shared window."""

import subprocess
import sys

from helpers import ROOT

CHILD = r"""
import ml_dtypes
import numpy as np
from mpi4py import MPI

from interp import impls
from interp.mpi import host_copy
from interp.mpi import layout
from interp.mpi.transport import fold, pack_into, split, to_bytes

rng = np.random.default_rng(0)
base = rng.standard_normal((4, 6, 5)).astype(np.float32)
views = {"c": base, "f": np.asfortranarray(base), "permuted": base.transpose(2, 0, 1),
         "gaps": base[::2, 1::2], "negative": base[::-1], "0-d": base[1, 2, 3, ...],
         "f16 gaps": base.astype(np.float16)[:, ::3].transpose(1, 0, 2)}
big = rng.standard_normal((16, 40, 72)).astype(np.float32)  # 180 KiB: past host_copy's threshold
views |= {"big f": np.asfortranarray(big), "big permuted": big.transpose(2, 0, 1),
          "big f16 f": np.asfortranarray(big.astype(np.float16)), "big negative": np.asfortranarray(big)[::-1]}
for name, x in views.items():
    for axis in range(max(x.ndim, 1)):
        want = to_bytes(x, axis)
        got = np.full_like(want, 7)
        pack_into(got, x, axis)
        assert got.tobytes() == want.tobytes(), (name, axis)
        print("laid out", name, axis, x.strides)
        for split_axis in range(x.ndim):
            for n in (3, 4):
                pieces = [to_bytes(p, axis) for p in split(x, n, split_axis)]  # the pieces' bytes, by definition
                sizes = [p.nbytes for p in pieces]
                send = np.full(x.nbytes, 7, np.uint8)
                layout.uneven_sender(x.shape, n, split_axis, axis, sizes)[1](x, send)
                assert send.tobytes() == b"".join(p.tobytes() for p in pieces), (name, axis, split_axis, n)
                if x.ndim and x.shape[split_axis] % n == 0:
                    even = layout.sender(x.shape, n, split_axis, axis)(x)
                    assert even.tobytes() == send.tobytes(), (name, axis, split_axis, n)
for kernel in (host_copy._tiled, host_copy._in_order):
    assert kernel.signatures, kernel  # the big views went through both compiled copies
for dtype in (np.float16, ml_dtypes.bfloat16, np.float32, np.int8, np.bool_):
    for kind in ("sum", "prod", "max", "min"):
        for n in (1, 2, 4):
            parts = [(rng.standard_normal((3, 5)) * 300).astype(dtype) for _ in range(n)]
            parts[0][0, 0] = np.nan if np.dtype(dtype).kind == "f" else parts[0][0, 0]
            with np.errstate(all="ignore"):
                want = parts[0].copy()  # left to right, each step's result cast back to the parts' dtype
                for p in parts[1:]:
                    want = impls.COMBINE[kind](want, p).astype(dtype)
                got = fold(kind, parts)
                rows = fold(kind, np.stack(parts), np.full_like(parts[0], 7))  # the MPI plans' call: rows, into
                f = fold(kind, [np.asfortranarray(p) for p in parts])
            for out in (got, rows, f):
                assert out.dtype == want.dtype and out.tobytes() == want.tobytes(), (dtype, kind, n)
            assert got.flags.c_contiguous and f.flags.f_contiguous  # laid out as the first partial
print("folds agree")
"""


def test_datatype_sends_and_fold_keep_the_bits():
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "laid out f 0 (4, 16, 96)" in lines and "laid out negative 2 (-120, 20, 4)" in lines
    assert "laid out big f 2 (4, 64, 2560)" in lines
    assert lines[-1] == "folds agree"


PLANS_CHILD = r"""
from unittest import mock

import numpy as np

from interp.mpi import layout, pools, transport as mt
from refir.ir import ops
from refir.lowering.teams import Team
from refir.ir.types import Axis, Mesh, TensorType

# Plans are worked out from types alone: every allgather, reduce_scatter,
# all_to_all and allreduce is planned, uneven blocks too (their sizes and
# places worked out once).
mesh4 = Mesh("m", (4,), (0, 1, 2, 3))
team = Team((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3))
def typ(*axes, partial=()):
    return TensorType("f32", axes, mesh4, None, partial, "sum" if partial else "")
gather = ops.Allgather(0, "DIDx")
assert mt.planned(gather, typ(Axis(8, "DIDx"), Axis(6)), team, 2) is not None
assert mt.planned(gather, typ(Axis(7, "DIDx"), Axis(6)), team, 2) is not None
scatter = ops.ReduceScatter("sum", "DIDx", 1)
assert mt.planned(scatter, typ(Axis(3), Axis(8), partial=("DIDx",)), team, 0) is not None
assert mt.planned(scatter, typ(Axis(3), Axis(6), partial=("DIDx",)), team, 0) is not None
swap = ops.AllToAll("DIDx", 1, 0)
assert mt.planned(swap, typ(Axis(8, "DIDx"), Axis(12)), team, 1) is not None
assert mt.planned(swap, typ(Axis(8, "DIDx"), Axis(10)), team, 1) is not None
assert mt.planned(swap, typ(Axis(7, "DIDx"), Axis(12)), team, 1) is not None
assert mt.planned(ops.Allreduce("sum", ("DIDx",)), typ(Axis(5), partial=("DIDx",)), team, 3) is not None
print("every collective planned")

# A planned reduce_scatter's or all_to_all's pieces are the bytes of each piece
# (to_bytes) one after another, packed or (dense, in order) the buffer itself,
# small and past host_copy's threshold.
from interp.mpi import host_copy
rng = np.random.default_rng(1)


def reference(x, n, split_axis, axis):  # each piece's bytes, one after another, and their sizes
    pieces = [mt.to_bytes(p, axis) for p in mt.split(x, n, split_axis)]
    return np.frombuffer(b"".join(p.tobytes() for p in pieces), np.uint8), [p.nbytes for p in pieces]


for shape in ((4, 6, 8), (1, 8, 5), (16, 40, 72), (2048, 4, 3), (64, 40, 128)):
    base = rng.standard_normal(shape).astype(np.float32)
    for x in (base, np.asfortranarray(base), base[::-1]):
        for split_axis in range(3):
            for axis in range(3):
                if shape[split_axis] % 4:
                    continue
                got = layout.sender(shape, 4, split_axis, axis)(x)
                want, _ = reference(x, 4, split_axis, axis)
                assert got.tobytes() == want.tobytes(), (shape, x.strides, split_axis, axis)
                if shape[0] == 1 and split_axis == 1 and axis <= 1 and x.flags.c_contiguous:
                    assert got is x  # in order already: sent from its own memory
assert len(host_copy._pieces_of.signatures) == 2  # the big dense buffers: runs of 8-byte words and of elements
# Uneven pieces (the last shorter or empty): packed one after another, and each written alone, as reference's
for shape in ((4, 7, 9), (1, 10, 5), (16, 40, 70), (2049, 4, 3), (1, 3000, 63)):
    base = rng.standard_normal(shape).astype(np.float32)
    for x in (base, np.asfortranarray(base), base[::-1]):
        for split_axis in range(3):
            for axis in range(3):
                want, sizes = reference(x, 4, split_axis, axis)
                write, pack = layout.uneven_sender(shape, 4, split_axis, axis, sizes)
                got = np.full(x.nbytes, 7, np.uint8)
                pack(x, got)
                assert got.tobytes() == want.tobytes(), (shape, x.strides, split_axis, axis)
                one = np.full(sizes[3], 7, np.uint8)
                write(x, 3, one)
                assert one.tobytes() == want[x.nbytes - sizes[3]:].tobytes(), (shape, split_axis, axis)
print("pieces agree")

# Scratch buffers: kept per role between the bounds (the next call of the role
# reuses the memory), fresh outside them.
a = pools.scratch("test", (1 << 15,), np.float32)
b = pools.scratch("test", (3, 1 << 14), np.float16)
assert np.shares_memory(a, b) and b.shape == (3, 1 << 14) and b.dtype == np.float16 and b.flags.c_contiguous
assert not np.shares_memory(a, pools.scratch("other", (1 << 15,), np.float32))
small = pools.scratch("test", (8,), np.float32)
assert not np.shares_memory(small, pools.scratch("test", (8,), np.float32))
big = pools.scratch("test", (pools.SCRATCH_MAX_BYTES + 1,), np.uint8)
assert not np.shares_memory(big, pools.scratch("test", (1 << 15,), np.float32))
print("scratch kept")

# One rank: a call goes to its plan while the rule is the transport's own; a
# rule replaced (as conformance mutants do) is called instead, through the teams.
mesh1 = Mesh("m", (1,), (0,))
src = TensorType("f32", (Axis(4, "DIDx"), Axis(3)), mesh1)
dst = TensorType("f32", (Axis(4), Axis(3)), mesh1)
t = mt.MpiTransport()
x = np.arange(12, dtype=np.float32).reshape(4, 3)
out = t.communicate(gather, src, dst, {0: x})[0]
assert out.tobytes() == x.tobytes() and out.flags.owndata and out.flags.c_contiguous
assert t.calls[(id(gather), id(src), id(dst))].run is not None
seen = []
def replaced(tr, op, tm, buf, s, d):
    seen.append(tm.devices)
    return buf * 2
with mock.patch.dict(mt.MPI_RULES, {ops.Allgather: replaced}):
    assert (t.communicate(gather, src, dst, {0: x})[0] == x * 2).all()
assert seen == [(0,)]
assert t.communicate(gather, src, dst, {0: x})[0].tobytes() == x.tobytes()  # the plan again
print("rules replaced are called")
"""


def test_every_collective_planned_and_replaced_rules_called():
    done = subprocess.run([sys.executable, "-c", PLANS_CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["every collective planned", "pieces agree",
                                        "scratch kept", "rules replaced are called"]


SHARED_CHILD = r"""
import mmap
import os

import numpy as np
from mpi4py import MPI

from interp.mpi import nodes, shared_windows
from interp.collectives import split
from interp.mpi.transport import MpiTransport
from interp.spmd import NumpyTransport
from refir.ir import ops
from refir.world.mpi_job import COMMS
from refir.ir.types import Axis, Mesh, TensorType

# Collectives past SHARED_MIN_BYTES per rank, against numpy on every rank's
# blocks (each rank makes them all from the seeds): all_to_all through the
# team's shared window (dense and column-major sources, f32 and f16), the
# allgather too (row- and column-major sources), each called three times (both halves of the
# window, then the first again) with the earlier results still held: they must
# be unchanged (held results are never handed out again).
comm = MPI.COMM_WORLD


def in_slot(a):
    # whether `a` lies in a result slot (a mapping of shared memory), not an array of its own
    return a.base is not None and isinstance(a.base.base, memoryview) and isinstance(a.base.base.obj, mmap.mmap)


def check():
    n, rank = comm.size, comm.rank
    one_node = (nodes.NODE_RANKS or n) >= n  # else (REFIR_MPI_NODE_RANKS) every collective takes MPI's own
    mesh = Mesh("m", (n,), tuple(range(n)))
    t = MpiTransport()
    def blocks(shape, dtype, seed):
        return [np.random.default_rng(seed * 10 + r).standard_normal(shape).astype(dtype) for r in range(n)]
    cases = 0
    for dtype, code in ((np.float32, "f32"), (np.float16, "f16")):
        for concat_axis, split_axis in ((0, 1), (1, 0)):
            shape = (96 * n, 64 * n)
            src = TensorType(code, tuple(Axis(e * n, "DIDx") if a == concat_axis else Axis(e)
                                         for a, e in enumerate(shape)), mesh)
            dst = TensorType(code, tuple(Axis(e * n) if a == concat_axis else Axis(e, "DIDx")
                                         for a, e in enumerate(shape)), mesh)
            op = ops.AllToAll("DIDx", split_axis, concat_axis)
            held = []
            for seed in range(3):
                mine = blocks(shape, dtype, seed)
                want = np.concatenate([split(b, n, split_axis)[rank] for b in mine], axis=concat_axis)
                for layout in (np.ascontiguousarray, np.asfortranarray):
                    got = t.communicate(op, src, dst, {rank: layout(mine[rank])})[rank]
                    assert np.array_equal(got, want), (code, split_axis, concat_axis, seed, layout.__name__)
                    held.append((got, want))
                    cases += 1
            assert all(np.array_equal(g, w) for g, w in held), (code, split_axis, concat_axis)
    for axis in (0, 1):
        shape = (128, 64 * n)
        axes = [Axis(e) for e in shape]
        axes[axis] = Axis(shape[axis] * n, "DIDx")
        src = TensorType("f32", tuple(axes), mesh, (1, 0))
        dst = TensorType("f32", tuple(Axis(a.extent) for a in axes), mesh)
        held = []
        for seed in range(3):
            mine = blocks(shape, np.float32, seed)
            want = np.concatenate(mine, axis=axis)
            for layout in (np.ascontiguousarray, np.asfortranarray):
                got = t.communicate(ops.Allgather(axis, "DIDx"), src, dst, {rank: layout(mine[rank])})[rank]
                assert np.array_equal(got, want), (axis, seed, layout.__name__)
                held.append((got, want))
                cases += 1
        assert all(np.array_equal(g, w) for g, w in held), axis
    windows = [v for (k, _), (v, _) in COMMS.others.items() if k.startswith("shared window")]
    assert windows and all((v is not None) == one_node for v in windows), COMMS.others
    # Blocks read out of their owners' results where every member has a core: rank 0 holds every
    # result, so its slots run out and its later blocks go through the window, while the others'
    # mostly stay in their slots; held or not, every result keeps its values.
    del held, got
    shape = (1024, 64)  # 256 KiB a block: the smallest that goes through result slots
    src = TensorType("f32", (Axis(1024 * n, "DIDx"), Axis(64)), mesh, (1, 0))
    dst = TensorType("f32", (Axis(1024 * n), Axis(64)), mesh)
    held = []
    for seed in range(4):
        mine = blocks(shape, np.float32, seed)
        want = np.concatenate(mine)
        got = t.communicate(ops.Allgather(0, "DIDx"), src, dst, {rank: np.asfortranarray(mine[rank])})[rank]
        assert np.array_equal(got, want), seed
        if rank == 0 or seed == 0:
            held.append((got, want))
        cases += 1
    assert all(np.array_equal(g, w) for g, w in held)
    slotted = [in_slot(g) for g, _ in held]
    del got  # a slot free again on ranks 1..: spmd's transport keeps the result in it, not a copy
    got = NumpyTransport(t).communicate(ops.Allgather(0, "DIDx"), src, dst, {rank: mine[rank]})[rank]
    assert np.array_equal(got, want)
    pools = [v for (k, _), (v, _) in COMMS.others.items() if k.startswith("shared results")]
    if n <= os.cpu_count() and one_node:
        assert any(v is not None for v in pools), COMMS.others
        assert rank != 0 or slotted == [True, True, False, False], slotted
        assert rank == 0 or in_slot(got)
    else:
        assert all(v is None for v in pools) and not any(slotted), (pools, slotted)
    # A member that cannot make its slots (here rank 1, for a new size): every member takes the window.
    if rank == 1:
        shared_windows.SHARED_RESULTS_DIR = "/nonexistent"
    src = TensorType("f32", (Axis(2048 * n, "DIDx"), Axis(64)), mesh, (1, 0))
    dst = TensorType("f32", (Axis(2048 * n), Axis(64)), mesh)
    mine = blocks((2048, 64), np.float32, 7)
    got = t.communicate(ops.Allgather(0, "DIDx"), src, dst, {rank: np.asfortranarray(mine[rank])})[rank]
    assert np.array_equal(got, np.concatenate(mine)) and not in_slot(got)
    # (an allgather asks for slots only where every member has a core: else it made no pool at all)
    made = [v for (k, _), (v, _) in COMMS.others.items()
            if k == f"shared results {1 << 20 + (n > 2)}{nodes.rule()}"]
    assert made == ([None] if n <= os.cpu_count() and one_node else []), made
    cases += 1
    if rank == 0:
        print("agree", cases)


try:
    check()
except BaseException:  # a failed check on one rank stops the job at once, not at the others' timeout
    import traceback
    traceback.print_exc()
    comm.Abort(1)
"""


def test_shared_window_collectives_under_mpiexec_keep_values_and_held_results(tmp_path):
    from helpers import run_mpi

    for n in (2, 4):
        done = run_mpi(n, ["-c", SHARED_CHILD], timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.split() == ["agree", "41"]


# A member that stops between reading the others' blocks out of their results
# and the second barrier (rank 1's barrier made a stall): rank 0 gives up within
# REFIR_MPI_TIMEOUT and ends the job, as at every other wait.
STALL_CHILD = r"""
import sys
import time

import numpy as np
from mpi4py import MPI

import interp.mpi.plans as plans
from interp.mpi.transport import MpiTransport
from refir.ir import ops
from refir.errors import RunError
from refir.world.mpi_job import COMMS
from refir.ir.types import Axis, Mesh, TensorType

comm = MPI.COMM_WORLD
n, rank = comm.size, comm.rank
mesh = Mesh("m", (n,), tuple(range(n)))
src = TensorType("f32", (Axis(1024 * n, "DIDx"), Axis(64)), mesh)
dst = TensorType("f32", (Axis(1024 * n), Axis(64)), mesh)
t = MpiTransport()
block = np.full((1024, 64), rank, np.float32)
t.communicate(ops.Allgather(0, "DIDx"), src, dst, {rank: block})
if not [v for (k, _), (v, _) in COMMS.others.items() if k.startswith("shared results") and v is not None]:
    print("no shared results")
    raise SystemExit(0)
if rank == 1:
    plans.barrier = lambda c: time.sleep(3600)
start = time.monotonic()
try:
    t.communicate(ops.Allgather(0, "DIDx"), src, dst, {rank: block})
except RunError as exc:  # told through a file: mpiexec may drop a rank's last output when the job aborts
    with open(sys.argv[1], "w") as f:
        f.write(f"rank {rank} gave up after {time.monotonic() - start:.0f} s: {exc}")
    comm.Abort(3)
"""


def test_a_member_stalled_in_a_shared_result_allgather_ends_the_job(tmp_path):
    import time

    from helpers import run_mpi

    start = time.monotonic()
    said = tmp_path / "said"
    done = run_mpi(2, ["-c", STALL_CHILD, str(said)], timeout=60, env={"REFIR_MPI_TIMEOUT": "2"})
    took = time.monotonic() - start
    if "no shared results" in done.stdout:  # a node with one core: the window path, tested above
        return
    assert done.returncode != 0 and took < 30, (done.returncode, took, done.stdout + done.stderr)
    assert said.read_text().startswith("rank 0 gave up after 2 s: rank 0: gave up waiting for a barrier"), \
        done.stdout + done.stderr
