"""Interleaved sharding, a mesh axis with a split factor (spec §3.4, issue 29 item 1b):
its runs against torch DTensor's `_StridedShard`, its text, the verifier's rules, the
lowering of reshardings to and from it, and every backend on it (global, spmd, gpu,
under mpiexec too)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import assert_cases_pass, run_mpi

import refir
import refir.cli
from conformance.cases import CORPUS, cases_of
from refir.checks.footprint import elements
from refir.errors import InputError, VerifyError
from refir.frontends.builder_checks import axis as axis_spec
from refir.frontends.dtensor import Replicate, Shard, StridedShard, from_refir, parse_mesh, parse_placements, to_refir
from refir.frontends.dtensor_explain import explain_redistribute
from refir.ir import ops
from refir.ir.blocks import cut_runs, gathered_order, inner_runs
from refir.ir.types import (
    Axis,
    Mesh,
    TensorType,
    axis_block,
    axis_runs,
    block,
    block_index,
    local_shape,
)
from refir.lowering.lower import lower

INTERLEAVED = sorted(p.name for p in CORPUS.glob("interleaved_*.rir"))
G = Mesh("g", (2, 2), (2, 0, 3, 1))  # device ids out of order: coords (0,0)=2 (0,1)=0 (1,0)=3 (1,1)=1


def rows(mesh: Mesh, a: Axis, extent: int, device: int) -> list[int]:
    return [i for lo, hi in axis_runs(mesh, a, extent, device) for i in range(lo, hi)]


# ---- the rule --------------------------------------------------------------------------


def test_the_rule_on_the_spec_examples():
    m4 = Mesh("m", (4,), (0, 1, 2, 3))
    assert [rows(m4, Axis(12, "DIDx", split=(3,)), 12, d) for d in range(4)] == \
        [[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 11]]
    assert [rows(m4, Axis(7, "DIDx", split=(2,)), 7, d) for d in range(4)] == [[0, 4], [1, 5], [2, 6], [3]]
    assert [rows(m4, Axis(7, "DIDx", split=(3,)), 7, d) for d in range(4)] == [[0, 3, 6], [1, 4], [2, 5], []]
    nest = Axis(5, ("DIDy", "DIDx"), split=(2, 1))
    assert {d: rows(G, nest, 5, d) for d in G.devices} == {2: [0, 1], 0: [3], 3: [2], 1: [4]}
    assert cut_runs(7, 4, 1, 1) == ((2, 4),)  # split factor 1: §3.1's block
    assert local_shape(TensorType("f32", (nest, Axis(3)), G), {}, 2) == (2, 3)


def test_runs_cost_the_split_factors_not_the_extent_or_the_mesh():
    """A 65,536-device mesh and an extent of 10**15: a device's part is 3 runs."""
    big = Mesh("big", (65536,), tuple(range(65536)))
    a = Axis(10 ** 15, "DIDx", split=(3,))
    runs = axis_runs(big, a, 10 ** 15, 65535)
    pieces = [block(10 ** 15, 3, j) for j in range(3)]
    want = tuple((p0 + lo, p0 + hi) for p0, p1 in pieces for lo, hi in [block(p1 - p0, 65536, 65535)])
    assert runs == want and len(runs) == 3 and runs[0][0] > 0
    assert sum(hi - lo for lo, hi in runs) == local_shape(TensorType("f32", (a,), big), {}, 65535)[0]


def test_contiguous_axes_keep_their_one_block_and_an_interleaved_one_has_none():
    m = Mesh("m", (4,), (0, 1, 2, 3))
    assert axis_runs(m, Axis(7, "DIDx"), 7, 3) == ((6, 7),) == (axis_block(m, Axis(7, "DIDx"), 7, 3),)
    with pytest.raises(ValueError, match="interleaved"):
        axis_block(m, Axis(7, "DIDx", split=(2,)), 7, 0)


def test_a_gather_puts_each_members_runs_back_in_place():
    """Members' lists cut from one of 7 (split 2 over 4): gathered, the list is 0..6 again."""
    held = [[i for lo, hi in cut_runs(7, 4, 2, k) for i in range(lo, hi)] for k in range(4)]
    assert held == [[0, 4], [1, 5], [2, 6], [3]]
    order = gathered_order([len(h) for h in held], 2)
    assert [held[k][i] for k, lo, hi in order for i in range(lo, hi)] == list(range(7))
    assert gathered_order([2, 2, 1], 1) == ((0, 0, 2), (1, 0, 2), (2, 0, 1))


def test_inner_runs_cut_what_the_outer_mesh_axes_left():
    a, want = Axis(7, "DIDy"), Axis(7, ("DIDy", "DIDx"), split=(1, 3))
    # DIDy's block of 7 over 2 on device 3 (y=1) is rows 4:7; DIDx:3 cuts those 3 rows, x=0 keeps all three pieces'
    assert inner_runs(G, a, want, 3, 3) == ((0, 3),)
    assert inner_runs(G, a, want, 3, 1) == ()
    assert rows(G, want, 7, 3) == [4, 5, 6] and rows(G, want, 2, 2) == [0]


@pytest.mark.parametrize("extent", [5, 7, 12, 13])
@pytest.mark.parametrize("sf", [2, 3])
def test_runs_are_dtensors_strided_shard_local_tensors(extent, sf):
    """torch 2.13's _StridedShard on 1-D, 2x2 and 2x3 meshes, on either mesh dim or both."""
    pytest.importorskip("torch")
    pytest.importorskip("torch.distributed._local_tensor")
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate as TR
    from torch.distributed.tensor import Shard as TS
    from torch.distributed.tensor import distribute_tensor
    from torch.distributed.tensor.placement_types import _StridedShard

    from conformance.peers.dtensor_peer import _world, to_numpy, to_torch

    value = np.arange(extent, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    cases = [((4,), [_StridedShard(0, split_factor=sf)], "DIDx", (sf,)),
             ((2, 2), [_StridedShard(0, split_factor=sf), TS(0)], ("DIDy", "DIDx"), (sf, 1)),
             ((2, 2), [TS(0), _StridedShard(0, split_factor=sf)], ("DIDy", "DIDx"), (1, sf)),
             ((2, 3), [_StridedShard(0, split_factor=sf), _StridedShard(0, split_factor=2)], ("DIDy", "DIDx"),
              (sf, 2)),
             ((2, 2), [TR(), _StridedShard(0, split_factor=sf)], "DIDx", (sf,))]
    for shape, placements, shard, split in cases:
        n = int(np.prod(shape))
        mesh, a = Mesh("m", shape, tuple(range(n))), Axis(extent, shard, split=split)
        _world(n)
        with LocalTensorMode(n) as lm:
            x = distribute_tensor(lm.rank_map(lambda r: to_torch(value)), init_device_mesh("cpu", shape),
                                  placements, src_data_rank=None)  # torch scatters only even strided blocks
            theirs = {r: to_numpy(x._local_tensor._local_tensors[r])[:, 0].astype(int).tolist() for r in range(n)}
        assert {r: rows(mesh, a, extent, r) for r in range(n)} == theirs, (shape, placements)


# ---- text and the builder --------------------------------------------------------------

TEXT = """mesh g = [[0, 1], [2, 3]]

func main(x: f32[12@DIDx:3, 5@(DIDy:2,DIDx)], y: f32[N@DIDy:2, 7@(DIDy,DIDx:3)]) {
  return x, y
}
"""


def test_text_round_trips_and_one_spelling_per_type():
    printed = refir.print_program(refir.parse(TEXT))
    assert "x: f32[12@DIDx:3, 5@(DIDy:2,DIDx)] on g" in printed
    assert "y: f32[N@DIDy:2, 7@(DIDy,DIDx:3)] on g" in printed
    assert refir.parse(printed) == refir.parse(TEXT) and refir.print_program(refir.parse(printed)) == printed
    assert str(Axis(5, ("DIDy", "DIDx"), split=(1, 1))) == "5@(DIDy,DIDx)" and Axis(5, "DIDx", split=(1,)) == \
        Axis(5, "DIDx")
    assert axis_spec("N@(DIDy:2,DIDx)") == Axis("N", ("DIDy", "DIDx"), split=(2, 1))
    assert axis_spec("7@DIDx:3") == Axis(7, "DIDx", split=(3,))


@pytest.mark.parametrize("factor", ["1", "0"])
def test_type_c8_refuses_a_split_factor_under_two(factor):
    text = TEXT.replace("12@DIDx:3", f"12@DIDx:{factor}")
    with pytest.raises(VerifyError, match=r"\[type_c8\].*split factor " + factor + ".*write the mesh axis alone"):
        refir.parse(text)
    with pytest.raises(VerifyError, match=r"\[type_c8\]"):
        refir.parse(TEXT.replace("(DIDy:2,DIDx)", f"(DIDy:{factor},DIDx)"))
    with pytest.raises(InputError, match="type_c8"):
        axis_spec(f"7@DIDx:{factor}")


def test_type_c8_on_a_type_built_in_python():
    from refir.checks.type_checks import check_type
    from refir.errors import Loc

    bad = TensorType("f32", (Axis(5, ("DIDy", "DIDx"), split=(0, 2)),), G)
    with pytest.raises(VerifyError, match=r"\[type_c8\].*one integer >= 1 per mesh axis"):
        check_type(bad, Loc("t", 1, 1, ""))
    with pytest.raises(ValueError, match="split factors"):
        Axis(5, ("DIDy", "DIDx"), split=(2,))


# ---- the verifier ----------------------------------------------------------------------


def program(params: str, body: str, mesh: str = "[[0, 1], [2, 3]]") -> str:
    return f"mesh g = {mesh}\nfunc main({params}) {{\n{body}\n}}\n"


@pytest.mark.parametrize("params, body, match", [
    ("x: f32[12@DIDx:2, 3]", "  y = reshape(x, [36])\n  return y", "reshape needs axis 0 of x"),
    ("x: f32[12@DIDx:2, 3]", "  y = slice(x, axes=[0], starts=[1], stops=[5], steps=[1])\n  return y",
     "slice needs axis 0 of x as one block per device, but it is interleaved on DIDx:2"),
    ("x: f32[12@DIDx:2, 3]", "  y = select(x, axis=0, index=1)\n  return y", "select needs axis 0"),
    ("x: f32[12@DIDx:2, 3]", "  y = pad(x, low=[1, 0], high=[0, 0])\n  return y", "pad needs axis 0"),
    ("x: f32[12@DIDx:2, 3]", "  y = cat(x, x, axis=0)\n  return y", "cat needs axis 0"),
    ("x: f32[4, 12@DIDx:2], w: f32[12@DIDx:2, 5]", "  y = matmul(x, w)\n  return y",
     r"matmul needs axis 1 of x .*insert `set` of x to f32\[4, 12@DIDx\] on g"),
    ("x: f32[12]", "  y: i32[12@DIDx:2] = iota(axis=0)\n  return y", "iota makes each device's part as one block"),
])
def test_interleave_c1_refuses_ops_that_need_one_block(params, body, match):
    if "iota" in body:
        params = "x: f32[12, 1]"
        body = "  y: i32[12@DIDx:2] = iota(axis=0)\n  return y"
    with pytest.raises(VerifyError, match=r"\[interleave_c1\].*" + match):
        refir.verify(refir.parse(program(params, body)))


def test_elementwise_operands_agree_on_split_factors_too():
    bad = program("x: f32[12@DIDx:2], y: f32[12@DIDx]", "  z = add(x, y)\n  return z")
    with pytest.raises(VerifyError, match=r"\[elementwise_c5\].*axis 0 is sharded on DIDx and DIDx:2"):
        refir.verify(refir.parse(bad))
    with pytest.raises(VerifyError, match=r"\[result_c2\]"):
        refir.verify(refir.parse(program("x: f32[12@DIDx:2]", "  z: f32[12@DIDx:3] = permute(x, [0])\n  return z")))
    with pytest.raises(VerifyError, match=r"\[elementwise_c5\].*sharded on DIDx:2 but the result has it on DIDx:3"):
        refir.verify(refir.parse(program("x: f32[12@DIDx:2]", "  z: f32[12@DIDx:3] = neg(x)\n  return z")))


def test_what_an_interleaved_axis_allows():
    text = program("x: f32[12@DIDx:2, 3], r: f32[12, 3], w: f32[3, 4]",
                   "  a = add(x, r)\n  s = sum(x, dims=[0])\n  m = matmul(x, w)\n  p = permute(x, [1, 0])\n"
                   "  return a, s, m, p")
    checked = refir.verify(refir.parse(text))
    assert str(checked.types["a"]) == "f32[12@DIDx:2, 3] on g"
    assert str(checked.types["s"]) == "f32[3] on g"  # the reduction's partial is reduced by lowering
    assert str(checked.types["m"]) == "f32[12@DIDx:2, 4] on g"
    assert str(checked.types["p"]) == "f32[3, 12@DIDx:2] on g"
    steps = lower(checked).steps
    assert [s.op for s in steps if s.out.startswith("s")] == [ops.Reduction("sum", (0,)),
                                                             ops.Allreduce("sum", ("DIDx",))]
    assert steps[0].type.partial == () and next(s for s in steps if s.out == "s~1").type.partial == ("DIDx",)


# ---- lowering --------------------------------------------------------------------------


def step_ops(src: str, dst: str, mesh: str = "[[0, 1], [2, 3]]", extra: str = "") -> list[object]:
    """The lowered steps of `y: f32[dst] = set(x: f32[src])` (a ] inside closes the axes early)."""
    text = f"mesh g = {mesh}\n{extra}func main(x: f32[{src}]) {{\n  y: f32[{dst}] = set(x)\n  return y\n}}\n"
    return [s.op for s in lower(refir.verify(refir.parse(text))).steps]


@pytest.mark.parametrize("src, dst, want", [
    ("7@DIDx:2, 3", "7, 3", [ops.Allgather(0, "DIDx")]),
    ("7, 3", "7@DIDx:2, 3", [ops.KeepBlock()]),
    # one mesh axis changes what it cuts: one all_to_all of runs (spec §6's direct rule)
    ("7@DIDx, 3", "7@DIDx:2, 3", [ops.AllToAll("DIDx", 0, 0)]),
    ("7@DIDx:2, 3", "7@DIDx, 3", [ops.AllToAll("DIDx", 0, 0)]),
    ("7@DIDx:2, 3", "7@DIDx:3, 3", [ops.AllToAll("DIDx", 0, 0)]),
    ("7@DIDy, 3", "7@(DIDy,DIDx:3), 3", [ops.KeepBlock()]),  # DIDy's block cut locally by runs
    ("5@(DIDy:2,DIDx), 3", "5@DIDy:2, 3", [ops.Allgather(0, "DIDx")]),  # the outer factor stays
    ("5@(DIDy:2,DIDx), 3", "5, 3", [ops.Allgather(0, "DIDx"), ops.Allgather(0, "DIDy")]),
    ("5@(DIDy:2,DIDx), 3", "5@DIDx:2, 3@DIDy", [ops.Allgather(0, "DIDx"), ops.Allgather(0, "DIDy"),
                                                 ops.KeepBlock()]),  # two mesh axes change: the general way
    ("5@(DIDy:2,DIDx), 3", "5@(DIDy:2,DIDx:3), 3", [ops.AllToAll("DIDx", 0, 0)]),
    ("5@(DIDy,DIDx:2), 3", "5@DIDy, 3@DIDx", [ops.AllToAll("DIDx", 1, 0)]),
    ("5@(DIDy,DIDx:2), 3", "5@DIDx, 3@DIDy", [ops.Allgather(0, "DIDx"), ops.Allgather(0, "DIDy"),
                                              ops.KeepBlock()]),  # two mesh axes change: the general way
])
def test_reshardings_to_and_from_interleaved(src, dst, want):
    assert step_ops(src, dst) == want


def test_partial_and_other_mesh_reshardings():
    # a partial onto an interleaved axis: one reduce_scatter of runs (the direct rule); an avg's terms
    # divided by the team's size first
    assert step_ops("13, 6] partial[sum@DIDy", "13@DIDy:3, 6") == [ops.ReduceScatter("sum", "DIDy", 0)]
    assert step_ops("13, 6] partial[avg@DIDy", "13@DIDy:3, 6") == [ops.Binary("div"),
                                                                   ops.ReduceScatter("sum", "DIDy", 0)]
    assert step_ops("6, 13@DIDx:2", "6, 13@DIDx:2] partial[sum@DIDy") == [ops.Partition("sum", ("DIDy",))]
    assert step_ops("6, 13@DIDx:2] partial[sum@DIDy", "6@DIDy, 13@DIDx:2") == [ops.ReduceScatter("sum", "DIDy", 0)]
    assert step_ops("6, 13] partial[sum@DIDy,DIDx", "6@DIDy:2, 13@DIDx") == [
        ops.Allreduce("sum", ("DIDy",)), ops.ReduceScatter("sum", "DIDx", 1),
        ops.KeepBlock()]  # two mesh axes change: the general way
    cross = step_ops("11@DIDx:2, 5] on g layout[0, 1", "11@(DIDy,DIDx:2), 5] on h layout[0, 1", "[3, 1, 2]",
                     "mesh h = [[0, 1], [2, 3]]\n")
    assert [type(op) for op in cross] == [ops.Allgather, ops.Broadcast, ops.KeepBlock]
    assert step_ops("7@DIDx:2, 3", "7@DIDx:2, 3") == [ops.Copy()]


def test_lower_lists_each_devices_rows(capsys):
    assert refir.cli.main(["lower", str(CORPUS / "interleaved_1d.rir")]) == 0
    out = capsys.readouterr().out
    assert "axis 0: 7 interleaved over DIDx:3 -> device 0: rows 0 3 6; 1: rows 1 4; 2: rows 2 5; 3: rows none" in out
    assert "local [3, 3] strides [1, 3]" in out  # the longest part (device 0's), in the declared layout


def test_explain_prints_runs_rule_and_bytes(capsys):
    assert refir.cli.main(["explain", str(CORPUS / "interleaved_nested.rir"), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    rules = [s["communication"]["rule"] for s in facts["steps"] if s["communication"]]
    assert any("interleaved DIDy:2 -> whole: over DIDy with split factor 2, each member's runs put at their "
               "places (spec §3.4)" in r for r in rules)
    a = next(s["value"] for s in facts["steps"] if s["out"] == "a")
    assert a["devices"]["2"]["runs"] == [[[0, 2]], [[0, 3]]] and a["devices"]["1"]["local_shape"] == [1, 3]


def test_redistribute_takes_strided_shard_placements():
    assert parse_placements("_S(0,2), S0") == (StridedShard(0, 2), Shard(0))
    assert parse_placements("_StridedShard(dim=0, sf=3),R") == (StridedShard(0, 3), Replicate())
    assert parse_placements("_StridedShard(1, split_factor=2)") == (StridedShard(1, 2),)
    assert parse_placements("_S(0,1)") == (Shard(0),)
    mesh = parse_mesh("2x2")
    t = to_refir((5, 3), mesh, (StridedShard(0, 2), Shard(0)))
    assert str(t) == "f32[5@(DIDy:2,DIDx), 3] on m" and from_refir(t)[2] == (StridedShard(0, 2), Shard(0))
    out = explain_redistribute(mesh, (5, 3), (StridedShard(0, 2), Shard(0)), (Replicate(), Replicate()))
    assert "interleaved DIDy:2 -> whole" in out and "received per device  0: 12  1: 24  2: 12  3: 12" in out
    assert "every device's block equals the DTensor block of the value: yes" in out
    back = explain_redistribute(parse_mesh("4"), (7, 3), (Shard(0),), (StridedShard(0, 3),))
    assert "one exchange over DIDx, each member sending each other the runs both hold" in back
    assert "received per device  0: 24  1: 24  2: 12  3: 0" in back
    assert "local shapes  0: [3, 3]  1: [2, 3]  2: [2, 3]  3: [0, 3]" in back


def test_the_dtensor_peer_compares_strided_shard_results_and_reshards():
    pytest.importorskip("torch")
    pytest.importorskip("torch.distributed._local_tensor")
    from conformance.peers import dtensor_peer, load_peer
    from conformance.peers.spec import PeerCase
    from conformance.peers.sweep import check

    peer = load_peer("dtensor")
    base = dict(kind="reshard", root=(2, 2), view="root", dims=(0, 1), dtype="f32", shape=(5, 3), seed=3)
    cases = [PeerCase(**{**base, "kind": "op", "op": "reshape", "root": (2,), "dims": (0,), "shape": (15,),
                         "params": (3, 5), "src": (Shard(1),), "dst": (Shard(0),)}),
             PeerCase(**{**base, "src": (StridedShard(0, 2), Shard(0)), "dst": (Replicate(), Shard(1))}),
             PeerCase(**{**base, "shape": (7, 3), "src": (Replicate(), Shard(1)),
                         "dst": (StridedShard(0, 2), Shard(0))}),
             PeerCase(**{**base, "root": (4,), "dims": (0,), "shape": (7, 3), "src": (StridedShard(0, 3),),
                         "dst": (Shard(0),)})]
    got = dtensor_peer.run(cases[0])
    assert got.own == (StridedShard(0, 3),) and got.own_blocks is not None  # compared, no longer skipped
    for c in cases:
        o = check(peer, c)
        assert o.status == "agree", (c.label(), o.problems)


# ---- every backend ---------------------------------------------------------------------


@pytest.mark.parametrize("name", INTERLEAVED)
def test_interleaved_corpus_agrees_on_every_backend(name):
    assert_cases_pass(cases_of(CORPUS / name), context=name)


def test_strided_inputs_and_outputs_are_exact_rows():
    """An input with a negative stride cut into runs; every device's buffer is its rows."""
    text = program("x: f32[7@DIDx:2, 3]", "  y: f32[7@DIDx:3, 3] layout[1, 0] = set(x)\n  return y",
                   "[0, 1, 2, 3]")
    x = np.arange(42, dtype=np.float32).reshape(14, 3)[::-2]
    for backend in ("spmd", "gpu"):
        got = refir.run(text, {"x": x}, backend=backend, keep="all")
        assert np.array_equal(got.outputs["y"], x)
        t = refir.verify(refir.parse(text)).types["y"]
        for d in range(4):
            held = np.asarray(got.shards["y"][d])
            assert np.array_equal(held, x[block_index(t, d, x.shape)]), (backend, d)
        assert got.shards["y"][3].shape == (0, 3) and np.asarray(got.shards["y"][0]).strides == (4, 12)


def test_footprint_counts_each_devices_runs():
    t = TensorType("f32", (Axis(7, "DIDx", split=(3,)), Axis(2)), Mesh("m", (4,), (0, 1, 2, 3)))
    assert list(elements(t, {}, 4)) == [6, 4, 4, 0]


@pytest.mark.parametrize("name, backend", [("interleaved_nested.rir", "spmd"), ("interleaved_partial.rir", "gpu")])
def test_interleaved_corpus_under_mpiexec(name, backend):
    """One rank per process: the MPI transport's planned allgather (spmd), the gpu rank transport."""
    job = run_mpi(4, ["-m", "refir", "run", str(CORPUS / name), "--backend", backend], timeout=300)
    assert job.returncode == 0, job.stderr[-2000:]
    assert "expect lines hold" in job.stdout


# ---- nvFuser's inner split --------------------------------------------------------------

INNER_SPLIT = """T0_g[ iS0{8}, iS1{3} ] (DeviceMesh{0 1})
T1_g[ iS2{( ceilDiv(8, 2) )}, ideviceIdx.x3{2}, iS4{3} ] (DeviceMesh{0 1}) = Set( T0_g[ iS0{8}, iS1{3} ] )
T2_g[ iS5{( ceilDiv(8, 2) )}, ideviceIdx.x6{2}, iS7{3} ] (DeviceMesh{0 1}) = add(T1_g[ iS2{( ceilDiv(8, 2) )}, \
ideviceIdx.x3{2}, iS4{3} ], T1_g[ iS2{( ceilDiv(8, 2) )}, ideviceIdx.x3{2}, iS4{3} ])
"""


def test_an_nvfuser_inner_split_whose_factor_divides_is_interleaved():
    """8 rows split inner by 2 devices: device k holds rows 2i + k, which is 8@DIDx:4."""
    from refir.frontends.nvfuser import import_nvfuser

    imported = import_nvfuser(INNER_SPLIT, "inner.txt")
    assert "T1: f32[8@DIDx:4, 3] on m = set(T0)" in imported.text
    assert "T2: f32[8@DIDx:4, 3] on m = add(T1, T1)" in imported.text
    checked = refir.verify(imported.program)
    t = checked.types["T2"]
    assert [rows(t.mesh, t.axes[0], 8, d) for d in (0, 1)] == [[0, 2, 4, 6], [1, 3, 5, 7]]  # nvFuser's i*d + k
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    for backend in ("global", "spmd", "gpu"):
        got = refir.run(imported.program, {"T0": x}, backend=backend)
        assert np.array_equal(got.outputs["T2"], 2 * x)
        if backend != "global":
            assert np.array_equal(got.shards["T2"][1], 2 * x[1::2])
    ragged = INNER_SPLIT.replace("iS0{8}", "iS0{9}").replace("ceilDiv(8, 2)", "ceilDiv(9, 2)")
    with pytest.raises(refir.errors.ParseError, match="only where d divides a static extent"):
        import_nvfuser(ragged, "ragged.txt")


PLACED = [("7, 5", "g", ""), ("7@DIDx, 5", "g", ""), ("7@DIDx:2, 5", "g", ""), ("7@(DIDy:2,DIDx), 5", "g", ""),
          ("7@(DIDy,DIDx:3), 5", "g", ""), ("7@DIDy:3, 5@DIDx", "g", ""), ("7@(DIDx:2,DIDy), 5", "g", ""),
          ("7, 5", "g", " partial[sum@DIDy]"), ("7@DIDx:2, 5", "g", " partial[sum@DIDy]")]
OTHER_MESH = [("7@DIDx:2, 5", "h", ""), ("7@DIDx, 5", "h", ""), ("7, 5", "h", "")]


@pytest.mark.parametrize("src", PLACED, ids=lambda p: p[0] + p[2])
def test_every_pair_of_placements_reshards_exactly(src):
    """From each placement to each (interleaved, nested, partial, replicated, another mesh): the
    value, and every device's buffer is its rows of it (block_index)."""
    x = np.arange(35, dtype=np.float32).reshape(7, 5)
    for dst in PLACED + OTHER_MESH:
        text = (f"mesh g = [[2, 0], [3, 1]]\nmesh h = [4, 1, 5]\nfunc main(x: f32[{src[0]}] on g{src[2]}) {{\n"
                f"  y: f32[{dst[0]}] on {dst[1]}{dst[2]} = set(x)\n  return y\n}}\n")
        program = refir.parse(text)
        t = refir.verify(program).types["y"]
        got = refir.run(program, {"x": x}, backend="spmd")
        assert np.array_equal(got.outputs["y"], x), (src, dst)
        if not t.partial:
            for d in t.mesh.devices:
                assert np.array_equal(got.shards["y"][d], x[block_index(t, d, x.shape)]), (src, dst, d)
