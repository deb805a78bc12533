"""nvFuser printouts with one axis split over several mesh axes (refir's nests,
docs/spec.md §3.2) and with device terms pending a reduction (refir's partial
values, §3.3): the refir text the importer writes, the collectives refir lowers
it to (nvFuser's), and runs on every backend against numpy. Device blocks are
checked against tables written out by hand from nvFuser's index arithmetic
(`y * ceilDiv(E, |DIDy|) + x * ceilDiv(ceilDiv(E, |DIDy|), |DIDx|) + i`, masked
past each split's extent)."""

from pathlib import Path

import numpy as np
import pytest
from test_nvfuser_import import agree_everywhere

import refir
from refir.cli import main
from refir.errors import ParseError
from refir.frontends.nvfuser import import_nvfuser
from refir.ir.types import axis_block
from refir.lowering.lower import lower

DATA = Path(__file__).parent / "data"
MESH = "(DeviceMesh{{0 1}{2 3}})"


def text_of(name: str) -> str:
    return (DATA / f"nvfuser_{name}.txt").read_text()


def typed(imported) -> dict[str, str]:
    func = imported.program.funcs[0]
    return {**{p.name: str(p.type) for p in func.params}, **{e.out: str(e.type) for e in func.eqns}}


def communications(program: refir.Program) -> list[tuple]:
    """(op, mesh axes) of every communication refir lowers the program to."""
    out = []
    for s in lower(refir.verify(program)).steps:
        if s.is_communication:
            axes = getattr(s.op, "mesh_axis", None) or tuple(getattr(s.op, "mesh_axes", ()))
            out.append((type(s.op).__name__, axes))
    return out


def blocks(program: refir.Program, name: str, extent: int) -> list[tuple[int, int]]:
    """Every device's rows of axis 0 of the parameter `name`, as refir slices it."""
    checked = refir.verify(program)
    t = checked.types[name]
    return [axis_block(t.mesh, t.axes[0], extent, d) for d in t.mesh.devices]


# ---- nests -----------------------------------------------------------------------------

def test_a_nest_printed_as_a_ceildiv_of_a_ceildiv_is_an_axis_over_didy_then_didx():
    imported = import_nvfuser(text_of("nest_fsdp_tp"), "fsdp.txt")
    types = typed(imported)
    assert types["T1"] == "f32[i3@(DIDy,DIDx), i1] on m"
    assert types["T4"] == "f32[i3@(DIDy,DIDx), i1] on m"
    assert types["T2"] == "f32[i3, i1] on m" and types["T3"] == "f32[i0, i3] on m"
    assert "T4: f32[i3@(DIDy,DIDx), i1] on m = neg(T1)" in imported.text
    assert any(n.startswith("T1, T4: the axis i3 is split by 2, 2 in turn") and "where 2 divides i3" in n
               for n in imported.notes)
    # the gather drops the innermost mesh axis first, as nvFuser's two Allgathers would
    assert communications(imported.program) == [("Allgather", "DIDx"), ("Allgather", "DIDy")]
    shards: dict = {}
    values = agree_everywhere(imported.program, bindings={"i0": 3, "i1": 4, "i3": 6}, shards=shards)
    x, w = values["in:T0"], values["in:T1"]
    np.testing.assert_allclose(values["T3"], x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-6)
    np.testing.assert_array_equal(values["T4"], -w)
    # 6 rows: DIDy blocks of 3, each cut 2, 1 over DIDx (nvFuser's ceilDiv(ceilDiv(6, 2), 2) = 2)
    rows = {0: (0, 2), 1: (2, 3), 2: (3, 5), 3: (5, 6)}
    for d, (a, b) in rows.items():
        np.testing.assert_array_equal(shards["T4"][d], -w[a:b], err_msg=f"device {d}")
    assert refir.load(imported.text) == imported.program


def test_a_static_nest_read_from_its_transforms_in_host_ir():
    imported = import_nvfuser(text_of("nest_host_ir_static"), "hostir.txt")
    assert imported.notes == []  # refir lowers each Communication to the Allgather nvFuser printed
    assert typed(imported) == {"T0": "f32[7@(DIDy,DIDx), 3] on m", "T1": "f32[7@DIDy, 3] on m",
                               "T2": "f32[7, 3] on m"}
    assert communications(imported.program) == [("Allgather", "DIDx"), ("Allgather", "DIDy")]
    # 7 rows: nvFuser's padded split gives DIDy blocks 0:4 and 4:7, each cut by 2 (ceilDiv(4, 2))
    assert blocks(imported.program, "T0", 7) == [(0, 2), (2, 4), (4, 6), (6, 7)]
    values = agree_everywhere(imported.program)
    np.testing.assert_array_equal(values["T2"], values["in:T0"])


def test_a_static_nest_without_its_transforms_is_refused_not_misread():
    text = text_of("nest_host_ir_static")
    bare = text[:text.index(f"T0_g_float[ ideviceIdx.y2{{2}}, ideviceIdx.x4{{2}}, iS5{{2}}, iS1{{3}} ] {MESH}\n")]
    with pytest.raises(ParseError) as e:
        import_nvfuser(bare, "bare.txt")
    assert e.value.loc.line == 8 and e.value.message.startswith("T1 = set(T0): 3 axes against 4 (T0's "
                                                                "ideviceIdx.y2{2}, ideviceIdx.x4{2}, iS5{2} may be one "
                                                                "axis split twice: a static nest is read from")


def test_a_nest_over_the_three_axes_of_a_3d_mesh():
    imported = import_nvfuser(text_of("nest_3d"), "3d.txt")
    types = typed(imported)
    assert types["T0"] == "f32[i0@(DIDz,DIDy,DIDx), i1] on m"
    assert types["T1"] == "f32[i0@(DIDz,DIDy,DIDx)] on m" and types["T2"] == "f32[i0@DIDz] on m"
    assert imported.program.meshes[0].shape == (2, 2, 2)
    assert any("where 2*2 divides i0" in n for n in imported.notes)
    assert communications(imported.program) == [("Allgather", "DIDx"), ("Allgather", "DIDy")]
    # 12 rows over 2x2x2: 6, 6 over DIDz; 3, 3 over DIDy; 2, 1 over DIDx
    assert blocks(imported.program, "T0", 12) == [(0, 2), (2, 3), (3, 5), (5, 6), (6, 8), (8, 9), (9, 11), (11, 12)]
    values = agree_everywhere(imported.program, bindings={"i0": 12, "i1": 3})
    np.testing.assert_allclose(values["T2"], values["in:T0"].astype(np.float64).sum(1), rtol=1e-6)


@pytest.mark.parametrize("domains, want", [
    # the device domains moved outermost (nvFuser's reorderParallelizedToFront), paired by IterDomain number
    ("ideviceIdx.y2{2}, ideviceIdx.x4{2}, iS0{3}, iS5{( ceilDiv(( ceilDiv(i1, 2) ), 2) )}",
     "f32[3, i1@(DIDy,DIDx)] on m"),
    # split over DIDx first, then DIDy: the order of the splits, not the mesh's
    ("iS0{3}, ideviceIdx.x2{2}, ideviceIdx.y4{2}, iS5{( ceilDiv(( ceilDiv(i1, 2) ), 2) )}",
     "f32[3, i1@(DIDx,DIDy)] on m"),
])
def test_a_nest_follows_the_order_of_its_splits(domains, want):
    text = (f"T0_g_float[ {domains} ] {MESH}\n"
            f"T1_g_float[ iS6{{3}}, iS7{{i1}} ] {MESH} = Set( T0_g_float[ {domains} ] {MESH} )")
    imported = import_nvfuser(text, "order.txt")
    assert str(imported.program.funcs[0].params[0].type) == want
    values = agree_everywhere(imported.program, bindings={"i1": 10})
    np.testing.assert_array_equal(values["T1"], values["in:T0"])


def one_set(domains: str) -> str:
    return (f"T0_g_float[ iS0{{8}}, iS1{{3}} ] {MESH}\n"
            f"T1_g_float[ {domains} ] {MESH} = Set( T0_g_float[ iS0{{8}}, iS1{{3}} ] {MESH} )")


@pytest.mark.parametrize("text, token, why", [
    (one_set("ideviceIdx.x3{2}, iS4{( ceilDiv(( ceilDiv(i0, 2) ), 2) )}, iS1{3}"), "iS4",
     "splits a split, and no device domain of extent 2 is printed before ideviceIdx.x3"),
    (one_set("ideviceIdx.x1{2}, ideviceIdx.x3{2}, iS4{( ceilDiv(( ceilDiv(i0, 2) ), 2) )}, iS1{3}"), "iS4",
     "one axis split twice over the same mesh axis"),
    (one_set("istreamIdx1{3}, ideviceIdx.x3{2}, iS4{( ceilDiv(( ceilDiv(i0, 3) ), 2) )}, iS1{3}"), "iS4",
     "a device split inside a stream split"),
    (one_set("iS2{2}, ideviceIdx.x4{2}, iS5{2}, iS1{3}") + "\n  Outer split: iS0{8} by factor 2 -> iS2{2}, iS3{4}"
     "\n  Outer split: iS3{4} by factor 2 -> ideviceIdx.x4{2}, iS5{2}\n", "ideviceIdx.x4",
     "outer part, iS2, is not a device domain"),
])
def test_nests_refir_cannot_hold_are_refused_at_their_token(text, token, why):
    with pytest.raises(ParseError) as e:
        import_nvfuser(text, "bad.txt")
    line = text.split("\n")[1]
    assert (e.value.loc.line, e.value.loc.col) == (2, line.index(token) + 1), str(e.value)
    assert why in e.value.message
    assert "\n" not in e.value.message


def test_an_uneven_nest_where_nvfusers_padded_split_cuts_other_blocks_is_refused():
    # 5 rows: nvFuser's DIDy block 3:5 is cut by ceilDiv(3, 2) = 2 (rows 3:5 and none), refir's by 1 (3:4, 4:5)
    text = text_of("nest_host_ir_static").replace("{7}", "{5}").replace("iS3{4}", "iS3{3}").replace("iS9{4}", "iS9{3}")
    with pytest.raises(ParseError) as e:
        import_nvfuser(text, "five.txt")
    assert ("nvFuser's outer splits of 5 by 2, 2 give the device at (1, 0) rows 3:5, refir's nest @(DIDy,DIDx) "
            "rows 3:4") in e.value.message
    assert e.value.loc.line == 6


# ---- partial values --------------------------------------------------------------------

def test_a_sharded_k_matmul_kept_partial_until_a_reduction_is_a_partial_value():
    imported = import_nvfuser(text_of("partial_matmul"), "mm.txt")
    assert "T2: f32[i0, i4] on m partial[sum@DIDx] = matmul(T0, T1)" in imported.text
    assert "T3: f32[i0, i4] on m = set(T2)" in imported.text
    assert typed(imported)["T1"] == "f32[i1@DIDx, i4] on m"
    assert communications(imported.program) == [("Allreduce", ("DIDx",))]
    values = agree_everywhere(imported.program, bindings={"i0": 3, "i1": 5, "i4": 4})  # K = 5: blocks of 3, 2
    x, w = (values[f"in:{n}"].astype(np.float64) for n in ("T0", "T1"))
    np.testing.assert_allclose(values["T3"], x @ w, rtol=1e-6)
    assert refir.load(imported.text) == imported.program


def test_a_max_kept_partial_then_reduced_onto_a_split_result_is_a_reduce_scatter():
    imported = import_nvfuser(text_of("partial_max_reduce_scatter"), "rs.txt")
    assert "T2: f32[i1] on m partial[max@DIDx] = max(T0, dims=[0])" in imported.text
    assert "T3: f32[i1@DIDx] on m = set(T2)" in imported.text
    assert communications(imported.program) == [("ReduceScatter", "DIDx")]
    values = agree_everywhere(imported.program, bindings={"i0": 5, "i1": 3})
    np.testing.assert_array_equal(values["T3"], values["in:T0"].max(0))


def test_partial_products_over_a_nested_k_are_allreduced_over_both_mesh_axes():
    imported = import_nvfuser(text_of("partial_nested_k"), "nk.txt")
    assert imported.notes == []  # refir lowers the Allreduce as nvFuser printed it
    types = typed(imported)
    assert types["T0"] == "f32[3, 8@(DIDy,DIDx)] on m" and types["T1"] == "f32[8@(DIDy,DIDx), 5] on m"
    assert types["T2"] == "f32[3, 5] on m partial[sum@DIDy,DIDx]" and types["T3"] == "f32[3, 5] on m"
    assert communications(imported.program) == [("Allreduce", ("DIDy", "DIDx"))]
    values = agree_everywhere(imported.program)
    x, w = (values[f"in:{n}"].astype(np.float64) for n in ("T0", "T1"))
    np.testing.assert_allclose(values["T3"], x @ w, rtol=1e-6)


def test_the_terms_an_allreduce_communication_reads_are_a_partial_value():
    imported = import_nvfuser(text_of("stream_row_parallel_3d"), "host.txt")
    assert "T3: f32[2, i1, 5] on m partial[sum@DIDx] = matmul(T4, T1_t)" in imported.text
    assert "T5: f32[2, i1, 5] on m = set(T3)" in imported.text
    assert communications(imported.program) == [("Allreduce", ("DIDx",))]


@pytest.mark.parametrize("name", ["row_parallel_linear_bf16", "reduce_scatter_then_allgather"])
def test_a_device_axis_reduced_in_its_own_expression_stays_a_reduced_value(name):
    imported = import_nvfuser(text_of(name), "x.txt")
    assert "partial" not in imported.text


def test_the_imported_partial_lowers_and_explains_as_allreduce(tmp_path, capsys):
    out = tmp_path / "mm.rir"
    assert main(["import-nvfuser", str(DATA / "nvfuser_partial_matmul.txt"), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["lower", str(out)]) == 0
    listing = capsys.readouterr().out
    assert "T2: f32[i0, i4] on m partial[sum@DIDx] = matmul(T0, T1)" in listing
    assert "T3: f32[i0, i4] on m = allreduce(T2, kind=sum, mesh_axes=[DIDx])" in listing
    assert main(["explain", str(out)]) == 0
    assert "allreduce" in capsys.readouterr().out


def test_terms_that_nothing_reduces_are_returned_as_a_partial_value():
    text = text_of("partial_matmul")
    text = text[:text.index("T3_g_float[iS7{i0}, iS8{i4}, rdeviceIdx.x16{2}] (DeviceMesh{0 1})\n   = reduction")]
    text = text.replace("Outputs:\n  T3_g_float[iS7{i0}, iS8{i4}, rdeviceIdx.x16{2}]",
                        "Outputs:\n  T2_l_float[iS4{i0}, iS5{i4}, ideviceIdx.x14{2}rf, rS15{( ceilDiv(i1, 2) )}rf]")
    imported = import_nvfuser(text + "} // %kernel_math\n", "terms.txt")
    assert imported.program.funcs[0].results == ("T2",)
    assert typed(imported)["T2"] == "f32[i0, i4] on m partial[sum@DIDx]"
    assert communications(imported.program) == []
    values = agree_everywhere(imported.program, bindings={"i1": 5})  # a partial result is returned folded
    x, w = (values[f"in:{n}"].astype(np.float64) for n in ("T0", "T1"))
    np.testing.assert_allclose(values["T2"], x @ w, rtol=1e-6)


PM = text_of("partial_matmul")
RELU = ("T4_g_float[iS17{i0}, iS18{i4}] (DeviceMesh{0 1})\n   = relu(T2_l_float[iS4{i0}, iS5{i4}, "
        "ideviceIdx.x14{2}rf, rS15{( ceilDiv(i1, 2) )}rf] (DeviceMesh{0 1}));\n")


@pytest.mark.parametrize("text, line, why", [
    (PM.replace("} // %kernel_math", RELU + "} // %kernel_math"), 20, "cannot map relu of T2, a partial value"),
    (PM.replace("op = add", "op = max"), 17, "reduces the device terms of T2 with max, but T2's definition "
     "(line 14) leaves sum terms"),
    (PM.replace("iS8{i4}, rdeviceIdx.x16{2}]", "rS8{i4}, rdeviceIdx.x16{2}]"), 18,
     "reduces the device terms of T2 and other axes at once"),
    (text_of("partial_linear_bias"), 6, "cannot map linear with a bias writing T2 as a partial value"),
])
def test_partials_the_importer_cannot_map_are_refused_in_one_line(text, line, why):
    with pytest.raises(ParseError) as e:
        import_nvfuser(text, "bad.txt")
    assert e.value.loc.line == line and why in e.value.message, str(e.value)
    assert "\n" not in e.value.message
