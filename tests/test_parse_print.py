"""The text format: parsing into the IR, printing back, and syntax errors."""

import pytest
from helpers import EXAMPLES, example_params, needs_shared
from hypothesis import given
from hypothesis import strategies as st

import refir
from refir.errors import InputError, ParseError
from refir.ir import ops
from refir.ir.program import Eqn, Expect, Func, Lit, Param, Program, Sym, Var
from refir.ir.types import BROADCAST, Axis, Mesh, TensorType
from refir.text.printer import format_mesh, print_program

SMALL = """\
mesh g = [[3, 1], [0, 2]]

func main(x: f16[N@DIDy, 4@DIDx, b] on g layout[2, 0, 1]) {
  y = add(x, -1.5)
  z: f16[N@DIDy, 4@DIDx, b] on g = mul(2, y)
  n = add(z, N)
  c: i8[N, 4, b] on g layout[1, 2, 0] = cast(set(n), dtype=i8)
  return c
}
# expect: c = x
"""


@needs_shared
def test_examples_exist():
    assert {p.name for p in EXAMPLES} >= {
        "allreduce_then_bias.rir", "collectives.rir", "global_extent.rir", "layouts.rir", "mesh_2d.rir",
        "scatter_after_permute.rir", "two_meshes.rir",
    }


@pytest.mark.parametrize("path", example_params())
def test_example_round_trips(path):
    program = refir.load(path)
    assert program.file == str(path)
    text = print_program(program)
    again = refir.parse(text)
    assert again == program
    assert print_program(again) == text
    assert [e.name for e in again.expects] == [e.name for e in program.expects] != []


def test_parse_builds_the_ir():
    text = SMALL.replace("cast(set(n), dtype=i8)", "cast(n, dtype=i8)")
    p = refir.parse(text, "small.rir")
    g = Mesh("g", (2, 2), (3, 1, 0, 2))
    xt = TensorType("f16", (Axis("N", "DIDy"), Axis(4, "DIDx"), BROADCAST), g, (2, 0, 1))
    assert p.meshes == (g,)
    assert p.funcs == (Func(
        "main",
        (Param("x", xt),),
        (
            Eqn("y", None, ops.Binary("add"), (Var("x"), Lit(-1.5))),
            Eqn("z", TensorType("f16", xt.axes, g), ops.Binary("mul"), (Lit(2), Var("y"))),
            Eqn("n", None, ops.Binary("add"), (Var("z"), Sym("N"))),
            Eqn("c", TensorType("i8", (Axis("N"), Axis(4), BROADCAST), g, (1, 2, 0)), ops.Cast("i8"),
                (Var("n"),)),
        ),
        ("c",),
    ),)
    assert p.expects == (Expect("c", "x"),)
    # locations point at the text
    eqn = p.funcs[0].eqns[2]
    assert (eqn.loc.line, eqn.loc.col) == (6, 3)
    assert (eqn.args[1].loc.line, eqn.args[1].loc.col) == (6, 14)
    assert str(p.funcs[0].params[0].loc) == "small.rir:3:11"


def test_nested_call_is_a_syntax_error():
    with pytest.raises(ParseError) as info:
        refir.parse(SMALL, "small.rir")
    assert str(info.value.loc) == "small.rir:7:49"
    assert info.value.message == "expected ')', found '('"


def test_print_program_exact_text():
    text = SMALL.replace("cast(set(n), dtype=i8)", "cast(n, dtype=i8)")
    assert print_program(refir.parse(text)) == """\
mesh g = [[3, 1], [0, 2]]

func main(x: f16[N@DIDy, 4@DIDx, b] on g layout[2, 0, 1]) {
  y = add(x, -1.5)
  z: f16[N@DIDy, 4@DIDx, b] on g = mul(2, y)
  n = add(z, N)
  c: i8[N, 4, b] on g layout[1, 2, 0] = cast(n, dtype=i8)
  return c
}
# expect: c = x
"""


def test_print_writes_on_mesh_and_every_op_form():
    text = """\
mesh m = [0, 1]
func main(x: f32[4, 2@DIDx]) {
  p = permute(x, [1, 0])
  u = unsqueeze(p, dims=[0, 2])
  r = max(x, dims=[0, 1])
  s: f32[4, 2] on m = set(x)
  return u, r, s
}
"""
    assert print_program(refir.parse(text)) == """\
mesh m = [0, 1]

func main(x: f32[4, 2@DIDx] on m) {
  p = permute(x, [1, 0])
  u = unsqueeze(p, dims=[0, 2])
  r = max(x, dims=[0, 1])
  s: f32[4, 2] on m = set(x)
  return u, r, s
}
"""


def test_format_mesh_3d():
    assert format_mesh(Mesh("c", (2, 1, 2), (0, 1, 2, 3))) == "mesh c = [[[0, 1]], [[2, 3]]]"


def test_symbol_operand_only_where_a_parameter_binds_it():
    p = refir.parse("mesh m = [0]\nfunc main(x: f32[D]) {\n  y = add(x, D)\n  z = add(y, E)\n  return z\n}\n")
    y, z = p.funcs[0].eqns
    assert y.args == (Var("x"), Sym("D"))
    assert z.args == (Var("y"), Var("E"))  # not a symbol: verify reports it as undefined


def test_load_reads_files_and_text(tmp_path):
    path = tmp_path / "p.rir"
    path.write_text(SMALL.replace("cast(set(n), dtype=i8)", "cast(n, dtype=i8)"))
    assert refir.load(path) == refir.load(str(path)) == refir.load(path.read_text())
    with pytest.raises(InputError, match="cannot read .*missing.rir"):
        refir.load(str(tmp_path / "missing.rir"))
    other = tmp_path / "p.txt"  # any name of a file is read as one
    other.write_text(path.read_text())
    assert refir.load(str(other)) == refir.load(path)
    with pytest.raises(ParseError, match="there is no file '.*missing.txt'"):
        refir.load(str(tmp_path / "missing.txt"))


@pytest.mark.parametrize(
    "text, where, message",
    [
        ("mesh m = [0]\nfunc main(x: f32[4]) {\n  y = relu(x) $\n  return y\n}\n", "3:15",
         "unexpected character '$'"),
        ("mesh m = [0]\nfunc main(x: f32[4]) {\n  y = relu(x)\n", "3:14", "expected an equation result or "
         "'return', found end of file"),
        ("mesh m = [0]\nfunc main(x: f33[4]) {\n  return x\n}\n", "2:14",
         "unknown dtype 'f33' (known: bool, i8, i16, i32, i64, u8, f16, f32, f64, bf16)"),
        ("mesh m = [0]\nfunc main(x: f32[4@DIDw]) {\n  return x\n}\n", "2:20", "expected DIDx, DIDy or DIDz, "
         "found 'DIDw'"),
        ("mesh m = [0]\n", "1:13", "a program needs at least one 'func'"),
        ("mesh m = [0.5]\n", "1:11", "expected an integer, found '0.5'"),
        ("mesh m = [0]\nfunk main() {\n}\n", "2:1", "expected 'mesh' or 'func', found 'funk'"),
        ("mesh m = [0]\nfunc main(x: f32[4] layout[1.0]) {\n  return x\n}\n", "2:28",
         "expected an integer, found '1.0'"),
    ],
)
def test_parse_errors_point_at_the_text(text, where, message):
    with pytest.raises(ParseError) as info:
        refir.parse(text, "bad.rir")
    err = info.value
    assert str(err.loc) == f"bad.rir:{where}"
    assert err.message == message
    line, col = map(int, where.split(":"))
    source = text.split("\n")[line - 1]
    shown = [f"bad.rir:{where}", "    " + source, "    " + " " * (col - 1) + "^"] if source else [f"bad.rir:{where}"]
    assert str(err) == "\n".join([*shown, f"parse error: {message}"])


# ---- generated types round-trip -----------------------------------------------------------

MESHES = [Mesh("m", (4,), (2, 0, 3, 1)), Mesh("m", (2, 2), (0, 1, 2, 3)), Mesh("m", (1, 2, 2), (3, 2, 1, 0))]
DTYPE_NAMES = ["bool", "i8", "i16", "i32", "i64", "u8", "f16", "f32", "f64"]


@st.composite
def tensor_types(draw):
    mesh = draw(st.sampled_from(MESHES))
    rank = draw(st.integers(0, 4))
    dids = ["DIDx", "DIDy", "DIDz"][: mesh.ndim]
    shards = draw(st.lists(st.sampled_from([None, *dids]), min_size=rank, max_size=rank))
    axes = []
    for shard in shards:
        if shard is None and draw(st.booleans()):
            axes.append(BROADCAST)
            continue
        extent = draw(st.one_of(st.integers(0, 64), st.sampled_from(["N", "M", "K2", "_d"])))
        axes.append(Axis(extent, shard))
    layout = draw(st.one_of(st.none(), st.permutations(list(range(rank))).map(tuple)))
    return TensorType(draw(st.sampled_from(DTYPE_NAMES)), tuple(axes), mesh, layout)


@given(tensor_types(), tensor_types())
def test_generated_types_round_trip(t1, t2):
    t2 = TensorType(t2.dtype, t2.axes, t1.mesh, t2.layout)
    func = Func("main", (Param("x", t1),), (Eqn("y", t2, ops.Set(), (Var("x"),)),), ("y",))
    program = Program((t1.mesh,), (func,))
    text = print_program(program)
    assert refir.parse(text) == program
    assert f"x: {t1}" in text and f"y: {t2} = set(x)" in text


@given(st.one_of(st.integers(-(2**40), 2**40), st.floats(allow_nan=False, allow_infinity=False, width=64)))
def test_literal_operands_round_trip(value):
    mesh = Mesh("m", (1,), (0,))
    t = TensorType("f64", (Axis(3),), mesh)
    func = Func("main", (Param("x", t),), (Eqn("y", None, ops.Binary("add"), (Var("x"), Lit(value))),), ("y",))
    program = Program((mesh,), (func,))
    again = refir.parse(print_program(program))
    assert again == program
    (lit,) = [a for a in again.funcs[0].eqns[0].args if isinstance(a, Lit)]
    assert type(lit.value) is type(value) and lit.value == value
