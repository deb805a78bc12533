"""The direct rule of interleaved types (docs/spec.md §6): where one mesh axis
changes what it cuts, one all_to_all whose blocks are runs; a partial over a
mesh axis onto an interleaved axis over it, one reduce_scatter of runs. The
block helpers (blocks.held_runs, blocks.shared_moves) on real values, the rule's
choices, every backend on uneven extents, empty runs and strided inputs (in
process, and one rank per process under mpiexec, where a planted bug in the
moves is caught), and explain's bytes."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest
from helpers import assert_runs_as, run_mpi

import refir
from refir.explain.placement import explain
from refir.ir import ops
from refir.ir.blocks import held_runs, shared_moves
from refir.lowering.lower import lower


def positions(runs) -> list[int]:
    return [i for a, b in runs for i in range(a, b)]


def test_held_runs_are_a_members_part_of_the_shared_list():
    assert held_runs(7, 4, None, 2) == ((0, 7),)  # the team's mesh axis does not cut the axis
    assert held_runs(7, 4, 1, 1) == ((2, 4),)  # §3.1's block
    assert held_runs(7, 4, 2, 0) == ((0, 1), (4, 5)) and held_runs(7, 4, 2, 3) == ((3, 4),)
    assert held_runs(7, 4, 3, 3) == () and held_runs(0, 4, None, 0) == ()


def test_shared_moves_on_examples():
    # 7@DIDx (blocks of 2) -> 7@DIDx:2 over 4: device 2 holds rows 4 5, device 0 wants rows 0 4
    assert shared_moves(((4, 6),), ((0, 1), (4, 5))) == ((0, 1, 1),)  # its row 0 to device 0's position 1
    assert shared_moves(((0, 2),), ((0, 1), (4, 5))) == ((0, 0, 1),)
    # 13@DIDx:2 -> 13@DIDx:3 on device 0 of 4: rows 0 1 7 8 -> rows 0 1 5 6 10
    assert shared_moves(((0, 2), (7, 9)), ((0, 2), (5, 7), (10, 11))) == ((0, 0, 2),)
    # the whole list to runs, and runs to the whole list (all_to_all across axes)
    assert shared_moves(((0, 13),), ((2, 4), (9, 11))) == ((2, 0, 2), (9, 2, 2))
    assert shared_moves(((2, 4), (9, 11)), ((0, 13),)) == ((0, 2, 2), (2, 9, 2))
    assert shared_moves((), ((0, 3),)) == () and shared_moves(((0, 3),), ()) == ()


@pytest.mark.parametrize("length, parts", [(0, 3), (5, 4), (7, 4), (13, 4), (12, 3), (9, 2)])
def test_shared_moves_take_every_common_position_once_at_its_place(length, parts):
    """Against sets: for every pair of members and split factors (None: whole), the
    moves pick exactly the positions both hold, from the sender's place to the receiver's."""
    for have, want in product((None, 1, 2, 3), repeat=2):
        for s, r in product(range(parts), repeat=2):
            a, b = held_runs(length, parts, have, s), held_runs(length, parts, want, r)
            pa, pb = positions(a), positions(b)
            got = [(pa[f + i], pb[t + i]) for f, t, n in shared_moves(a, b) for i in range(n)]
            assert [x for x, y in got] == [y for x, y in got] == sorted(set(pa) & set(pb)), (have, want, s, r)


MESH_1D = "mesh g = [3, 1, 0, 2]\n"
MESH_2D = "mesh g = [[2, 0], [3, 1]]\n"

# (mesh, source, target, the one step): uneven extents, empty runs, nests, partials
DIRECT = [
    (MESH_1D, "13@DIDx, 6", "13@DIDx:2, 6", ops.AllToAll("DIDx", 0, 0)),
    (MESH_1D, "13@DIDx:2, 6", "13@DIDx:3, 6", ops.AllToAll("DIDx", 0, 0)),
    (MESH_1D, "7@DIDx:3, 6", "7@DIDx, 6", ops.AllToAll("DIDx", 0, 0)),
    (MESH_1D, "13, 6@DIDx", "13@DIDx:2, 6", ops.AllToAll("DIDx", 0, 1)),
    (MESH_1D, "5@DIDx:2, 6", "5, 6@DIDx:3", ops.AllToAll("DIDx", 1, 0)),
    (MESH_1D, "13, 6] partial[sum@DIDx", "13@DIDx:3, 6", ops.ReduceScatter("sum", "DIDx", 0)),
    (MESH_1D, "13, 7] partial[max@DIDx", "13, 7@DIDx:2", ops.ReduceScatter("max", "DIDx", 1)),
    (MESH_2D, "7@(DIDy,DIDx:2), 5", "7@(DIDy,DIDx:3), 5", ops.AllToAll("DIDx", 0, 0)),
    (MESH_2D, "7@(DIDy:2,DIDx), 5", "7@DIDy:2, 5@DIDx", ops.AllToAll("DIDx", 1, 0)),
    (MESH_2D, "7@DIDx:2, 5@DIDy", "7@DIDx:2, 5@DIDy:2", ops.AllToAll("DIDy", 1, 1)),
    (MESH_2D, "7, 5@DIDx] partial[sum@DIDy", "7@DIDy:2, 5@DIDx", ops.ReduceScatter("sum", "DIDy", 0)),
    (MESH_2D, "7, 5] partial[sum@DIDy,DIDx", "7@DIDy:3, 5] partial[sum@DIDx", ops.ReduceScatter("sum", "DIDy", 0)),
]


def text(mesh: str, src: str, dst: str) -> str:
    return f"{mesh}func main(x: f32[{src}]) {{\n  y: f32[{dst}] = set(x)\n  return y\n}}\n"


@pytest.mark.parametrize("mesh, src, dst, step", DIRECT, ids=lambda v: str(v))
def test_the_direct_rule_picks_one_collective(mesh, src, dst, step):
    assert [s.op for s in lower(refir.verify(refir.parse(text(mesh, src, dst)))).steps] == [step]


def test_an_avg_is_divided_then_reduce_scattered_and_two_changes_go_the_general_way():
    def steps(mesh, src, dst):
        return [s.op for s in lower(refir.verify(refir.parse(text(mesh, src, dst)))).steps]

    assert steps(MESH_1D, "13, 6] partial[avg@DIDx", "13@DIDx:3, 6") == [ops.Binary("div"),
                                                                          ops.ReduceScatter("sum", "DIDx", 0)]
    x = np.arange(78, dtype=np.float32).reshape(13, 6) - 30  # 4 terms of x / 4 each: exact
    program = refir.parse(text(MESH_1D, "13, 6] partial[avg@DIDx", "13@DIDx:3, 6"))
    for backend in ("global", "spmd", "gpu"):
        assert_runs_as(program, {"x": x}, x, backend, **({"keep": "all"} if backend != "global" else {}))
    # two mesh axes change, and an avg over two mesh axes: no one collective makes them
    assert ops.KeepBlock() in steps(MESH_2D, "7@(DIDy,DIDx:2), 5", "7@DIDx, 5@DIDy")
    assert ops.KeepBlock() in steps(MESH_2D, "7, 5] partial[avg@DIDy,DIDx", "7@DIDy:2, 5")


def layouts(x: np.ndarray) -> dict[str, np.ndarray]:
    """The same values dense, column-major, with gaps and with negative strides."""
    gaps = np.zeros((x.shape[0] * 2, x.shape[1] * 3), x.dtype)[::2, ::3]
    gaps[...] = x
    flipped = np.ascontiguousarray(x[::-1, ::-1])[::-1, ::-1]
    return {"dense": x, "column-major": np.asfortranarray(x), "gaps": gaps, "negative": flipped}


@pytest.mark.parametrize("mesh, src, dst, step", DIRECT, ids=lambda v: str(v))
def test_every_backend_reshards_exactly_from_any_strides(mesh, src, dst, step):
    """The value, and every device's buffer its runs of it, dense in its layout
    (helpers.assert_blocks through block_index)."""
    shape = tuple(int(e.split("@")[0].split("]")[0]) for e in src.split(", "))
    x = (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) * 1.5 - 7).astype(np.float32)
    for layout in ("", " layout[1, 0]"):
        program = refir.parse(text(mesh, src, dst + ("]" + layout[:-1] if layout else "")))
        partial = bool(refir.verify(program).types["y"].partial)  # its buffers are terms, not blocks
        for given in layouts(x).values():
            for backend in ("global", "spmd", "gpu"):
                if partial or backend == "global":
                    np.testing.assert_array_equal(refir.run(program, {"x": given}, backend=backend).outputs["y"], x)
                else:
                    assert_runs_as(program, {"x": given}, x, backend, keep="all")


def test_explain_counts_the_runs_each_device_lacks():
    """7 rows over 4 (blocks of 2) to 7@DIDx:3 (device 0 rows 0 3 6; 1: 1 4; 2: 2 5;
    3: none): rows 3 and 6 reach device 0, 1 and 4 device 1, 2 device 2."""
    lowered = lower(refir.verify(refir.parse(text("mesh g = [0, 1, 2, 3]\n", "7@DIDx, 3", "7@DIDx:3, 3"))))
    (step,) = [s for s in explain(lowered, {}, 4).steps if s.comm]
    c = step.comm
    assert [c.bytes_of(d)[1] for d in range(4)] == [24, 24, 12, 0] and c.total_bytes == 60
    assert {(t.sender, t.receiver): t.nbytes for t in c.transfers() if t.nbytes} == {
        (1, 0): 12, (3, 0): 12, (0, 1): 12, (2, 1): 12, (1, 2): 12}
    assert "one exchange over DIDx, each member sending each other the runs both hold" in c.rule


MPI_CHILD = r"""
import sys
import numpy as np
import refir
from refir.lowering import run_exchange
sys.path.insert(0, "tests")
from test_interleaved_direct import DIRECT, layouts, text

def check():
    bad = 0
    for mesh, src, dst, _ in DIRECT:
        shape = tuple(int(e.split("@")[0].split("]")[0]) for e in src.split(", "))
        x = (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) * 1.5 - 7).astype(np.float32)
        program = refir.parse(text(mesh, src, dst))
        for given in layouts(x).values():
            got = refir.run(program, {"x": given}, backend=sys.argv[1])
            if got.outputs is not None and "y" in got.outputs:
                bad += not np.array_equal(got.outputs["y"], x)
    return bad

good = check()
real = run_exchange.shared_moves  # a planted bug: every piece lands at the receiver's first position
run_exchange.shared_moves = lambda a, b: tuple((f, 0, n) for f, _, n in real(a, b))
planted = check()
import mpi4py.MPI as MPI
if MPI.COMM_WORLD.rank == 0:
    print("wrong", good, "planted", planted)
"""


@pytest.mark.parametrize("backend", ["spmd", "gpu"])
def test_one_rank_per_process_reshards_exactly_and_a_planted_bug_is_caught(backend):
    """Under mpiexec the MPI transport (spmd) and the gpu rank transport pack and
    place by the moves; the same runs with every move put at position 0 go wrong."""
    job = run_mpi(4, ["-c", MPI_CHILD, backend], timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    words = job.stdout.split()
    assert words[:2] == ["wrong", "0"] and int(words[3]) > 0, job.stdout + job.stderr[-2000:]


def test_trace_says_where_the_runs_land_in_the_new_buffer(tmp_path, capsys):
    """13 rows over 4 (blocks of 4) to 13@DIDx:2 (device 0: rows 0 1 7 8): it keeps
    rows 0 1 (local 0:2), row 7 comes from device 1 (local 2:3), row 8 from device 2;
    an allgather from 7@DIDx:2 (device 0: rows 0 4) puts its own rows at 0 and 4,
    not at their hull 0:5 (what a device already holds is its runs)."""
    from refir.cli import main

    path = tmp_path / "runs.rir"
    path.write_text("mesh g = [0, 1, 2, 3]\n\nfunc main(x: f32[13@DIDx, 5], w: f32[7@DIDx:2, 3]) {\n"
                    "  a: f32[13@DIDx:2, 5] = set(x)\n  r: f32[7, 3] = set(w)\n  return a, r\n}\n")
    assert main(["trace", str(path), "--device", "0"]) == 0
    out = capsys.readouterr().out
    assert "kept its own local [0:2, 0:5]" in out and "from 1: local [2:3, 0:5] (20 B)" in out
    assert "from 2: local [3:4, 0:5] (20 B)" in out and "from 3: local [empty, 0:5] (no elements) (0 B)" in out
    assert "kept its own local [0:1+4:5, 0:3]" in out and "from 1: local [1:2+5:6, 0:3] (24 B)" in out
