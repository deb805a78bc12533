"""`refir import-nvfuser`: the seed threads' dumps and our own (tests/data), run on
every backend, the report's strides, and errors at the token that cannot be mapped."""

from pathlib import Path

import numpy as np
import pytest

import refir
from refir.cli import main
from refir.errors import InputError, ParseError
from refir.explain.lowered_listing import format_lowered
from refir.frontends.nvfuser import import_nvfuser
from refir.ir.types import has_layout
from refir.lowering.lower import lower
from refir.running.inputs import default_bindings, draw_inputs
from refir.text.printer import print_program

HERE = Path(__file__).parent
SEEDS = HERE.parent.parent / "shared" / "seeds"
SCATTER = SEEDS / "nvfuser-pr-fix-bug-in-scatter.txt"
ALLREDUCE = SEEDS / "nvfuser-issue-concretization-after-allreduce.txt"
DATA = HERE / "data"


def seed(path: Path) -> str:
    if not path.exists():
        pytest.skip(f"{path} is absent (the seed threads live in ../shared/seeds)")
    return path.read_text()


def agree_everywhere(program: refir.Program, seed_value: int = 1, bindings: dict[str, int] | None = None,
                     shards: dict | None = None) -> dict[str, np.ndarray]:
    """Run on global, spmd and gpu (the simulator): every backend gives the global
    values, and every device buffer has its type's layout. `bindings` fix symbols;
    `shards`, when given, receives spmd's device buffers of every result."""
    checked = refir.verify(program)
    inputs = draw_inputs(checked, {**default_bindings(checked), **(bindings or {})}, seed_value)
    want = refir.run(program, inputs, backend="global").outputs
    for backend in ("spmd", "gpu"):
        got = refir.run(program, inputs, backend=backend)
        if shards is not None and backend == "spmd":
            shards.update(got.shards)
        for name, value in want.items():
            np.testing.assert_array_equal(got.outputs[name], value, err_msg=f"{name} on {backend}")
            for d, buf in got.shards[name].items():
                assert has_layout(buf, checked.types[name].order), (name, backend, d, buf.strides)
    return {**want, **{f"in:{k}": v for k, v in inputs.items()}}


def test_seed_scatter_linked_matches_the_report():
    imported = import_nvfuser(seed(SCATTER), "scatter.txt", {"T5": "T4"})
    program = imported.program
    assert [p.name for p in program.funcs[0].params] == ["T0"]
    assert program.funcs[0].results == ("T3",)
    lowered = lower(refir.verify(program))
    listing = format_lowered(lowered)
    # The permuted output keeps its producer's order: strides [3, 12, 1], then the scatter from device 1.
    t4 = listing.index("T4: f32[4, 3, 3] on m0 layout[1, 0, 2] = permute(T1, [1, 0, 2])")
    assert listing.index("local [4, 3, 3] strides [3, 12, 1] on devices (1)", t4) > t4
    assert "T5: f32[4@DIDx, 3, 3] on m1 = scatter(T4, axis=0, root=1)" in listing
    values = agree_everywhere(program)
    x = values["in:T0"]
    np.testing.assert_array_equal(values["T3"], 2 * np.transpose(x.sum(3), (1, 0, 2)).transpose(1, 0, 2))
    # nvFuser's names are kept, and each equation is preceded by the statement it came from.
    assert "# line 49: T4_g[ iS15{4}, iS14{3}, iS16{3} ] (DeviceMesh{1, }) = Set.Permute(" in imported.text
    assert refir.load(imported.text) == program


def test_seed_scatter_unlinked_keeps_two_segments_apart():
    program = refir.from_nvfuser(seed(SCATTER))
    func = program.funcs[0]
    assert [p.name for p in func.params] == ["T0", "T5"]
    assert func.results == ("T4", "T3")
    assert str(func.params[1].type) == "f32[4@DIDx, 3, 3] on m1"


def test_seed_scatter_collapsed_onto_one_line_is_the_same_program():
    text = seed(SCATTER)
    one_line = " ".join(text.split())
    a = import_nvfuser(text, "x", {"T5": "T4"}).program
    b = import_nvfuser(one_line, "x", {"T5": "T4"}).program
    assert print_program(a) == print_program(b)


def test_seed_allreduce_then_bias():
    imported = import_nvfuser(seed(ALLREDUCE), "allreduce.txt")
    func = imported.program.funcs[0]
    assert [f"{p.name}: {p.type}" for p in func.params] == [
        "T3: f16[i0@DIDx, i3, i2] on m", "T1: f16[i0@DIDx, i2, i6] on m", "T2: f16[i6] on m"]
    assert func.results == ("T9",)
    # Every guess about the damaged paste is written down.
    assert any("taken as T4" in n for n in imported.notes)
    assert any("bullet" in n and "'+'" in n for n in imported.notes)
    lowered = lower(refir.verify(imported.program))
    assert [s.kind for s in lowered.segments] == ["compute", "communication", "compute"]
    assert lowered.segments[2].scalars == ()  # the bias add never needs i0
    values = agree_everywhere(imported.program)
    a, w, b = (values[f"in:{n}"].astype(np.float32) for n in ("T3", "T1", "T2"))
    np.testing.assert_array_equal(values["T9"], np.einsum("dmk,dkn->mn", a, w) + b)


def test_seed_allreduce_bullet_can_be_read_as_another_operator():
    program = import_nvfuser(seed(ALLREDUCE), "x", bullet="-").program
    assert program.funcs[0].eqns[-1].op.name == "sub"


def test_row_parallel_linear_in_bf16_with_two_segments():
    imported = import_nvfuser((DATA / "nvfuser_row_parallel_linear_bf16.txt").read_text(), "linear.txt")
    func = imported.program.funcs[0]
    assert [f"{p.name}: {p.type}" for p in func.params] == [
        "T0: bf16[i0, i2@DIDx] on m", "T1: bf16[i3, i2@DIDx] on m", "T5: bf16[i3] on m"]
    assert func.results == ("T8", "T10")
    lowered = lower(refir.verify(imported.program))
    comms = [type(s.op).__name__ for s in lowered.steps if s.is_communication]
    assert comms == ["Allreduce"]  # the row-parallel linear's partial sums
    values = agree_everywhere(imported.program)
    x, w, b = (values[f"in:{n}"].astype(np.float32) for n in ("T0", "T1", "T5"))
    np.testing.assert_array_equal(values["T8"].astype(np.float32), x @ w.T + b)
    np.testing.assert_array_equal(values["T10"], b)


def test_host_ir_on_a_2d_mesh_agrees_with_nvfusers_communications():
    imported = import_nvfuser((DATA / "nvfuser_host_ir_2d.txt").read_text(), "hostir.txt")
    assert imported.notes == []  # refir lowers each Communication to the type nvFuser printed
    func = imported.program.funcs[0]
    assert str(func.params[0].type) == "f32[4@DIDy, 6@DIDx] on m"
    assert imported.program.meshes[0].shape == (2, 2)
    values = agree_everywhere(imported.program)
    np.testing.assert_array_equal(values["T3"], values["in:T0"])
    np.testing.assert_array_equal(values["T4"], values["in:T0"].sum(0))


def test_reduction_over_a_device_axis_with_a_split_result_is_a_reduce_scatter():
    imported = import_nvfuser((DATA / "nvfuser_reduce_scatter_then_allgather.txt").read_text(), "rs.txt")
    func = imported.program.funcs[0]
    assert [str(e.type) for e in func.eqns] == [
        "f32[2@DIDx, 4, 6] on m", "f32[2@DIDx, 4, 6] on m", "f32[4, 6@DIDx] on m", "f32[4, 6] on m"]
    assert "T1: f32[2@DIDx, 4, 6] on m = mul(T0, 2.0)" in imported.text
    lowered = lower(refir.verify(imported.program))
    assert [type(s.op).__name__ for s in lowered.steps if s.is_communication] == ["ReduceScatter", "Allgather"]
    values = agree_everywhere(imported.program)
    np.testing.assert_array_equal(values["T3"], np.maximum(2 * values["in:T0"], 0).sum(0))


def test_an_operand_whose_operator_was_lost_is_an_error_at_it(tmp_path, capsys):
    # test_resize.cpp's printed comment lost a `*` at a line's start (a C++ comment's margin):
    # read as T3 = T1 the second operand would vanish without a word
    text = "T3_g_float[ iS4{4} ]\n   = T1_g_float[ iS0{4} ]\n   T2_g_float[ iS2{4} ];\n"
    with pytest.raises(ParseError) as e:
        import_nvfuser(text, "lost.txt")
    assert (e.value.loc.line, e.value.loc.col) == (3, 4)
    assert e.value.message.startswith("T2 follows T1 with no operator between them"), e.value.message
    assert import_nvfuser(text.replace("   T2", "   * T2"), "lost.txt").text.count("mul(T1, T2)") == 1
    # said which it was, it maps, with a note
    imported = import_nvfuser(text, "lost.txt", lost="-")
    assert "T3: f32[4] on m = sub(T1, T2)" in imported.text
    assert any("no operator between T1 and T2" in n and "read as '-'" in n for n in imported.notes)
    with pytest.raises(InputError, match=r"^lost='x': the operator a paste lost is one of \+ - \* /$"):
        import_nvfuser(text, "lost.txt", lost="x")
    dump = tmp_path / "lost.txt"
    dump.write_text(text)
    assert main(["import-nvfuser", str(dump), "--lost", "*"]) == 0
    assert "T3: f32[4] on m = mul(T1, T2)" in capsys.readouterr().out


def test_an_unsupported_op_is_an_error_at_its_token():
    with pytest.raises(ParseError) as e:
        import_nvfuser((DATA / "nvfuser_unsupported.txt").read_text(), "bad.txt")
    assert (e.value.loc.line, e.value.loc.col) == (5, 6)
    assert "'rand_like'" in e.value.message


@pytest.mark.parametrize("domains, token, why", [
    ("iblockIdx.x1{4}", "iblockIdx.x1", "parallel type 'blockIdx.x' (a scheduled kernel's loop domain"),
    ("iS1{( i0 + 2 )}", "+", "no extent expressions"),  # a product over a divisor maps (i1/4)
    ("iS1{( i0 / 2 / 2 )}", "/ 2 )", "one divisor, written last"),
    ("iS1{( ceilDiv(i0, 2) )}, ideviceIdx.x2{2}", "ideviceIdx.x2", "inner split"),
])
def test_unmappable_domains_are_errors_at_their_token(domains, token, why):
    text = f"T0_g[ iS0{{8}} ] (DeviceMesh{{0 1}})\nT1_g[ {domains} ] (DeviceMesh{{0 1}}) = Set( T0_g[ iS0{{8}} ] )"
    with pytest.raises(ParseError) as e:
        import_nvfuser(text, "bad.txt")
    line = text.split("\n")[1]
    assert (e.value.loc.line, e.value.loc.col) == (2, line.index(token) + 1), str(e.value)
    assert why in e.value.message


def test_link_to_an_unknown_tensorview_is_refused():
    # An option's mistake, not the dump's: named as the API spells it, at no line of the dump.
    with pytest.raises(InputError, match=r"^links=\{'T5': 'T7'\}: x has no TensorView T7 \(it has T0, "):
        import_nvfuser(seed(SCATTER), "x", {"T5": "T7"})


def test_the_cli_goes_from_a_dump_to_the_lowered_program(capsys, tmp_path):
    out = tmp_path / "prog.rir"
    assert main(["import-nvfuser", str(seed(SCATTER) and SCATTER), "--link", "T5=T4", "-o", str(out),
                 "--lower"]) == 0
    printed = capsys.readouterr().out
    assert "strides [3, 12, 1]" in printed and "scatter(T4, axis=0, root=1)" in printed
    assert refir.load(out).funcs[0].results == ("T3",)
    assert main(["import-nvfuser", str(DATA / "nvfuser_unsupported.txt")]) == 2
    assert "nvfuser_unsupported.txt:5:6" in capsys.readouterr().err
    assert main(["import-nvfuser", str(SCATTER), "--explain"]) == 2
    assert "give -o" in capsys.readouterr().err
    assert main(["import-nvfuser", str(SCATTER), "--link", "T5=T4", "-o", str(out), "--explain"]) == 0
    assert "why scatter:" in capsys.readouterr().out


def test_a_view_of_a_device_split_hidden_axis_is_a_local_reshape_into_heads():
    imported = import_nvfuser((DATA / "nvfuser_reshape_heads.txt").read_text(), "heads.txt")
    assert "T1: f32[3, 4@DIDx, 8] on m = reshape(T0, [3, 4, 8])" in imported.text
    assert "T3: f32[3, 32@DIDx] on m = reshape(T2, [3, 32])" in imported.text
    assert not [s for s in lower(refir.verify(imported.program)).steps if s.is_communication]
    values = agree_everywhere(imported.program)
    np.testing.assert_array_equal(values["T3"], np.maximum(values["in:T0"], 0))


def test_a_view_into_heads_of_a_symbolic_hidden_axis_is_a_reshape_to_its_quotient():
    """nvFuser prints the head axis of a view of symbolic i1 as `( i1 / 4 )`: refir's
    extent expression i1/4 (docs/spec.md §3), exact at run time (type_c9)."""
    imported = import_nvfuser((DATA / "nvfuser_reshape_symbolic_heads.txt").read_text(), "heads.txt")
    assert "T1: f32[i0, 4@DIDx, i1/4] on m = reshape(T0, [i0, 4, i1/4])" in imported.text
    assert "T2: f32[i0, 4@DIDx, i1/4] on m = relu(T1)" in imported.text
    assert "T3: f32[i0, i1@DIDx] on m = reshape(T2, [i0, i1])" in imported.text
    assert not [s for s in lower(refir.verify(imported.program)).steps if s.is_communication]
    values = agree_everywhere(imported.program)
    assert values["in:T0"].shape == (4, 4)  # the default bindings: i1 a multiple of 4
    np.testing.assert_array_equal(values["T3"], np.maximum(values["in:T0"], 0))
    with pytest.raises(ParseError, match="one divisor, written last"):
        import_nvfuser((DATA / "nvfuser_reshape_symbolic_heads.txt").read_text().replace(
            "iS6{( i1 / 4 )}rf", "iS6{( i1 / 4 / 2 )}rf"), "heads.txt")
