"""The MPI transport across nodes, on one machine: under REFIR_MPI_NODE_RANKS=K
every K consecutive world ranks form a simulated node (interp/mpi/nodes.py),
so a team that spans two takes MPI's own collectives where on one node it
would take the shared-memory window or result slots. Four ranks, every planned
collective (allgather, allreduce, reduce_scatter, all_to_all; equal and uneven
blocks, row- and column-major sources) past the window's bound (allgathers
and all_to_alls past the slots' too), on the world's team and on both axes of
a 2 x 2 mesh, each called twice with the earlier results of its case still
held: every result's bits against the in-process exchange (the spec), and
which teams took a window. K=1: every rank its own node, every team across
nodes. K=2: ranks 0-1 and 2-3 share a node, so the mesh's DIDx teams (0, 1)
and (2, 3) take windows while its DIDy teams (0, 2), (1, 3) and the world's
team go across nodes, in one job. A bad value is one line on every rank, never a hang."""

import pytest
from helpers import run_mpi

NODES_CHILD = r"""
from math import prod

import numpy as np
from mpi4py import MPI

from interp.collectives import exchange
from interp.mpi import nodes
from interp.mpi.transport import MpiTransport
from refir.ir import ops
from refir.ir.types import Axis, Mesh, TensorType, block_slices, local_shape
from refir.lowering.teams import teams_of
from refir.world.mpi_job import COMMS

comm = MPI.COMM_WORLD
n, rank = comm.size, comm.rank
assert n == 4 and nodes.NODE_RANKS is not None
LINE, SQUARE = Mesh("m", (n,), tuple(range(n))), Mesh("m", (2, n // 2), tuple(range(n)))
t = MpiTransport()


def typ(mesh, extents, shard=None, did="DIDx", partial="", order=None):
    axes = tuple(Axis(e, did) if a == shard else Axis(e) for a, e in enumerate(extents))
    return TensorType("f32", axes, mesh, order, (did,) if partial else (), partial)


def values(shape, seed):
    # floats of mixed magnitudes (their fold order shows in the bits) and a NaN
    g = np.random.default_rng(seed)
    x = (g.standard_normal(shape) * 10.0 ** g.integers(-3, 4, shape)).astype(np.float32)
    x.reshape(-1)[7 % x.size] = np.nan
    return x


def blocks(src, extents, seed):
    # every device's block, made on every rank from the seed: a slice of one global array, or its own partial
    if src.partial:
        return {d: values(local_shape(src, {}, d), seed + d) for d in src.mesh.devices}
    whole = values(extents, seed)
    return {d: whole[block_slices(src, d, whole.shape)] for d in src.mesh.devices}


def cases():
    # (name, op, src, dst, global extents): a rank's block past the window's 64 KiB, and past the slots' 256 KiB
    for mesh, did in ((LINE, "DIDx"), (SQUARE, "DIDx"), (SQUARE, "DIDy")):
        k = mesh.size(did)
        for rows in (512 * k, 2048 * k):  # blocks of 128 KiB and 512 KiB (64 columns); partials of the first
            even, uneven = (rows, 64), (rows - 1, 63)
            for ext in (even, uneven):
                yield (f"allgather {ext}", ops.Allgather(0, did), typ(mesh, ext, 0, did), typ(mesh, ext), ext)
                swap = (ext[0], ext[1] * k) if ext == even else (ext[0], ext[1] * k + 1)
                yield (f"all_to_all {swap}", ops.AllToAll(did, 1, 0), typ(mesh, swap, 0, did), typ(mesh, swap, 1, did),
                       swap)
                if rows > 512 * k:
                    continue
                yield (f"allreduce {ext}", ops.Allreduce("sum", (did,)), typ(mesh, ext, did=did, partial="sum"),
                       typ(mesh, ext), ext)
                for axis in (0, 1):
                    yield (f"reduce_scatter {ext} {axis}", ops.ReduceScatter("sum", did, axis),
                           typ(mesh, ext, did=did, partial="sum"), typ(mesh, ext, axis, did), ext)
        small = (8 * k + 1, 5)  # below the window: MPI's own on any node
        yield (f"allreduce {small}", ops.Allreduce("max", (did,)), typ(mesh, small, did=did, partial="max"),
               typ(mesh, small), small)


def check():
    count = 0
    for seed, (name, op, src, dst, extents) in enumerate(cases()):
        (team,) = teams_of(rank, op, src, dst)
        held = []
        for call in range(2):  # both halves of a window
            mine = blocks(src, extents, 1000 * seed + 10 * call)
            with np.errstate(all="ignore"):
                want = exchange(op, team, {d: mine[d] for d in team.devices}, src, dst)[rank]
            for layout in (np.ascontiguousarray, np.asfortranarray):
                x = layout(mine[rank])
                with np.errstate(all="ignore"):
                    got = t.communicate(op, src, dst, {rank: x})[rank]
                assert got.shape == want.shape and got.dtype == want.dtype, (name, team.devices, call)
                assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), \
                    (name, src.mesh.shape, team.devices, call, layout.__name__)
                assert x.tobytes() == mine[rank].tobytes()  # the input is never written
                held.append((got, want.copy(), name))
                count += 1
        for got, want, name in held:  # results handed out are never handed out again while held
            assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), name
    # Which teams took shared memory: exactly those within one simulated node (this machine is one node)
    def one_node(devices):
        return len({d // nodes.NODE_RANKS for d in devices}) == 1
    windows = {}
    for (kind, devices), (made, _) in COMMS.others.items():
        if kind.startswith(("shared window", "shared results")):
            assert kind.endswith(f", nodes of {nodes.NODE_RANKS}"), kind
            assert (made is not None) == one_node(devices), (kind, devices)
            if kind.startswith("shared window"):
                windows.setdefault(devices, set()).add(made is not None)
    inside = sorted(d for d in windows if True in windows[d])
    across = sorted(d for d in windows if windows[d] == {False})
    said = f"agree {count}\n" if rank == 0 else ""
    print(f"{said}rank {rank} windows {inside} across {across}", flush=True)


try:
    check()
except BaseException:  # a failed check on one rank stops the job at once, not at the others' timeout
    import traceback
    traceback.print_exc()
    comm.Abort(1)
"""

# The teams each rank is in: the world's and, on the 2 x 2 mesh, its DIDx team (0, 1) or (2, 3) and its
# DIDy team (0, 2) or (1, 3); which of them are within one simulated node of K ranks.
TEAMS = {0: [(0, 1), (0, 1, 2, 3), (0, 2)], 1: [(0, 1), (0, 1, 2, 3), (1, 3)],
         2: [(0, 1, 2, 3), (0, 2), (2, 3)], 3: [(0, 1, 2, 3), (1, 3), (2, 3)]}


@pytest.mark.parametrize("node_ranks", [1, 2])
def test_collectives_across_simulated_nodes_keep_the_bits(node_ranks):
    done = run_mpi(4, ["-c", NODES_CHILD], timeout=240, env={"REFIR_MPI_NODE_RANKS": str(node_ranks)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    lines = sorted(done.stdout.splitlines())
    assert lines[0] == "agree 180", done.stdout
    for r, line in enumerate(lines[1:]):
        windows = [d for d in TEAMS[r] if len({x // node_ranks for x in d}) == 1]
        assert line == f"rank {r} windows {windows} across {[d for d in TEAMS[r] if d not in windows]}", lines


PROGRAM = """mesh m = [0, 1]
func main(x: f32[8@DIDx, 4]) {
  y: f32[8, 4] = set(x)
  return y
}
"""


@pytest.mark.parametrize("value", ["0", "two"])
def test_a_bad_node_rule_ends_every_rank_with_one_line(tmp_path, value):
    program = tmp_path / "p.rir"
    program.write_text(PROGRAM)
    done = run_mpi(2, ["-m", "refir", "run", str(program)], timeout=60, env={"REFIR_MPI_NODE_RANKS": value})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert [line for line in done.stderr.splitlines() if "error" in line] == [
        f"error: REFIR_MPI_NODE_RANKS={value!r} is not a positive number of ranks "
        "(write e.g. REFIR_MPI_NODE_RANKS=1: every rank its own node)"]
