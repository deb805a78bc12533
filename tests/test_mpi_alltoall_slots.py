"""The MPI transport's all_to_all through result slots (each piece written
straight from its sender's buffer into its receiver's result, in shared
memory), under mpiexec: bits, layouts and dtypes against numpy, held results,
spmd keeping a slot, a stalled member; and slot files that a dead rank left
behind, removed by the next job that makes slots. Their subject is the
shared memory of one node: they run on the machine's nodes (helpers.MACHINE_NODES)
whatever REFIR_MPI_NODE_RANKS says (tests/test_mpi_nodes.py runs these
collectives across simulated nodes)."""

import os
import time

import pytest
from helpers import MACHINE_NODES, assert_stall_ends_the_job, run_mpi

SLOTS_CHILD = r"""
import mmap
import os
import sys
from math import prod
from unittest import mock

import ml_dtypes
import numpy as np
from mpi4py import MPI

from interp.mpi import shared_windows
from interp.collectives import split
from interp.mpi.transport import MpiTransport
from interp.spmd import NumpyTransport
from refir.ir import ops
from refir.world.mpi_job import COMMS
from refir.ir.types import Axis, Mesh, TensorType

comm = MPI.COMM_WORLD
n, rank = comm.size, comm.rank
mesh = Mesh("m", (n,), tuple(range(n)))
# An allgather's slots want a core per member: four ranks on a two-core machine are told the node has
# enough ("force"), or not ("node": their all_to_alls take the slots all the same, their allgathers not).
if sys.argv[1] == "force":
    mock.patch("os.cpu_count", return_value=64).start()
gather_slots = n <= os.cpu_count()
t = MpiTransport()


def in_slot(a):
    # whether `a` lies in a result slot (a mapping of shared memory), not an array of its own
    return a.base is not None and isinstance(a.base.base, memoryview) and isinstance(a.base.base.obj, mmap.mmap)


def blocks(shape, dtype, seed):
    # every member's block, made on every rank from the seeds: every bit pattern (NaNs, -0.0, subnormals)
    rngs = [np.random.default_rng(seed * 10 + r) for r in range(n)]
    if dtype == np.bool_:
        return [g.integers(0, 2, shape).astype(np.bool_) for g in rngs]
    return [np.frombuffer(g.bytes(prod(shape) * np.dtype(dtype).itemsize), dtype).reshape(shape) for g in rngs]


def layouts(x):
    # views a transport must read: dense, column-major, with gaps, with negative strides
    wide = np.empty((*x.shape[:-1], 2 * x.shape[-1]), x.dtype)
    wide[..., ::2] = x
    flipped = np.ascontiguousarray(x[::-1])
    return {"c": np.ascontiguousarray(x), "f": np.asfortranarray(x), "gaps": wide[..., ::2], "negative": flipped[::-1]}


def types(code, shape, split_axis, concat_axis, layout=None):
    src = TensorType(code, tuple(Axis(e * n, "DIDx") if a == concat_axis else Axis(e) for a, e in enumerate(shape)),
                     mesh)
    dst = TensorType(code, tuple(Axis(e * n) if a == concat_axis else Axis(e, "DIDx") for a, e in enumerate(shape)),
                     mesh, layout)
    return src, dst


def expected(mine, split_axis, concat_axis):
    return np.concatenate([split(b, n, split_axis)[rank] for b in mine], axis=concat_axis)


def front_first_strides(want, concat_axis):
    # the transport's result: the pieces side by side, concatenation axis first, in C order
    return np.moveaxis(np.empty(np.moveaxis(want, concat_axis, 0).shape, want.dtype), 0, concat_axis).strides


DTYPES = ((np.float32, "f32"), (np.float16, "f16"), (ml_dtypes.bfloat16, "bf16"), (np.bool_, "bool"),
          (np.float64, "f64"), (np.int8, "i8"))
# (shape in units of n, split axis, concatenation axis): runs of every row (dense buffers) and pieces
# read through a transposing or in-order copy
CASES = (((512, 8), 1, 0), ((512, 8), 0, 1), ((2, 64, 4), 1, 0), ((2, 64, 4), 2, 1), ((4, 16, 8), 0, 2))


def check():
    cases = 0
    for dtype, code in DTYPES:
        itemsize = np.dtype(dtype).itemsize
        for units, split_axis, concat_axis in CASES:
            scale = int(np.ceil((2 * (256 << 10) * n / itemsize / prod(units) / n ** len(units)) ** (1 / len(units))))
            shape = tuple(u * n * scale for u in units)  # pieces past 256 KiB: through the slots
            src, dst = types(code, shape, split_axis, concat_axis)
            op = ops.AllToAll("DIDx", split_axis, concat_axis)
            mine = blocks(shape, dtype, cases)
            want = expected(mine, split_axis, concat_axis)
            for name, x in layouts(mine[rank]).items():
                got = t.communicate(op, src, dst, {rank: x})[rank]
                assert got.dtype == want.dtype and got.shape == want.shape, (code, shape, name)
                assert np.moveaxis(got, concat_axis, 0).tobytes() == np.moveaxis(want, concat_axis, 0).tobytes(), \
                    (code, shape, split_axis, concat_axis, name)
                assert got.strides == front_first_strides(want, concat_axis), (got.strides, code, shape, name)
                assert x.tobytes() == mine[rank].tobytes()  # the input is never written
                pools = [v for (k, _), (v, _) in COMMS.others.items() if k.startswith("shared results")]
                assert in_slot(got) and any(v is not None for v in pools), (pools, n)
                del got
                cases += 1
    # Uneven blocks (the concatenation axis's extent and the split one's not multiples of n; the last
    # member's blocks shorter): pieces of other sizes, each at its place in its receiver's slot, the
    # planned path's bits; where rank 0 holds every result, its third call and the others' go through
    # the window (rank 0's result not in a slot, the others' in theirs), every result keeping its values.
    held = []
    for dtype, code in ((np.float32, "f32"), (np.float16, "f16"), (np.bool_, "bool")):
        for split_axis, concat_axis in ((1, 0), (0, 1)):
            extents = [0, 0]
            extents[concat_axis], extents[split_axis] = (2048 * 4 // np.dtype(dtype).itemsize) * n + 3, 64 * n + 3
            glob = blocks(tuple(extents), dtype, 300 + cases)[0]
            mine = split(glob, n, concat_axis)
            src = TensorType(code, tuple(Axis(e, "DIDx") if a == concat_axis else Axis(e)
                                         for a, e in enumerate(extents)), mesh)
            dst = TensorType(code, tuple(Axis(e, "DIDx") if a == split_axis else Axis(e)
                                         for a, e in enumerate(extents)), mesh)
            op = ops.AllToAll("DIDx", split_axis, concat_axis)
            want = expected(mine, split_axis, concat_axis)
            for name, x in layouts(mine[rank]).items():
                got = t.communicate(op, src, dst, {rank: x})[rank]
                assert got.dtype == want.dtype and got.shape == want.shape, (code, extents, name)
                assert got.tobytes() == want.tobytes(), (code, split_axis, concat_axis, name)
                assert got.strides == front_first_strides(want, concat_axis), (got.strides, code, name)
                rank0_holds_both = code == "bool" and (split_axis, name) not in ((1, "c"), (1, "f"))
                slot_taken = not (rank == 0 and rank0_holds_both)
                assert in_slot(got) == slot_taken, (code, split_axis, name)
                if rank == 0 and code == "bool":
                    held.append((got, want, in_slot(got)))
                del got
                cases += 1
    assert all(g.tobytes() == w.tobytes() for g, w, _ in held)
    assert rank != 0 or [s for _, _, s in held] == [True, True] + [False] * 6, [s for _, _, s in held]
    del held
    # Uneven blocks too small for the slots: through the window (64 KiB a rank and more), and through MPI's
    # Alltoallv from the packed pieces, some empty (n + 1 over n is 2, .., 1, 0)
    for dtype, code in ((np.float16, "f16"), (ml_dtypes.bfloat16, "bf16"), (np.bool_, "bool")):
        for split_axis, concat_axis, (rows, cols) in ((1, 0, (n + 1, 3 * n + 2)), (0, 1, (n + 1, 3 * n + 2)),
                                                      (1, 0, ((1024 // np.dtype(dtype).itemsize) * n + 3, 32 * n + 3)),
                                                      (0, 1, ((1024 // np.dtype(dtype).itemsize) * n + 3, 32 * n + 3))):
            extents = [0, 0]
            extents[concat_axis], extents[split_axis] = rows, cols
            mine = split(blocks(tuple(extents), dtype, 400 + cases)[0], n, concat_axis)
            src = TensorType(code, tuple(Axis(e, "DIDx") if a == concat_axis else Axis(e)
                                         for a, e in enumerate(extents)), mesh)
            dst = TensorType(code, tuple(Axis(e, "DIDx") if a == split_axis else Axis(e)
                                         for a, e in enumerate(extents)), mesh)
            want = expected(mine, split_axis, concat_axis)
            for name, x in layouts(mine[rank]).items():
                got = t.communicate(ops.AllToAll("DIDx", split_axis, concat_axis), src, dst, {rank: x})[rank]
                assert got.dtype == want.dtype and got.shape == want.shape, (code, extents, name)
                assert got.tobytes() == want.tobytes() and not in_slot(got), (code, split_axis, name)
                assert got.size == 0 or got.strides == front_first_strides(want, concat_axis), (code, name)
                cases += 1
    # Held results keep their values: rank 0 holds every result (an allgather's too, from the same pool), so
    # its slots run out at the third call and every member takes the window for it and the fourth.
    shape, split_axis, concat_axis = (1024 * n, 64 * n), 1, 0
    src, dst = types("f32", shape, split_axis, concat_axis)
    gathered = (shape[0] // n, shape[1])  # a block of 1/n of the all_to_all's: a result of its size, one pool
    gather_src = TensorType("f32", (Axis(shape[0], "DIDx"), Axis(shape[1])), mesh)
    gather_dst = TensorType("f32", (Axis(shape[0]), Axis(shape[1])), mesh)
    held = []
    for seed in range(4):
        mine = blocks(gathered if seed == 1 else shape, np.float32, 100 + seed)
        if seed == 1:
            got = t.communicate(ops.Allgather(0, "DIDx"), gather_src, gather_dst, {rank: mine[rank]})[rank]
            want = np.concatenate(mine)
        else:
            got = t.communicate(ops.AllToAll("DIDx", split_axis, concat_axis), src, dst, {rank: mine[rank]})[rank]
            want = expected(mine, split_axis, concat_axis)
        assert got.tobytes() == want.tobytes(), seed
        if rank == 0:
            held.append((got, want, in_slot(got)))
        del got
        cases += 1
    assert all(g.tobytes() == w.tobytes() for g, w, _ in held)
    # without a core each, the allgather (seed 1) takes the window and leaves rank 0 a free slot for seed 2
    slotted = [True, True, False, False] if gather_slots else [True, False, True, False]
    assert rank != 0 or [s for _, _, s in held] == slotted, [s for _, _, s in held]
    # spmd's transport keeps a slot as the rank's buffer (no copy), also where the result's axes are
    # moved back (a column-major result type)
    del held
    for (split_axis, concat_axis), layout in (((1, 0), None), ((0, 1), (1, 0))):
        src, dst = types("f32", shape, split_axis, concat_axis, layout)
        mine = blocks(shape, np.float32, 200)
        got = NumpyTransport(t).communicate(ops.AllToAll("DIDx", split_axis, concat_axis), src, dst,
                                            {rank: mine[rank]})[rank]
        assert got.tobytes() == expected(mine, split_axis, concat_axis).tobytes()
        assert in_slot(got), (split_axis, concat_axis)
        del got
        cases += 1
    if rank == 0:
        print("agree", cases, "gather slots" if gather_slots else "gather window")


try:
    check()
except BaseException:  # a failed check on one rank stops the job at once, not at the others' timeout
    import traceback
    traceback.print_exc()
    comm.Abort(1)
"""


@pytest.mark.parametrize("ranks, cores", [(2, "node"), (4, "force"), (4, "node")])
def test_all_to_all_through_result_slots_keeps_bits_layouts_and_held_results(ranks, cores):
    done = run_mpi(ranks, ["-c", SLOTS_CHILD, cores], timeout=180, env=MACHINE_NODES)
    assert done.returncode == 0, done.stdout + done.stderr
    gathered = ranks <= (os.cpu_count() or 1) or cores == "force"
    assert done.stdout.split() == ["agree", "198", "gather", "slots" if gathered else "window"], \
        done.stdout + done.stderr


# A member that stops inside an all_to_all through the slots, in the round that says
# where each result is or before the barrier after the writes: rank 0 gives up within
# REFIR_MPI_TIMEOUT and ends the job, as at every other wait.
STALL_CHILD = r"""
import sys
import time
from unittest import mock

import numpy as np
from mpi4py import MPI

from interp.mpi import shared_windows
from interp.mpi.transport import MpiTransport
from refir.ir import ops
from refir.errors import RunError
from refir.ir.types import Axis, Mesh, TensorType

comm = MPI.COMM_WORLD
n, rank = comm.size, comm.rank
mock.patch("os.cpu_count", return_value=64).start()
mesh = Mesh("m", (n,), tuple(range(n)))
src = TensorType("f32", (Axis(1024 * n, "DIDx"), Axis(64 * n)), mesh)
dst = TensorType("f32", (Axis(1024 * n), Axis(64 * n, "DIDx")), mesh)
op = ops.AllToAll("DIDx", 1, 0)
t = MpiTransport()
block = np.full((1024, 64 * n), rank, np.float32)
assert t.communicate(op, src, dst, {rank: block})[rank].base is not None  # a slot
if rank == 1:
    if sys.argv[1] == "round":
        shared_windows.SharedResults.offer = lambda self, slot: time.sleep(3600)
    else:
        shared_windows.barrier = lambda c: time.sleep(3600)
start = time.monotonic()
try:
    t.communicate(op, src, dst, {rank: block})
except RunError as exc:  # told through a file: mpiexec may drop a rank's last output when the job aborts
    with open(sys.argv[2], "w") as f:
        f.write(f"rank {rank} gave up after {time.monotonic() - start:.0f} s: {exc}")
    comm.Abort(3)
"""


@pytest.mark.parametrize("where, what", [("round", "every member's result slot"), ("barrier", "a barrier")])
def test_a_member_stalled_in_a_slot_all_to_all_ends_the_job(where, what, tmp_path):
    assert_stall_ends_the_job(STALL_CHILD, [where], tmp_path / "said", what, env=MACHINE_NODES)


# Slot files in a directory of the test's: in the first job rank 1 stops in the round
# where the members swap their files' names, and the job ends (rank 0 gives up) before
# it unlinks its file; rank 0, whose round failed, has unlinked its own on the way out.
# A later job that makes slots removes the dead rank's file, and leaves alone a file
# of a live process and files not named as refir's.
LEAK_CHILD = r"""
import os
import sys
import time
from unittest import mock

import numpy as np
from mpi4py import MPI

from interp.mpi import shared_windows
from interp.mpi.transport import MpiTransport
from refir.ir import ops
from refir.errors import RunError
from refir.ir.types import Axis, Mesh, TensorType

comm = MPI.COMM_WORLD
n, rank = comm.size, comm.rank
mock.patch("os.cpu_count", return_value=64).start()
shared_windows.SHARED_RESULTS_DIR = sys.argv[2]
with open(f"{sys.argv[3]}.pid{rank}", "w") as f:
    f.write(str(os.getpid()))
if sys.argv[1] == "die" and rank == 1:
    shared_windows.allgather_obj = lambda *args, **kwargs: time.sleep(3600)
mesh = Mesh("m", (n,), tuple(range(n)))
src = TensorType("f32", (Axis(1024 * n, "DIDx"), Axis(64)), mesh)
dst = TensorType("f32", (Axis(1024 * n), Axis(64)), mesh)
try:
    got = MpiTransport().communicate(ops.Allgather(0, "DIDx"), src, dst, {rank: np.full((1024, 64), rank, np.float32)})
except RunError:  # told through a file: mpiexec may drop a rank's last output when the job aborts
    with open(sys.argv[3], "w") as f:
        f.write(f"left {sorted(os.listdir(sys.argv[2]))}")
    comm.Abort(3)
assert [int(v) for v in got[rank][::1024, 0]] == list(range(n)) and got[rank].base is not None  # through slots
if rank == 0:
    print("left", sorted(os.listdir(sys.argv[2])), flush=True)
"""


def started(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return stat[stat.rindex(b")") + 2:].split()[19].decode()


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="a process's start time is read from /proc")
def test_slot_files_of_a_rank_that_died_are_removed_by_the_next_job(tmp_path):
    slots, said = tmp_path / "slots", tmp_path / "said"
    slots.mkdir()
    done = run_mpi(2, ["-c", LEAK_CHILD, "die", str(slots), str(said)], timeout=60,
                   env={"REFIR_MPI_TIMEOUT": "2", **MACHINE_NODES})
    assert done.returncode != 0, done.stdout + done.stderr
    dead = (tmp_path / "said.pid1").read_text()
    left = sorted(os.listdir(slots))
    assert len(left) == 1 and left[0].startswith(f"refir-results-{dead}-"), (left, done.stdout)
    assert said.read_text() == f"left {left}"  # rank 0 unlinked its own at once
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{dead}") and time.monotonic() < deadline:  # the abort's kill lands late
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{dead}")
    live = f"refir-results-{os.getpid()}-{started(os.getpid())}-abcdefgh"  # this process: alive
    reused = f"refir-results-{os.getpid()}-1-abcdefgh"  # this pid, but another start: a dead maker's
    for name in (live, reused, "refir-results-notours", "other"):
        (slots / name).write_bytes(b"")
    done = run_mpi(2, ["-c", LEAK_CHILD, "live", str(slots), str(said)], timeout=60, env=MACHINE_NODES)
    assert done.returncode == 0, done.stdout + done.stderr
    kept = sorted([live, "refir-results-notours", "other"])
    assert f"left {kept}" in done.stdout, done.stdout + done.stderr
    assert sorted(os.listdir(slots)) == kept
