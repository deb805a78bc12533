"""reshape with numpy's -1 (docs/spec.md §5.10, reshape_c5, reshape_c6, reshape_c8): the verifier
infers the extent from the types (an integer, a symbol, or an extent expression
such as E/h, B*S, 4*S/T, divided exactly at binding: type_c9), lowering and every
backend get the shape with it filled in, and global, spmd, gpu (simulated) and one
MPI job agree with numpy's reshape, on sharded and uneven operands, strided inputs
and declared layouts; the builder and the printer keep the -1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import BACKENDS, assert_cases_pass, assert_runs_as, run_mpi

import refir
from refir.cli import main
from refir.errors import InputError
from refir.frontends.builder import Builder
from refir.ir import ops
from refir.ir.extents import ExtentExpr
from refir.lowering.lower import lower

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    # heads out of a hidden axis, the head count inferred: [S, 32@DIDx] -> [S, -1, 8] is [S, 4@DIDx, 8]
    "heads": ("mesh m = [0, 1, 2, 3]", "x: f32[S, 32@DIDx]", "y = reshape(x, [S, -1, 8])", {"S": 3},
              "f32[S, 4@DIDx, 8] on m", (3, 4, 8)),
    # the symbol inferred, an uneven sharded outer axis (5 over 3: 2, 2, 1) kept whole rows
    "symbol": ("mesh m = [2, 0, 1]", "x: i32[S@DIDx, 6]", "y = reshape(x, [-1, 2, 3])", {"S": 5},
               "i32[S@DIDx, 2, 3] on m", (5, 2, 3)),
    # a merge of a sharded outer axis into a -1, a declared column-major result
    "merge": ("mesh m = [0, 1, 2, 3]", "x: f16[4@DIDx, 2, 3]", "y: f16[24@DIDx] on m = reshape(x, [-1])", {},
              "f16[24@DIDx] on m", (24,)),
    "layout": ("mesh m = [1, 0]", "x: f64[6, 4]", "y: f64[3, 8] on m layout[1, 0] = reshape(x, [3, -1])", {},
               "f64[3, 8] on m layout[1, 0]", (3, 8)),
    # the inferred extent an expression: h heads out of a symbolic hidden axis, one head a device
    "heads_expr": ("mesh m = [0, 1, 2, 3]", "x: f32[B, S, E@DIDx], w: f32[h]", "y = reshape(x, [B, S, h, -1])",
                   {"B": 2, "S": 3, "E": 8, "h": 4}, "f32[B, S, h@DIDx, E/h] on m", (2, 3, 4, 2)),
    # B and S merged into B*S, B sharded and kept whole rows (4 over 4), a declared column-major result
    "merge_expr": ("mesh m = [0, 1, 2, 3]", "x: f64[B@DIDx, S, E]",
                   "y: f64[B*S@DIDx, E] on m layout[1, 0] = reshape(x, [-1, E])", {"B": 4, "S": 3, "E": 5},
                   "f64[B*S@DIDx, E] on m layout[1, 0]", (12, 5)),
    # uneven: 9 over 4 is 3, 3, 3, 0 columns, 3 heads of F/3 = 3 are 1, 1, 1, 0 heads
    "uneven_expr": ("mesh m = [0, 1, 2, 3]", "x: i32[S, F@DIDx]", "y = reshape(x, [S, 3, -1])", {"S": 2, "F": 9},
                    "i32[S, 3@DIDx, F/3] on m", (2, 3, 3)),
    # a symbolic divisor: [S, 4] -> [T, -1] is [T, 4*S/T]
    "divisor_expr": ("mesh m = [1, 0]", "x: i16[S, 4], t: i16[T]", "y = reshape(x, [T, -1])", {"S": 6, "T": 3},
                     "i16[T, 4*S/T] on m", (3, 8)),
}


def program(name: str) -> str:
    mesh, params, body, *_ = CASES[name]
    return f"{mesh}\nfunc main({params}) {{\n  {body}\n  return y\n}}\n"


def inputs(name: str) -> dict[str, np.ndarray]:
    checked = refir.verify(refir.parse(program(name)))
    out = {}
    for p in checked.func.params:
        shape = tuple(CASES[name][3].get(a.extent, a.extent) for a in p.type.axes)
        x = np.arange(np.prod(shape), dtype=p.type.np_dtype).reshape(shape)
        out[p.name] = np.ascontiguousarray(x[::-1])[::-1]  # negative strides: read in logical C order
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_verifier_infers_the_extent_and_hands_it_on(name):
    checked = refir.verify(refir.parse(program(name)))
    assert str(checked.types["y"]) == CASES[name][4]
    (e,) = checked.func.eqns
    assert -1 not in e.op.shape and e.op.shape == tuple(a.extent for a in checked.types["y"].axes)
    assert [ops.op_name(s.op) for s in lower(checked).steps if s.is_communication] == []  # local


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_backend_agrees_with_numpy(name, backend):
    xs = inputs(name)
    assert_runs_as(program(name), xs, xs["x"].reshape(CASES[name][5]), backend, CASES[name][3], world=4,
                   keep="all" if backend != "global" else None)


def test_builder_and_printer_keep_the_minus_one():
    b = Builder()
    m = b.mesh([0, 1], name="m")
    x = b.input("x", "f32", ["S", "8@DIDx"], mesh=m)
    y = x.reshape(["S", 2, -1])
    b.output(y)
    prog = b.build()
    text = refir.print_program(prog)
    assert "reshape(x, [S, 2, -1])" in text
    assert refir.parse(text) == prog
    assert str(refir.verify(prog).types[y.name]) == "f32[S, 2@DIDx, 4] on m"


def test_a_symbol_bound_to_zero_keeps_the_inferred_extent():
    text = "mesh m = [0]\nfunc main(x: f32[S, 8]) {\n  y = reshape(x, [S, -1])\n  return y\n}\n"
    for backend in BACKENDS:
        y = refir.run(text, {"x": np.zeros((0, 8), np.float32)}, backend=backend).outputs["y"]
        assert y.shape == (0, 8), backend


def test_under_mpiexec_every_rank_agrees(tmp_path):
    f = tmp_path / "heads.rir"
    f.write_text(program("heads") + "# expect: y = x.reshape(3, 4, 8)\n# bind: S=3\n")
    done = run_mpi(4, ["-m", "refir", "run", str(f)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all 1 expect lines hold" in done.stdout, done.stdout


def test_the_generator_writes_minus_one_and_those_programs_agree_on_every_backend():
    from conformance.explore import drawn
    from conformance.generate import generate
    from conformance.shrink import RandomDraw

    found = [i for i in range(60) if any(isinstance(e.op, ops.Reshape) and -1 in e.op.shape
                                         for e in generate(RandomDraw(0, i)).program.funcs[0].eqns)]
    assert found
    assert_cases_pass(drawn(0, found[0]), BACKENDS, context=found[0])


# ---- a -1 among symbolic extents: the exact expression -------------------------------------------

EXPR = ROOT / "conformance/corpus/reshape_inferred_expr.rir"


def test_the_inferred_expression_is_exact_and_the_text_keeps_the_minus_one(tmp_path, capsys):
    text = program("heads_expr")
    p = refir.parse(text)
    assert refir.print_program(p).count("reshape(x, [B, S, h, -1])") == 1 and refir.parse(refir.print_program(p)) == p
    checked = refir.verify(p)
    assert checked.func.eqns[0].op == ops.Reshape(("B", "S", "h", ExtentExpr(1, ("E",), "h")))
    assert [a.name for a in checked.func.eqns[0].args[1:]] == ["B", "S", "h", "E"]  # the expression's E too
    # what `check` prints (the -1 filled in) is a program that parses back to the same types
    f = tmp_path / "heads.rir"
    f.write_text(text)
    assert main(["check", str(f)]) == 0
    printed = capsys.readouterr().out.rsplit("\n", 2)[0]
    assert "reshape(x, [B, S, h, E/h])" in printed
    again = refir.verify(refir.parse(printed))
    assert again.types == checked.types and [e.op for e in again.func.eqns] == [e.op for e in checked.func.eqns]


def test_explain_says_what_the_minus_one_stood_for(tmp_path, capsys):
    assert main(["explain", str(EXPR), "--bind", "B=2", "S=3", "E=8", "h=4", "T=2"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "-1 (axis 3) is E/h: the operand's B*E*S elements over the other extents' B*S*h, divided exactly" in out
    assert "-1 (axis 0) is B*S: the operand's B*E*S elements over the other extents' E" in out
    assert "-1 (axis 1) is 4*S/T:" in out


def test_explain_json_says_what_the_minus_one_stood_for(capsys):
    import json
    assert main(["explain", str(EXPR), "--json", "--bind", "B=2", "S=3", "E=8", "h=4", "T=2"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    notes = {s["out"]: s["note"] for s in steps}
    assert notes["heads"].startswith("-1 (axis 3) is E/h: the operand's B*E*S elements over the other extents' B*S*h")
    assert notes["back"] == "-1 (axis 2) is E: the operand's B*E*S elements over the other extents' B*S"
    assert notes["rows"].startswith("-1 (axis 1) is 4*S/T:") and notes["act"] is None


@pytest.mark.parametrize("how", ["run", "check"])
def test_an_inferred_quotient_that_does_not_divide_is_a_one_line_input_error(how, tmp_path, capsys):
    text = program("divisor_expr")
    if how == "run":
        with pytest.raises(InputError) as e:
            refir.run(text, {"x": np.zeros((3, 4), np.int16), "t": np.zeros(5, np.int16)}, backend="spmd")
        message = str(e.value)
    else:
        f = tmp_path / "q.rir"
        f.write_text(text)
        assert main(["check", str(f), "--bind", "S=3", "T=5"]) == 2
        message = capsys.readouterr().err.strip()
    assert "\n" not in message
    assert message.endswith("q.rir:3:3: in y: with S=3, T=5, 4*S/T is no extent: 5 does not divide 12 [type_c9]"
                            if how == "check" else "in y: with S=3, T=5, 4*S/T is no extent: 5 does not divide 12 "
                            "[type_c9]"), message


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_runs_the_corpus_program_at_each_bind_line(backend):
    from refir.running.inputs import bind_lines, draw_inputs

    checked = refir.verify(refir.load(EXPR))
    for line, s in enumerate(bind_lines(EXPR.read_text(), str(EXPR))):
        xs = draw_inputs(checked, s, seed=line)
        got = refir.run(checked.program, xs, backend=backend, world=4).outputs
        x, u = xs["x"], xs["u"]
        want = {"heads": x.reshape(s["B"], s["S"], s["h"], s["E"] // s["h"]), "flat": x.reshape(-1, s["E"]),
                "back": np.maximum(x, 0), "rows": u.reshape(s["T"], 4 * s["S"] // s["T"])}
        for name, w in want.items():
            assert got[name].shape == w.shape and np.array_equal(got[name], w), (name, backend, s)


def test_the_corpus_program_under_mpiexec():
    done = run_mpi(4, ["-m", "refir", "run", str(EXPR), "--bind", "B=1", "S=6", "E=12", "h=4", "T=3"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all 4 expect lines hold" in done.stdout, done.stdout
