"""An axis sharded over several mesh axes, a nest (spec §3.2, issue 29 item 1a):
its blocks (DTensor's nested rule), its text, the lowering of reshardings to
and from it, and every backend on it (global, spmd, gpu, under mpiexec too)."""

from __future__ import annotations

import json
from itertools import product

import numpy as np
import pytest
from helpers import assert_cases_pass, run_mpi

import refir
import refir.cli
from conformance.cases import CORPUS, cases_of
from refir.checks.footprint import elements
from refir.errors import InputError, VerifyError
from refir.frontends.builder_checks import axis as axis_spec
from refir.frontends.dtensor import Replicate, Shard, from_refir, parse_mesh, to_refir
from refir.frontends.dtensor_explain import explain_redistribute
from refir.ir import ops
from refir.ir.types import (
    Axis,
    Mesh,
    TensorType,
    axis_block,
    block,
    block_number,
    block_slices,
    divides,
    local_shape,
    nested_block,
)
from refir.lowering.lower import lower

G = Mesh("g", (2, 2), (2, 0, 3, 1))  # device ids out of order: coords (0,0)=2 (0,1)=0 (1,0)=3 (1,1)=1
NESTED = sorted(p.name for p in CORPUS.glob("nested_*.rir"))


def chunks(items: list[int], n: int) -> list[list[int]]:
    """torch.chunk as DTensor pads it: chunks of ceil(len/n), empty ones at the end."""
    size = -(-len(items) // n) if items else 0
    out = [items[k * size:(k + 1) * size] for k in range(n)] if size else []
    return out + [[] for _ in range(n - len(out))]


def dtensor_blocks(extent: int, parts: tuple[int, ...]) -> dict[tuple[int, ...], list[int]]:
    """Each coordinate tuple's rows when every mesh dim's Shard chunks what the one before left."""
    out: dict[tuple[int, ...], list[int]] = {(): list(range(extent))}
    for n in parts:
        out = {ks + (k,): c for ks, rows in out.items() for k, c in enumerate(chunks(rows, n))}
    return out


@pytest.mark.parametrize("parts", [(2, 2), (2, 3), (3, 2), (2, 2, 2), (4, 2)])
def test_nested_blocks_are_dtensors_chunks_of_chunks(parts):
    for extent in range(0, 14):
        for ks, rows in dtensor_blocks(extent, parts).items():
            lo, hi = nested_block(extent, parts, ks)
            assert list(range(lo, hi)) == rows, (extent, parts, ks)


def test_five_rows_over_two_by_two_nest_into_2_1_1_1_not_the_flat_2_2_1_0():
    nested = [nested_block(5, (2, 2), ks) for ks in product(range(2), range(2))]
    assert [b - a for a, b in nested] == [2, 1, 1, 1]
    assert [b - a for a, b in (block(5, 4, k) for k in range(4))] == [2, 2, 1, 0]
    assert nested_block(5, (4,), (3,)) == block(5, 4, 3)  # one mesh axis: §3.1's block itself


def test_a_nest_in_either_order_on_a_permuted_mesh():
    yx, xy = Axis(5, ("DIDy", "DIDx")), Axis(5, ("DIDx", "DIDy"))
    assert {d: axis_block(G, yx, 5, d) for d in G.devices} == {2: (0, 2), 0: (2, 3), 3: (3, 4), 1: (4, 5)}
    assert {d: axis_block(G, xy, 5, d) for d in G.devices} == {2: (0, 2), 3: (2, 3), 0: (3, 4), 1: (4, 5)}
    assert [block_number(G, yx, d) for d in (2, 0, 3, 1)] == [0, 1, 2, 3]
    assert [block_number(G, xy, d) for d in (2, 3, 0, 1)] == [0, 1, 2, 3]
    t = TensorType("f32", (Axis(3), yx), G, (1, 0))
    assert local_shape(t, {}, 2) == (3, 2) and local_shape(t, {}, 1) == (3, 1) and local_shape(t, {}) == (3, 2)
    assert block_slices(t, 3, (3, 5)) == (slice(None), slice(3, 4))
    assert not divides(t, {}) and divides(TensorType("f32", (Axis(8, ("DIDy", "DIDx")),), G), {})
    assert list(elements(t, {}, 4)) == [3, 3, 6, 3]  # footprint's vectorised blocks, device by device


def test_one_mesh_axis_is_no_nest_and_its_text_and_type_stay_as_they_were():
    assert Axis(5, ("DIDx",)) == Axis(5, "DIDx") and Axis(5, ("DIDx",)).shard == "DIDx"
    assert str(Axis(5, "DIDx")) == "5@DIDx" and str(Axis(5, ("DIDy", "DIDx"))) == "5@(DIDy,DIDx)"
    text = ("mesh g = [[0, 1], [2, 3]]\n\nfunc main(x: f32[5@( DIDy , DIDx ), N@DIDz]) {\n"
            "  return x\n}\n").replace("N@DIDz", "4")
    printed = refir.print_program(refir.parse(text))
    assert "x: f32[5@(DIDy,DIDx), 4]" in printed and refir.parse(printed) == refir.parse(text)
    assert axis_spec("N@(DIDy,DIDx)") == Axis("N", ("DIDy", "DIDx")) and axis_spec("N@DIDx") == Axis("N", "DIDx")


def test_the_builder_takes_nests_in_axis_specs_and_reshardings():
    from refir.frontends.builder import Builder

    b = Builder()
    b.mesh([[0, 1], [2, 3]])
    x = b.input("x", "f32", ["5@(DIDy,DIDx)", 3])
    b.output(x.set(shard={0: ("DIDx", "DIDy")}, name="y"))
    assert "y: f32[5@(DIDx,DIDy), 3] on m = set(x)" in refir.print_program(b.build())
    with pytest.raises(InputError, match="shard names 'DIDw'"):
        x.set(shard={0: ("DIDx", "DIDw")})


def test_dtensor_shard_on_several_mesh_dims_is_a_nest_in_mesh_dim_order():
    mesh = parse_mesh("2x2x2")
    t = to_refir((7, 3), mesh, (Shard(0), Replicate(), Shard(0)))
    assert str(t) == "f32[7@(DIDz,DIDx), 3] on m"
    assert from_refir(t)[2] == (Shard(0), Replicate(), Shard(0))
    with pytest.raises(InputError, match="cuts an inner mesh dimension first"):
        from_refir(TensorType("f32", (Axis(7, ("DIDx", "DIDz")),), mesh))


def test_reshape_c4_on_a_nest_checks_every_block():
    """6 rows of 2 over a 2x2 nest are rows 2,1,2,1 (4,2,4,2 elements); 12 over it 3,3,3,3."""
    text = ("mesh g = [[0, 1], [2, 3]]\nfunc main(x: f32[6@(DIDy,DIDx), 2]) {\n"
            "  y: f32[12@(DIDy,DIDx)] = reshape(x, [12])\n  return y\n}\n")
    with pytest.raises(VerifyError, match=r"\[reshape_c4\].*block \[0, 0\] of axis 0 "
                       r"\(6 over the nest \(DIDy,DIDx\): rows 0:2 of 2\)"):
        refir.verify(refir.parse(text))
    ok = text.replace("6@", "8@").replace("[12@", "[16@").replace("[12]", "[16]")
    refir.verify(refir.parse(ok))


def step_ops(src: str, dst: str, mesh: str = "[[0, 1], [2, 3]]") -> list[object]:
    text = f"mesh g = {mesh}\nfunc main(x: f32[{src}]) {{\n  y: f32[{dst}] = set(x)\n  return y\n}}\n"
    return [s.op for s in lower(refir.verify(refir.parse(text))).steps]


@pytest.mark.parametrize("src, dst, want", [
    ("5@(DIDy,DIDx), 3", "5@DIDy, 3", [ops.Allgather(0, "DIDx")]),
    ("5@(DIDy,DIDx), 3", "5, 3", [ops.Allgather(0, "DIDx"), ops.Allgather(0, "DIDy")]),
    ("5@DIDy, 3", "5@(DIDy,DIDx), 3", [ops.KeepBlock()]),
    ("5, 3", "5@(DIDx,DIDy), 3", [ops.KeepBlock()]),
    # the fallback: no collective drops an outer mesh axis, so gather to what both begin with, then cut
    ("5@(DIDy,DIDx), 3", "5@DIDx, 3", [ops.Allgather(0, "DIDx"), ops.Allgather(0, "DIDy"), ops.KeepBlock()]),
    ("5@(DIDy,DIDx), 3", "5@(DIDx,DIDy), 3",
     [ops.Allgather(0, "DIDx"), ops.Allgather(0, "DIDy"), ops.KeepBlock()]),
    ("5@DIDx, 3", "5@(DIDy,DIDx), 3", [ops.Allgather(0, "DIDx"), ops.KeepBlock()]),
    # all_to_all moves a nest's innermost mesh axis to the inside of another axis's nest
    ("5@(DIDy,DIDx), 3", "5@DIDy, 3@DIDx", [ops.AllToAll("DIDx", 1, 0)]),
    ("5@DIDy, 3@DIDx", "5@(DIDy,DIDx), 3", [ops.AllToAll("DIDx", 0, 1)]),
    ("5, 3@(DIDy,DIDx)", "5@(DIDy,DIDx), 3",
     [ops.Allgather(1, "DIDx"), ops.Allgather(1, "DIDy"), ops.KeepBlock()]),
    ("7@DIDz, 5@DIDx, 3@DIDy", "7@(DIDz,DIDy,DIDx), 5, 3", [ops.AllToAll("DIDy", 0, 2), ops.AllToAll("DIDx", 0, 1)]),
])
def test_reshardings_to_and_from_a_nest(src, dst, want):
    mesh = "[[[0, 1], [2, 3]], [[4, 5], [6, 7]]]" if "DIDz" in src else "[[0, 1], [2, 3]]"
    assert step_ops(src, dst, mesh) == want


def test_single_axis_reshardings_are_lowered_as_before():
    assert step_ops("4@DIDy, 6@DIDx", "4@DIDx, 6@DIDy") == [ops.Allgather(0, "DIDy"), ops.Allgather(1, "DIDx"),
                                                            ops.KeepBlock()]
    assert step_ops("4@DIDy, 6", "4, 6@DIDy") == [ops.AllToAll("DIDy", 1, 0)]


def test_partial_sums_onto_a_nest_reduce_scatter_outer_mesh_axis_first():
    text = ("mesh g = [[0, 1], [2, 3]]\nfunc main(x: f32[6@(DIDx,DIDy), 7]) {\n"
            "  t: f32[7@(DIDy,DIDx)] = sum(x, dims=[0])\n  return t\n}\n")
    steps = lower(refir.verify(refir.parse(text))).steps
    assert steps[0].type.partial == ("DIDy", "DIDx")  # mesh order, whatever the nest's
    assert [s.op for s in steps[1:]] == [ops.ReduceScatter("sum", "DIDy", 0), ops.ReduceScatter("sum", "DIDx", 0)]


@pytest.mark.parametrize("name", NESTED)
def test_nested_corpus_agrees_on_every_backend(name):
    assert_cases_pass(cases_of(CORPUS / name), context=name)


def test_strided_inputs_on_a_nest():
    """Inputs with gaps and negative strides reach spmd and gpu; the blocks are exact."""
    text = (CORPUS / "nested_2d_uneven.rir").read_text()
    g = np.random.default_rng(1)
    x = np.arange(30, dtype=np.float32).reshape(10, 3)[::-2]  # 5 rows, stride -24
    r = np.asfortranarray(g.integers(-4, 4, (5, 3)).astype(np.float32))
    for backend in ("spmd", "gpu"):
        got = refir.run(text, {"x": x, "r": r}, backend=backend)
        assert all(np.array_equal(got.outputs[k], x) for k in "awcv")
        assert np.array_equal(got.outputs["s"], x + r)


@pytest.mark.parametrize("n, name, backend", [(4, "nested_2d_uneven.rir", "spmd"), (4, "nested_2d_uneven.rir", "gpu"),
                                              (4, "nested_partial.rir", "gpu"), (8, "nested_3d.rir", "spmd")])
def test_nested_corpus_under_mpiexec(n, name, backend):
    """One rank per process: the MPI transport (spmd) and the gpu backend's rank transport."""
    job = run_mpi(n, ["-m", "refir", "run", str(CORPUS / name), "--backend", backend], timeout=300)
    assert job.returncode == 0, job.stderr[-2000:]
    assert "expect lines hold" in job.stdout


def test_explain_prints_the_rule_for_a_nest(capsys):
    assert refir.cli.main(["explain", str(CORPUS / "nested_2d_uneven.rir"), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    rules = [s["communication"]["rule"] for s in facts["steps"] if s["communication"]]
    assert "allgather; nested (DIDy,DIDx) -> DIDy: over its innermost DIDx, in each block of the rest" \
        in rules[0]
    text = explain_redistribute(parse_mesh("2x2"), (5, 3), (Shard(0), Shard(0)), (Replicate(), Shard(0)))
    assert "nested (DIDy,DIDx) -> DIDy: over its innermost DIDx" in text
    assert "keep_block: local, nothing moves (the fallback" in text
    assert "every device's block equals the DTensor block of the value: yes" in text

