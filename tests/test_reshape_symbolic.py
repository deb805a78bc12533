"""Extent expressions (docs/spec.md §3 type_c9, type_c10; §5.10 reshape_c7): a
symbolic hidden axis split into heads `[S, E@DIDx] -> [S, 4@DIDx, E/4]` and merged
back, one canonical spelling that prints and parses back exactly, exact division
at run time (a one-line InputError naming the symbols' values), counts proved
equal by the verifier, the symbols a segment needs, the builder, and every backend
(global, spmd, gpu simulated, one MPI job) on conformance/corpus/reshape_symbolic_heads.rir."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from helpers import run_mpi

import refir
from refir.cli import main
from refir.errors import InputError, ParseError, VerifyError
from refir.frontends.builder import Builder
from refir.ir.extents import ExtentExpr, Monomial, NotDivisible, evaluate, extent_expr
from refir.ir.types import Axis, block_slices, dense_strides, local_shape
from refir.lowering.lower import lower
from refir.running.inputs import bind_lines, draw_inputs

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "conformance/corpus/reshape_symbolic_heads.rir"
FILE = "heads.rir"


def prog(params: str, *body: str, mesh: str = "mesh m = [0, 1, 2, 3]") -> str:
    return f"{mesh}\nfunc main({params}) {{\n" + "".join(f"  {b}\n" for b in body) + "}\n"


SPLIT = prog("x: f32[S, E@DIDx]", "y = reshape(x, [S, 4, E/4])", "z = reshape(y, [S, E])", "return y, z")


# ---- one canonical spelling ------------------------------------------------------------------


@pytest.mark.parametrize("written, canonical", [
    ("E/4", "E/4"), ("S*E/4", "E*S/4"), ("6*E/4", "3*E/2"), ("E*2*S", "2*E*S"), ("h*D/h", "D"),
    ("2*3", "6"), ("E*1", "E"), ("8*E/4", "2*E"), ("12/h", "12/h"), ("E*E/h", "E*E/h"), ("0*E", "0"),
])
def test_an_expression_has_one_spelling_and_prints_back_exactly(written, canonical):
    text = prog("x: f32[E, S], w: f32[h], d: f32[D]", f"y = reshape(x, [{written}])", "return y")
    p = refir.parse(text, FILE)
    (e,) = p.funcs[0].eqns
    assert str(e.op.shape[0]) == canonical
    again = refir.print_program(p)
    assert f"reshape(x, [{canonical}])" in again
    assert refir.parse(again, FILE) == p and refir.print_program(refir.parse(again, FILE)) == again


def test_the_canonical_form_is_a_frozen_dataclass_compared_by_value():
    assert extent_expr(1, ["E"], 4) == ExtentExpr(1, ("E",), 4)
    assert extent_expr(6, ["S", "E"], 4) == ExtentExpr(3, ("E", "S"), 2)
    assert extent_expr(1, ["h", "D"], "h") == "D" and extent_expr(4, [], 2) == 2
    assert Axis(extent_expr(1, ["E"], "h"), "DIDx") == Axis(ExtentExpr(1, ("E",), "h"), "DIDx")
    with pytest.raises(AttributeError):
        ExtentExpr(1, ("E",), 4).coef = 2  # type: ignore[misc]
    assert str(refir.parse(prog("x: f32[S, E@DIDx]", "y: f32[S, 4@DIDx, E*1/4] = reshape(x, [S, 4, E/4])",
                                "return y")).funcs[0].eqns[0].type) == "f32[S, 4@DIDx, E/4] on m"


@pytest.mark.parametrize("extent, label, message", [
    ("E/h/2", None, "one divisor, written last"),
    ("E/h*2", None, "one divisor, written last"),
    ("6/4", "type_c9", "6/4 is no integer"),
    ("E/0", "type_c9", "divides nothing"),
    ("E*-1", "type_c9", "a negative factor"),
])
def test_what_is_no_expression_is_refused_where_it_stands(extent, label, message):
    text = prog("x: f32[E], w: f32[h]", f"y = reshape(x, [{extent}])", "return y")
    with pytest.raises(VerifyError if label else ParseError, match=message) as e:
        refir.parse(text, FILE)
    col = text.splitlines()[2].index(extent) + 1
    assert e.value.loc.line == 3 and (e.value.loc.col == col if label else e.value.loc.col > col)
    assert getattr(e.value, "label", None) == label


# ---- values, exactly ------------------------------------------------------------------------


def test_evaluation_divides_exactly_or_names_the_values():
    assert evaluate(extent_expr(1, ["E"], "h"), {"E": 12, "h": 4}) == 3
    assert evaluate(extent_expr(3, ["E", "S"], 2), {"E": 2, "S": 5}) == 15
    with pytest.raises(NotDivisible, match=r"^with E=10, h=4, E/h is no extent: 4 does not divide 10 \[type_c9\]$"):
        evaluate(extent_expr(1, ["E"], "h"), {"E": 10, "h": 4})
    with pytest.raises(NotDivisible, match=r"h=0 divides nothing"):
        evaluate(extent_expr(1, ["E"], "h"), {"E": 0, "h": 0})
    with pytest.raises(KeyError):  # a symbol not yet bound: the verifier's "not known yet"
        evaluate(extent_expr(1, ["E"], 4), {})


def test_monomials_prove_a_split_and_its_merge_equal():
    E, h, D = "E", "h", "D"
    assert Monomial.of([h, extent_expr(1, [E], h)]) == Monomial.of([E])
    assert Monomial.of([4, extent_expr(1, [E], 4)]) == Monomial.of([E])
    assert Monomial.of([extent_expr(4, [D], 1)]) == Monomial.of([4, D])
    assert Monomial.of([extent_expr(1, [E], 4)]).coef == Fraction(1, 4)
    assert Monomial.of([E]) != Monomial.of([h, extent_expr(1, [E], 4)])
    assert (Monomial.of([E, "S"]) / Monomial.of([4])).as_extent() == extent_expr(1, [E, "S"], 4)


@pytest.mark.parametrize("how", ["run", "cli"])
def test_a_binding_that_does_not_divide_is_a_one_line_input_error(how, tmp_path, capsys):
    if how == "run":
        x = np.zeros((3, 10), np.float32)
        with pytest.raises(InputError) as e:
            refir.run(refir.parse(SPLIT, FILE), {"x": x}, backend="spmd", world=4)
        message = str(e.value)
    else:
        path = tmp_path / FILE
        path.write_text(SPLIT)
        assert main(["run", str(path), "--bind", "S=3", "E=10"]) == 2
        message = capsys.readouterr().err.strip().removeprefix("error: ")
    assert "\n" not in message
    assert message.endswith(f"{FILE}:3:3: in y: with E=10, E/4 is no extent: 4 does not divide 10 [type_c9]")


def test_a_symbolic_divisor_names_both_values_and_check_refuses_what_run_refuses(tmp_path, capsys):
    text = prog("x: f32[S, E@DIDx], w: f32[h]", "y = reshape(x, [S, h, E/h])", "return y")
    path = tmp_path / FILE
    path.write_text(text)
    assert main(["check", str(path), "--bind", "S=2", "E=8", "h=3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "with E=8, h=3, E/h is no extent: 3 does not divide 8 [type_c9]" in err
    checked = refir.verify(refir.parse(text))
    assert str(checked.types["y"]) == "f32[S, h@DIDx, E/h] on m"
    x, w = np.arange(16, dtype=np.float32).reshape(2, 8), np.zeros(4, np.float32)
    for backend in ("global", "spmd", "gpu"):
        got = refir.run(text, {"x": x, "w": w}, backend=backend, world=4).outputs["y"]
        assert got.shape == (2, 4, 2) and np.array_equal(got, x.reshape(2, 4, 2)), backend
    with pytest.raises(InputError, match=r"bind E=8, S=2, h=2: .*do not split exactly \[reshape_c4\]"):
        refir.run(text, {"x": x, "w": np.zeros(2, np.float32)}, backend="spmd", world=4)


# ---- the verifier -----------------------------------------------------------------------------


def rejects(text: str, label: str, message: str) -> None:
    with pytest.raises(VerifyError, match=message) as e:
        refir.verify(refir.parse(text, FILE))
    assert e.value.label == label, e.value


def test_reshape_c7_counts_with_an_expression_are_proved_equal():
    rejects(prog("x: f32[S, E], w: f32[h]", "y = reshape(x, [S, h, E/4])", "return y"), "reshape_c7",
            r"\(E\*S elements\) into \[S, h, E/4\] \(E\*S\*h/4 elements\).*not")
    rejects(prog("x: f32[S, E], w: f32[T]", "y = reshape(x, [T, E/4])", "return y"), "reshape_c7",
            r"\(E\*T/4 elements\)")
    ok = refir.verify(refir.parse(prog("x: f32[S, E], w: f32[T]", "y = reshape(x, [S, T, E/T])", "return y")))
    assert str(ok.types["y"]) == "f32[S, T, E/T] on m"  # S*T*E/T is E*S: proved, not left to the bindings
    # the same symbols and another coefficient stays reshape_c2
    rejects(prog("x: f32[S, E]", "y = reshape(x, [S, 4, E/2])", "return y"), "reshape_c2", r"\(2\*E\*S elements\)")
    ok = refir.verify(refir.parse(prog("x: f32[S, 4@DIDx, D]", "y = reshape(x, [S, 4*D])", "return y")))
    assert str(ok.types["y"]) == "f32[S, 4*D@DIDx] on m"


def test_type_c10_a_parameter_and_an_iota_use_plain_extents():
    rejects(prog("x: f32[E/4, 2]", "return x"), "type_c10", "axis 0 of parameter x: f32.E/4, 2. on m is the "
            "expression E/4")
    rejects(prog("x: f32[E]", "i: i32[E/2] = iota(axis=0)", "return i"), "type_c10", "iota result i")
    b = Builder()
    b.mesh([0, 1])
    with pytest.raises(VerifyError, match=r"\[type_c10\]"):
        b.input("x", "f32", ["E/4"])


def test_reserved_words_name_no_symbol_inside_an_expression():
    rejects(prog("x: f32[S, E]", "y: f32[S, 2, E/DIDx] = reshape(x, [S, 2, E/2])", "return y"), "type_c6",
            "'DIDx' is reserved")
    with pytest.raises(VerifyError, match="'layout' is reserved") as e:
        refir.parse(prog("x: f32[E]", "y = reshape(x, [E/layout])", "return y"))
    assert e.value.label == "reshape_c1"


def test_a_declared_quotient_must_be_the_inferred_one():
    with pytest.raises(VerifyError) as e:
        refir.verify(refir.parse(prog("x: f32[S, E@DIDx]", "y: f32[S, 4@DIDx, E/2] = reshape(x, [S, 4, E/4])",
                                      "return y"), FILE))
    assert e.value.label.startswith("result_c") and "E/2" in str(e.value) and "E/4" in str(e.value)


# ---- lowering: a segment is handed what an expression needs (shard_c2) ------------------------


def test_every_symbol_of_an_expression_is_a_segment_extent():
    text = prog("x: f32[S, E], y: f32[T@DIDx]", "h = reshape(x, [S, 4, E/4])", "p = permute(h, [2, 0, 1])",
                "return p")
    low = lower(refir.verify(refir.parse(text)))
    (segment,) = low.segments
    assert segment.extents == ("E",)  # E stands in no buffer's extent: E/4 binds nothing
    got = refir.run(text, {"x": np.arange(24, dtype=np.float32).reshape(3, 8), "y": np.zeros(4, np.float32)},
                    backend="spmd", world=4).outputs["p"]
    assert np.array_equal(got, np.arange(24, dtype=np.float32).reshape(3, 4, 2).transpose(2, 0, 1))


def test_a_sharded_quotient_axis_is_cut_by_the_block_rule_and_gathered_by_its_value():
    low = lower(refir.verify(refir.load(CORPUS)))
    (gather,) = [s for s in low.steps if s.is_communication]
    assert str(low.types[gather.tensor_args()[0]]) == "i32[G/2@DIDx, 2] on m"
    assert [seg.extents for seg in low.segments if seg.kind == "communication"] == [("G",)]
    t = low.types["rows"]
    assert [local_shape(t, {"G": 14}, d) for d in range(4)] == [(2, 2), (2, 2), (2, 2), (1, 2)]
    assert [local_shape(t, {"G": 6}, d) for d in range(4)] == [(1, 2), (1, 2), (1, 2), (0, 2)]


# ---- the builder -----------------------------------------------------------------------------


def test_the_builder_makes_the_split_and_the_merge():
    b = Builder()
    b.mesh([0, 1, 2, 3])
    x = b.input("x", "f32", ["S", "E@DIDx"])
    v = b.input("v", "f32", ["S", "4@DIDx", "D"])
    heads = x.reshape(["S", 4, "E/4"])
    merged = v.reshape(["S", ExtentExpr(4, ("D",))])
    b.output(heads, merged)
    p = b.build()
    text = refir.print_program(p)
    assert "reshape(x, [S, 4, E/4])" in text and "reshape(v, [S, 4*D])" in text
    assert refir.parse(text) == p
    assert str(heads.type) == "f32[S, 4@DIDx, E/4] on m" and str(merged.type) == "f32[S, 4*D@DIDx] on m"
    with pytest.raises(InputError, match="bad extent 'E/0'"):
        x.reshape(["S", "E/0"])


# ---- every backend on the corpus program ------------------------------------------------------


def want(name: str, xs: dict[str, np.ndarray], s: dict[str, int]) -> np.ndarray:
    x, u, v, g = xs["x"], xs["u"], xs["v"], xs["g"]
    h = x.reshape(s["S"], 4, s["E"] // 4)
    return {"heads": h, "scores": np.einsum("shd,thd->hst", h, h), "back": np.maximum(x, 0),
            "three": u.reshape(s["S"], 3, s["F"] // 3), "flat": u, "merged": v.reshape(s["S"], 4 * s["D"]),
            "whole": 2 * g.reshape(s["G"] // 2, 2)}[name]


@pytest.mark.parametrize("backend", ["global", "spmd", "gpu"])
@pytest.mark.parametrize("line", [0, 1])
def test_every_backend_agrees_on_the_corpus_program_block_by_block(backend, line):
    checked = refir.verify(refir.load(CORPUS))
    bound = bind_lines(CORPUS.read_text(), str(CORPUS))[line]
    xs = draw_inputs(checked, bound, seed=line)
    got = refir.run(checked.program, xs, backend=backend, world=4, keep="all" if backend != "global" else None)
    for name in checked.func.results:
        w = want(name, xs, bound)
        assert got.outputs[name].dtype == w.dtype and np.array_equal(got.outputs[name], w), (name, backend)
        if backend == "global":
            continue
        t = got.lowered.types[name]
        for d, buf in got.shards[name].items():
            shape = local_shape(t, bound, d)
            assert tuple(buf.shape) == shape, (name, d)
            np.testing.assert_array_equal(np.asarray(buf), w[block_slices(t, d, w.shape)])
            if np.asarray(buf).size > 1:
                assert buf.strides == tuple(n * buf.itemsize for n in dense_strides(shape, t.order, 1)), (name, d)
    if backend != "global":  # uneven: F=6 over 4 leaves device 3 no head of three
        assert got.shards["three"][3].shape == (bound["S"], 0, bound["F"] // 3)


def test_under_mpiexec_every_rank_agrees():
    done = run_mpi(4, ["-m", "refir", "run", str(CORPUS), "--bind", "S=2", "E=12", "F=9", "D=3", "G=14"])
    assert done.returncode == 0, done.stderr
    assert "all 7 expect lines hold" in done.stdout


def test_conform_runs_the_corpus_file_at_each_bind_line(capsys):
    assert main(["conform", "--cases", "0", str(CORPUS)]) == 0
    assert "all backends agree" in capsys.readouterr().out
