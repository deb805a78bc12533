"""One negative test per spec constraint, named after its label (docs/spec.md).

Each asserts the VerifyError's label and where it points: `file:line:col` and the
caret under that column. Positive checks of inferred types come first.
"""

import re
from pathlib import Path

import numpy as np
import pytest

import refir
from interp.spmd import NumpyLocal, NumpyTransport, execute
from interp.transport import InProcess
from refir.checks.type_checks import check_type
from refir.errors import InputError, Loc, ParseError, RunError, VerifyError
from refir.ir import ops
from refir.ir.program import Eqn, Func, Param, Program, Sym, Var
from refir.ir.types import Axis, Mesh, TensorType, block, block_size
from refir.lowering.lower import lower
from refir.running.bindings import check_local_inputs

ROOT = Path(__file__).resolve().parent.parent
FILE = "prog.rir"


def rejects(text: str, label: str, line: int, col: int, message: str = "") -> VerifyError:
    """Parse and verify `text`; it must break `label` at line:col."""
    with pytest.raises(VerifyError) as info:
        refir.verify(refir.parse(text, FILE))
    err = info.value
    assert err.label == label, str(err)
    assert (err.loc.file, err.loc.line, err.loc.col) == (FILE, line, col), str(err)
    shown = str(err).split("\n")
    assert shown[0] == f"{FILE}:{line}:{col}"
    assert shown[1] == "    " + text.split("\n")[line - 1]
    assert shown[2] == "    " + " " * (col - 1) + "^"
    assert shown[3].startswith(f"verify error [{label}]: ")
    assert message in err.message, err.message
    return err


def prog(params: str, *body: str, mesh: str = "mesh m = [0, 1]") -> str:
    """`mesh` on line 1, `func main(params) {` on line 2, body from line 3 (col 3)."""
    lines = [mesh, f"func main({params}) {{", *(f"  {b}" for b in body), "}"]
    return "\n".join(lines) + "\n"


# ---- inferred types --------------------------------------------------------------------


def test_inferred_types_keep_mesh_and_sharding_and_are_row_major():
    text = prog(
        "x: f32[N@DIDx, 3] layout[1, 0], y: f32[b, 3]",
        "a = add(x, y)",
        "p = permute(x, [1, 0])",
        "u = unsqueeze(p, dims=[0, 3])",
        "r = sum(x, dims=[1])",
        "c = cast(x, dtype=i8)",
        "s = set(x)",
        "return a, p, u, r, c, s",
    )
    checked = refir.verify(refir.parse(text, FILE))
    got = {name: str(t) for name, t in checked.types.items()}
    assert got == {
        "x": "f32[N@DIDx, 3] on m layout[1, 0]",
        "y": "f32[b, 3] on m",
        "a": "f32[N@DIDx, 3] on m",
        "p": "f32[3, N@DIDx] on m",
        "u": "f32[b, 3, N@DIDx, b] on m",
        "r": "f32[N@DIDx] on m",
        "c": "i8[N@DIDx, 3] on m",
        "s": "f32[N@DIDx, 3] on m",
    }
    assert checked.symbols == {"N"}


def test_matmul_infers_batch_and_m_from_a_and_n_from_b():
    text = prog(
        "a: f32[B@DIDy, M, K], w: f32[B@DIDy, K, N@DIDx]",
        "z = matmul(a, w)",
        "return z",
        mesh="mesh m = [[0, 1], [2, 3]]",
    )
    checked = refir.verify(refir.parse(text, FILE))
    assert str(checked.types["z"]) == "f32[B@DIDy, M, N@DIDx] on m"


# ---- meshes ----------------------------------------------------------------------------


def test_mesh_c1():
    err = rejects("mesh m = [[0, 1], [2]]\nfunc main(x: f32[2]) {\n  return x\n}\n", "mesh_c1", 1, 10,
                  "not a rectangular array")
    assert "'m'" in err.message
    rejects("mesh m = [[[[0]]]]\nfunc main(x: f32[2]) {\n  return x\n}\n", "mesh_c1", 1, 10,
            "1- to 3-D")
    rejects("mesh m = []\nfunc main(x: f32[2]) {\n  return x\n}\n", "mesh_c1", 1, 10, "non-empty")


def test_mesh_c2():
    err = rejects("mesh m = [0, 1, 0]\nfunc main(x: f32[2]) {\n  return x\n}\n", "mesh_c2", 1, 10)
    assert "(offending: [0])" in err.message
    err = rejects("mesh m = [0, -2]\nfunc main(x: f32[2]) {\n  return x\n}\n", "mesh_c2", 1, 10)
    assert "(offending: [-2])" in err.message


def test_devices_c1(monkeypatch):
    """Device ids past REFIR_MAX_DEVICES (65,536) are refused at the id, for every
    command; so is a world past it, on the command line and in refir.run."""
    from refir.checks.limits import DEVICES

    assert DEVICES.default == 65536
    with pytest.raises(InputError) as info:
        refir.parse("mesh m = [0, 1, 65536]\nfunc main(x: f32[2]) {\n  return x\n}\n", FILE)
    assert str(info.value) == (f"{FILE}:1:17: device id 65536 needs a world of 65537 devices, over refir's limit of "
                               "65536 (raise it with REFIR_MAX_DEVICES=N) [devices_c1]")
    refir.parse("mesh m = [0, 1, 65535]\nfunc main(x: f32[2]) {\n  return x\n}\n", FILE)  # the last id allowed
    text = prog("x: f32[4@DIDx]", "y: f32[4] = set(x)", "return y")
    with pytest.raises(InputError, match=r"world= asks for 65537 devices, .*\[devices_c1\]"):
        refir.run(refir.parse(text), {"x": np.zeros(4, np.float32)}, world=65537)
    monkeypatch.setenv("REFIR_MAX_DEVICES", "2")  # the limit is read at each check
    with pytest.raises(InputError, match=r"prog.rir:1:14: device id 2 needs a world of 3 devices"):
        refir.parse("mesh m = [0, 2]\nfunc main(x: f32[2]) {\n  return x\n}\n", FILE)
    with pytest.raises(InputError, match=r"world= asks for 3 devices, over refir's limit of 2"):
        refir.run(refir.parse(text), {"x": np.zeros(4, np.float32)}, world=3)
    assert refir.run(refir.parse(text), {"x": np.arange(4, dtype=np.float32)}, world=2).outputs["y"].tolist() == \
        [0, 1, 2, 3]


def test_mesh_c3():
    rejects("mesh m = [0]\nmesh m = [1]\nfunc main(x: f32[2]) {\n  return x\n}\n", "mesh_c3", 2, 6,
            "mesh 'm' is declared twice")


def test_mesh_c2_for_a_program_built_in_python():
    mesh = Mesh("m", (2,), (3, 3))
    t = TensorType("f32", (Axis(2),), mesh)
    func = Func("main", (Param("x", t),), (), ("x",), Loc(FILE, 2, 1))
    with pytest.raises(VerifyError) as info:
        refir.verify(Program((mesh,), (func,)))
    assert info.value.label == "mesh_c2"
    assert str(info.value.loc) == f"{FILE}:2:1"


# ---- types -----------------------------------------------------------------------------


def test_type_c1():
    rejects(prog("x: f32[4] on q", "return x"), "type_c1", 2, 24, "no mesh named 'q'")
    text = "mesh a = [0]\nmesh c = [1]\nfunc main(x: f32[4]) {\n  return x\n}\n"
    rejects(text, "type_c1", 3, 14, "several meshes")
    rejects("func main(x: f32[4]) {\n  return x\n}\n", "type_c1", 1, 14, "no mesh is declared")


def test_type_c2():
    rejects(prog("x: f32[4@DIDy]", "return x"), "type_c2", 2, 11, "sharded on DIDy")


def test_type_c3():
    rejects(prog("x: f32[4@DIDx, 2@DIDx]", "return x"), "type_c3", 2, 11,
            "axes 0 and 1 are both sharded on DIDx")


MESH2 = "mesh g = [[0, 1], [2, 3]]"


def test_type_c7():
    """A nest names two or more mesh axes, each once (spec §3.2)."""
    rejects(prog("x: f32[5@(DIDy,DIDy)]", "return x", mesh=MESH2), "type_c7", 2, 20, "names DIDy twice")
    rejects(prog("x: f32[5@(DIDx)]", "return x", mesh=MESH2), "type_c7", 2, 20, "write @DIDx")
    with pytest.raises(VerifyError, match=r"\[type_c7\].*must name two or more"):  # one built, not parsed
        check_type(TensorType("f32", (Axis(5, ("DIDx", "DIDx")),), Mesh("g", (2, 2), (0, 1, 2, 3))), Loc(FILE, 1, 1))


def test_type_c8():
    """A split factor is 2 or more (spec §3.4); one built in Python gives one >= 1 per mesh axis."""
    rejects(prog("x: f32[12@DIDx:1]", "return x"), "type_c8", 2, 26, "split factor 1")
    rejects(prog("x: f32[5@(DIDy:0,DIDx)]", "return x", mesh=MESH2), "type_c8", 2, 26, "split factor 0")
    with pytest.raises(VerifyError, match=r"\[type_c8\].*one integer >= 1 per mesh axis"):
        check_type(TensorType("f32", (Axis(5, ("DIDy", "DIDx"), split=(0, 2)),), Mesh("g", (2, 2), (0, 1, 2, 3))),
                   Loc(FILE, 1, 1))


def test_interleave_c1():
    """An op needing one block per device refuses an interleaved axis, naming the set (spec §3.4)."""
    rejects(prog("x: f32[12@DIDx:2, 3]", "y = reshape(x, [36])", "return y"), "interleave_c1", 3, 3,
            "insert `set` of x to f32[12@DIDx, 3] on m (contiguous blocks) first")
    rejects(prog("x: f32[12@DIDx:2, 3]", "y = slice(x, axes=[0], starts=[1], stops=[5], steps=[1])", "return y"),
            "interleave_c1", 3, 3, "slice needs axis 0 of x as one block per device")
    rejects(prog("x: f32[4, 12@DIDx:2], w: f32[12@DIDx:2, 5]", "y = matmul(x, w)", "return y"),
            "interleave_c1", 3, 3, "matmul needs axis 1 of x")
    rejects(prog("x: f32[12, 3]", "y: i32[12@DIDx:2] = iota(axis=0)", "return y"), "interleave_c1", 3, 3,
            "declare it i32[12@DIDx] on m")
    refir.verify(refir.parse(prog("x: f32[12@DIDx:2, 3]", "y = slice(x, axes=[1], starts=[1], stops=[3], steps=[1])",
                                  "return y"), FILE))  # another axis's window is its own business


def test_type_c2_and_c3_on_a_nest():
    """Every mesh axis of a nest is the mesh's (type_c2), and shards one tensor axis only (type_c3)."""
    rejects(prog("x: f32[5@(DIDy,DIDz)]", "return x", mesh=MESH2), "type_c2", 2, 11, "sharded on DIDz")
    rejects(prog("x: f32[5@(DIDy,DIDx), 3@DIDx]", "return x", mesh=MESH2), "type_c3", 2, 11,
            "axes 0 and 1 are both sharded on DIDx")
    with pytest.raises(ParseError, match="expected DIDx, DIDy or DIDz, found 'DIDw'"):
        refir.parse(prog("x: f32[5@(DIDy,DIDw)]", "return x", mesh=MESH2))


def test_type_c4_is_retired_any_extent_may_be_sharded():
    for text in (prog("x: f32[3@DIDx]", "return x"), prog("x: f32[3]", "y: f32[3@DIDx] = set(x)", "return y")):
        refir.verify(refir.parse(text))


def test_shard_c1():
    """Block k of E over n is [min(k*c, E), min((k+1)*c, E)), c = ceil(E/n): torch.chunk's
    sizes (empty blocks filled in, as DTensor does) and nvFuser's ceilDiv split."""
    assert [block(5, 4, k) for k in range(4)] == [(0, 2), (2, 4), (4, 5), (5, 5)]
    assert [block_size(10, 4, k) for k in range(4)] == [3, 3, 3, 1]
    assert [block_size(6, 4, k) for k in range(4)] == [2, 2, 2, 0]  # np.array_split gives 2, 2, 1, 1
    assert [block_size(2, 4, k) for k in range(4)] == [1, 1, 0, 0]
    assert [block_size(8, 4, k) for k in range(4)] == [2, 2, 2, 2]
    text = "mesh m = [0, 1, 2, 3]\nfunc main(x: f32[5@DIDx, 3]) {\n  y: f32[5, 3] = set(x)\n  return y\n}\n"
    checked = refir.verify(refir.parse(text))
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    good = {"x": {d: x[slice(*block(5, 4, d))] for d in range(4)}}
    check_local_inputs(checked, good, {})
    for d, n in ((2, 2), (3, 1)):  # a padded block, or a block on a device that holds nothing
        bad = {"x": {**good["x"], d: np.zeros((n, 3), np.float32)}}
        with pytest.raises(InputError, match=rf"input 'x' on device {d} has local extent {n} on axis 0, .* needs "
                           rf"{block_size(5, 4, d)}, block {d} of 5 over 4 devices \[shard_c1\]"):
            check_local_inputs(checked, bad, {})


def test_shard_c2():
    """A segment is handed the global extents of its sharded axes: N=7 and N=8 give
    device 0 the same block of 2 rows."""
    text = ("mesh m = [0, 1, 2, 3]\nfunc main(x: f32[N@DIDx]) {\n  y: f32[N@DIDx] = add(x, N)\n"
            "  return y\n}\n")
    low = lower(refir.verify(refir.parse(text)))
    assert low.segments[0].extents == ("N",) and low.segments[0].scalars == ()
    x = {d: np.zeros(2 if d < 3 else 1, np.float32) for d in range(4)}
    got = execute(low, {"x": x}, {"N": 7}, NumpyLocal(low.types), NumpyTransport(InProcess(4)))
    assert [got["y"][d].tolist() for d in (0, 3)] == [[7.0, 7.0], [7.0]]
    with pytest.raises(RunError, match=r"segment 0 needs symbol N, a global extent or value, .* \[shard_c2\]"):
        execute(low, {"x": x}, {}, NumpyLocal(low.types), NumpyTransport(InProcess(4)))


def test_type_c5():
    rejects(prog("x: f32[4, 2] layout[0, 0]", "return x"), "type_c5", 2, 11,
            "layout [0, 0] is not a permutation of 0..1")
    rejects(prog("x: f32[4, 2]", "y: f32[4, 2] layout[1, 0, 2] = set(x)", "return y"), "type_c5", 3, 3)


def test_type_c6():
    rejects(prog("x: f32[-1]", "return x"), "type_c6", 2, 11, "negative extent -1")
    rejects(prog("x: f32[on]", "return x"), "type_c6", 2, 11, "'on' is reserved")
    rejects(prog("x: f32[DIDx]", "return x"), "type_c6", 2, 11, "'DIDx' is reserved")


# ---- functions -------------------------------------------------------------------------


def test_func_c1():
    rejects(prog("x: f32[4]", "y = relu(x)", "y = neg(x)", "return y"), "func_c1", 4, 3,
            "'y' is defined twice")
    rejects(prog("x: f32[4]", "b = relu(x)", "return b"), "func_c1", 3, 3, "'b' is reserved")
    rejects(prog("x: f32[N]", "N = relu(x)", "return N"), "func_c1", 3, 3, "'N' is already a symbol")
    rejects(prog("N: f32[N]", "return N"), "func_c1", 2, 11, "'N' is already a symbol")


def test_func_c2():
    rejects(prog("x: f32[4]", "y = add(x, z)", "z = relu(x)", "return y"), "func_c2", 3, 14,
            "'z' is not defined before this equation")


def test_func_c3():
    rejects(prog("x: f32[4]", "y: f32[Q] = relu(x)", "return y"), "func_c3", 3, 3,
            "symbol 'Q' is bound by no input")


def test_func_c3_symbol_operand_of_a_program_built_in_python():
    mesh = Mesh("m", (1,), (0,))
    t = TensorType("f32", (Axis(4),), mesh)
    eqn = Eqn("y", None, ops.Binary("add"), (Var("x"), Sym("Q", Loc(FILE, 3, 14))), Loc(FILE, 3, 3))
    func = Func("main", (Param("x", t),), (eqn,), ("y",))
    with pytest.raises(VerifyError) as info:
        refir.verify(Program((mesh,), (func,)))
    assert info.value.label == "func_c3"
    assert str(info.value.loc) == f"{FILE}:3:14"


def test_func_c4():
    rejects(prog("x: f32[4]", "y = relu(x)", "return y, w"), "func_c4", 4, 3, "result 'w' is not defined")
    rejects(prog("x: f32[4]", "y = relu(x)", "return y, y"), "func_c4", 4, 13, "'y' is returned twice")


def test_func_c5():
    text = "mesh m = [0]\nfunc f(x: f32[4]) {\n  return x\n}\nfunc f(x: f32[4]) {\n  return x\n}\n"
    rejects(text, "func_c5", 2, 1, "function 'f' is defined twice")


def test_op_c1():
    rejects(prog("x: f32[4]", "y = transpose(x)", "return y"), "op_c1", 3, 7, "unknown op 'transpose'")


def test_op_c2():
    rejects(prog("x: f32[4]", "y = add(x)", "return y"), "op_c2", 3, 7, "add takes 2 operands")
    rejects(prog("x: f32[4]", "y = sum(x)", "return y"), "op_c2", 3, 7, "sum needs dims=[...]")
    rejects(prog("x: f32[4]", "y = relu(x, dims=[0])", "return y"), "op_c2", 3, 7,
            "relu takes no argument 'dims'")
    rejects(prog("x: f32[4, 2]", "y = permute(x)", "return y"), "op_c2", 3, 7, "permute takes an operand")
    rejects(prog("x: f32[4, 2]", "y = matmul(x, 2)", "return y"), "op_c2", 3, 3,
            "matmul takes two tensor operands")
    rejects(prog("x: f32[4]", "y = sum(3, dims=[0])", "return y"), "op_c2", 3, 3, "sum needs a tensor operand")


# ---- ops -------------------------------------------------------------------------------


def test_elementwise_c1():
    rejects(prog("x: f32[4]", "y = add(1, 2)", "return y"), "elementwise_c1", 3, 3,
            "add needs at least one tensor operand")


def test_elementwise_c2():
    rejects(prog("x: f32[4], k: i32[4]", "y = add(x, k)", "return y"), "elementwise_c2", 3, 3,
            "operands differ in dtype: f32 and i32; use cast")


def test_elementwise_c3():
    rejects(prog("x: f32[4], k: f32[4, 1]", "y = add(x, k)", "return y"), "elementwise_c3", 3, 3,
            "operands differ in rank: 1 and 2")
    # a symbolic extent that happens to be 1 is not a broadcast axis
    rejects(prog("x: f32[N, 4], k: f32[M, 4]", "y = add(x, k)", "return y"), "elementwise_c3", 3, 3,
            "axis 0 has extents N and M; only b axes broadcast")


def test_elementwise_c4():
    text = "mesh m = [0, 1]\nmesh q = [2, 3]\nfunc main(x: f32[4] on m, k: f32[4] on q) {\n" \
           "  y = add(x, k)\n  return y\n}\n"
    rejects(text, "elementwise_c4", 4, 3, "operands live on meshes 'm' and 'q'")
    text = "mesh m = [0, 1]\nmesh q = [2, 3]\nfunc main(x: f32[4] on m) {\n" \
           "  y: f32[4] on q = relu(x)\n  return y\n}\n"
    rejects(text, "elementwise_c4", 4, 3, "the result is on mesh 'q'")


def test_elementwise_c5():
    rejects(prog("x: f32[4@DIDx, 4], k: f32[4@DIDy, 4]", "y = add(x, k)", "return y",
                 mesh="mesh g = [[0, 1], [2, 3]]"),
            "elementwise_c5", 3, 3, "axis 0 is sharded on DIDx and DIDy")
    rejects(prog("x: f32[4@DIDx]", "y: f32[4] = relu(x)", "return y"), "elementwise_c5", 3, 3,
            "an operand has axis 0 sharded on DIDx but the result has it replicated; reshard with set")


def test_elementwise_c6():
    rejects(prog("x: i32[4]", "y = div(x, x)", "return y"), "elementwise_c6", 3, 3,
            "div needs a float dtype, not i32")
    rejects(prog("x: i16[4]", "y = sqrt(x)", "return y"), "elementwise_c6", 3, 3)
    rejects(prog("x: bool[4]", "y = add(x, x)", "return y"), "elementwise_c6", 3, 3,
            "add is not defined on bool")


def test_elementwise_c7():
    rejects(prog("x: i32[4]", "y = mul(x, 0.5)", "return y"), "elementwise_c7", 3, 3,
            "the float literal 0.5 needs a float tensor, not i32")


def test_elementwise_c6_covers_the_mask_unary_ops():
    for name in ("tanh", "erf", "sigmoid", "rsqrt", "sin", "cos"):
        rejects(prog("x: i32[4]", f"y = {name}(x)", "return y"), "elementwise_c6", 3, 3,
                f"{name} needs a float dtype, not i32")


def test_comparisons_follow_the_elementwise_rules():
    rejects(prog("x: f32[4], y: f16[4]", "k = lt(x, y)", "return k"), "elementwise_c2", 3, 3)
    rejects(prog("x: i32[4]", "k = ge(x, 0.5)", "return k"), "elementwise_c7", 3, 3)
    rejects(prog("x: f32[4], y: f32[3]", "k = eq(x, y)", "return k"), "elementwise_c3", 3, 3)
    rejects(prog("x: f32[4]", "k: f32[4] = ne(x, 1)", "return k"), "result_c1", 3, 3,
            "declared dtype f32, but the op gives bool")


def test_where_c1():
    rejects(prog("c: i32[4], x: f32[4]", "y = where(c, x, x)", "return y"), "where_c1", 3, 3,
            "where's condition must be a bool tensor, not of dtype i32")
    rejects(prog("x: f32[4]", "y = where(1, x, x)", "return y"), "where_c1", 3, 3, "not a scalar")


def test_where_c2():
    rejects(prog("c: bool[4], x: f32[4], y: f64[4]", "z = where(c, x, y)", "return z"), "where_c2", 3, 3,
            "where's values differ in dtype: f32 and f64")
    rejects(prog("c: bool[4]", "z = where(c, 1.0, -inf)", "return z"), "where_c2", 3, 3)


def test_iota_c1():
    rejects(prog("x: f32[4]", "t = iota(axis=0)", "return t"), "iota_c1", 3, 3,
            "iota needs a declared result type")


def test_iota_c2():
    rejects(prog("x: f32[4]", "t: i32[4, 4] = iota(axis=2)", "return t"), "iota_c2", 3, 3,
            "axis=2 is not an axis of i32[4, 4] on m (0..1)")


def test_iota_c3():
    rejects(prog("x: f32[4]", "t: bool[4] = iota(axis=0)", "return t"), "iota_c3", 3, 3, "not bool")


def test_iota_takes_no_operands_and_an_integer_axis():
    rejects(prog("x: f32[4]", "t: i32[4] = iota(x, axis=0)", "return t"), "op_c2", 3, 15, "iota takes 0 operands")
    rejects(prog("x: f32[4]", "t: i32[4] = iota(axis=x)", "return t"), "op_c2", 3, 15, "axis= an integer")


def test_cast_c1():
    rejects(prog("x: f32[4]", "y = cast(x, dtype=f128)", "return y"), "cast_c1", 3, 7)
    rejects(prog("x: f32[4]", "y = cast(x)", "return y"), "cast_c1", 3, 7, "cast needs dtype=")


def test_permute_c1():
    rejects(prog("x: f32[4, 2, 3]", "y = permute(x, [0, 0, 1])", "return y"), "permute_c1", 3, 3,
            "[0, 0, 1] is not a permutation of 0..2")
    rejects(prog("x: f32[4, 2]", "y = permute(x, [1, 0, 2])", "return y"), "permute_c1", 3, 3)


def test_unsqueeze_c1():
    rejects(prog("x: f32[4]", "y = unsqueeze(x, dims=[2])", "return y"), "unsqueeze_c1", 3, 3,
            "dims [2] must be distinct positions in 0..1")
    rejects(prog("x: f32[4]", "y = unsqueeze(x, dims=[0, 0])", "return y"), "unsqueeze_c1", 3, 3)


def test_reduce_c1():
    rejects(prog("x: f32[4, 2]", "y = sum(x, dims=[2])", "return y"), "reduce_c1", 3, 3,
            "dims [2] must be distinct axes in 0..1")
    rejects(prog("x: f32[4, 2]", "y = max(x, dims=[1, 1])", "return y"), "reduce_c1", 3, 3)


def test_reduce_c2():
    rejects(prog("x: f32[4]", "y = band(x, dims=[0])", "return y"), "reduce_c2", 3, 3,
            "band needs an integer or bool dtype, not f32")
    rejects(prog("x: bool[4]", "y = sum(x, dims=[0])", "return y"), "reduce_c2", 3, 3,
            "sum is not defined on bool")


def test_expand_c1():
    rejects(prog("x: f32[b, 8]", "y = expand(x, 4)", "return y"), "expand_c1", 3, 3,
            "one extent per axis of its operand: 2, not 1")
    rejects(prog("x: f32[b, 8]", "y = expand(x, 2.5, 8)", "return y"), "expand_c1", 3, 3,
            "a non-negative integer or a symbol, not 2.5")
    rejects(prog("x: f32[b, 8]", "y = expand(x, -1, 8)", "return y"), "expand_c1", 3, 3,
            "not -1")


def test_expand_c2():
    rejects(prog("x: f32[b, 8]", "y = expand(x, 4, 9)", "return y"), "expand_c2", 3, 3,
            "axis 1 is 8, not b: it keeps its extent, it cannot become 9")
    rejects(prog("x: f32[N, b], w: f32[M]", "y = expand(x, M, 3)", "return y"), "expand_c2", 3, 3,
            "axis 0 is N")


def test_expand_declared_sharding_only_on_expanded_axes():
    ok = refir.verify(refir.parse(prog("x: f32[b, 8]", "y: f32[6@DIDx, 8] = expand(x, 6, 8)", "return y")))
    assert str(ok.types["y"]) == "f32[6@DIDx, 8] on m"
    assert str(refir.verify(refir.parse(prog("x: f32[b, 8@DIDx]", "y = expand(x, 3, 8)", "return y")))
               .types["y"]) == "f32[3, 8@DIDx] on m"
    rejects(prog("x: f32[b, 8@DIDx]", "y: f32[3, 8] = expand(x, 3, 8)", "return y"), "result_c2", 3, 3)


def test_matmul_c1():
    rejects(prog("x: f32[], w: f32[4]", "y = matmul(x, w)", "return y"), "matmul_c1", 3, 3,
            "rank of at least 1, not 0 and 1")
    rejects(prog("x: f32[4, 2], w: f16[2, 3]", "y = matmul(x, w)", "return y"), "matmul_c1", 3, 3,
            "(f32 on m, f16 on m)")
    rejects(prog("x: bool[4, 2], w: bool[2, 3]", "y = matmul(x, w)", "return y"), "matmul_c1", 3, 3)


def test_matmul_c2():
    rejects(prog("x: f32[4, 2], w: f32[3, 5]", "y = matmul(x, w)", "return y"), "matmul_c2", 3, 3,
            "contracted extents differ: 2 and 3")
    rejects(prog("x: f32[6, 4, 2], w: f32[7, 2, 5]", "y = matmul(x, w)", "return y"), "matmul_c2", 3, 3,
            "batch axis 0 differs: 6 and 7")
    # batch axes broadcast from the right; where both have one, extent and sharding agree
    rejects(prog("x: f32[6@DIDx, 4, 2], w: f32[3, 6, 2, 5]", "y = matmul(x, w)", "return y"), "matmul_c2",
            3, 3, "batch axis 1 differs: 6@DIDx and 6")
    rejects(prog("x: f32[3], w: f32[6, 2, 5]", "y = matmul(x, w)", "return y"), "matmul_c2", 3, 3,
            "contracted extents differ: 3 and 2")


def test_matmul_c3():
    rejects(prog("x: f32[4, 2@DIDx], w: f32[2, 6]", "y = matmul(x, w)", "return y"), "matmul_c3", 3, 3,
            "the contracted axis is sharded on DIDx in one operand")
    rejects(prog("x: f32[4@DIDx, 2], w: f32[2, 6@DIDx]", "y = matmul(x, w)", "return y"), "matmul_c3", 3, 3,
            "M and N are both sharded on DIDx")
    rejects(prog("x: f32[b, 4@DIDx, 2], w: f32[3@DIDx, 2, 6]", "y = matmul(x, w)", "return y"), "matmul_c3",
            3, 3, "would have two axes sharded on one mesh axis")


def test_set_c1():
    rejects(prog("x: f32[4, 2]", "y: f32[2, 4] = set(x)", "return y"), "set_c1", 3, 3,
            "set keeps dtype and extents")
    rejects(prog("x: f32[4]", "y: f64[4] = set(x)", "return y"), "set_c1", 3, 3)


# ---- partial values (docs/spec.md §3.3) ------------------------------------------------

M22 = "mesh m = [[0, 1], [2, 3]]"
PX = "x: f32[4, 3] partial[sum@DIDx], y: f32[4, 3], z: f32[4, 3] partial[max@DIDx]"


def test_partial_types_parse_print_and_infer():
    text = prog(PX, "s = add(x, x)", "t = mul(s, y)", "u = div(t, 2.0)", "v = neg(z)", "w = maximum(z, y)",
                "q = permute(x, [1, 0])", "r: f32[4@DIDy, 3] = set(u)", "k = sum(x, dims=[1])",
                "return s, t, u, v, w, q, r, k", mesh=M22)
    checked = refir.verify(refir.parse(text, FILE))
    kinds = {n: (checked.types[n].partial_kind, checked.types[n].partial) for n in "stuvwqrk"}
    assert kinds == {"s": ("sum", ("DIDx",)), "t": ("sum", ("DIDx",)), "u": ("sum", ("DIDx",)),
                     "v": ("min", ("DIDx",)), "w": ("max", ("DIDx",)), "q": ("sum", ("DIDx",)), "r": ("", ()),
                     "k": ("sum", ("DIDx",))}
    assert str(checked.types["s"]) == "f32[4, 3] on m partial[sum@DIDx]"
    again = refir.parse(refir.print_program(refir.parse(text, FILE)), FILE)
    assert again.funcs[0].params[0].type == checked.types["x"]
    # written in any order, kept in mesh order (DIDz, DIDy, DIDx)
    t = refir.parse(prog("x: i32[4] partial[sum@DIDx,DIDy]", "return x", mesh=M22), FILE).funcs[0].params[0].type
    assert t.partial == ("DIDy", "DIDx")


def test_partial_c1():
    rejects(prog("x: f32[4] partial[mean@DIDx]", "return x", mesh=M22), "partial_c1", 2, 29, "unknown partial kind")
    rejects(prog("x: f32[4] partial[sum@DIDz]", "return x", mesh=M22), "partial_c1", 2, 11, "names DIDz")
    rejects(prog("x: f32[4] partial[sum@DIDx,DIDx]", "return x", mesh=M22), "partial_c1", 2, 38, "named twice")
    rejects(prog("x: f32[4@DIDx] partial[sum@DIDx]", "return x", mesh=M22), "partial_c1", 2, 11,
            "DIDx also shards axis 0")


def test_partial_c2():
    rejects(prog("x: bool[4] partial[sum@DIDx]", "return x", mesh=M22), "partial_c2", 2, 11, "max (any)")
    rejects(prog("x: i32[4] partial[avg@DIDx]", "return x", mesh=M22), "partial_c2", 2, 11,
            "avg is exact only for a float dtype")
    rejects(prog("x: f32[4] partial[avg@DIDx]", "return x", mesh="mesh m = [0, 1, 2]"), "partial_c2", 2, 11,
            "over a team of 3")


def test_partial_c3():
    hint = "insert `set` of x to f32[4, 3] on m (an allreduce of sum) first"
    for body, why in [("t: f32[4] = max(x, dims=[1])", "max does not commute with the pending sum"),
                      ("t = maximum(x, y)", "maximum of a sum-partial"),
                      ("t = add(x, y)", "adds that value once per device of the team"),
                      ("t = add(x, 1.0)", "adds that value once per device of the team"),
                      ("t = exp(x)", "exp is not linear"),
                      ("t = lt(x, y)", "a comparison of a partial"),
                      ("t = mul(x, x)", "mul of two sum-partials is not linear"),
                      ("t = div(y, x)", "div by a sum-partial")]:
        err = rejects(prog(PX, body, "return t", mesh=M22), "partial_c3", 3, 3, why)
        assert err.message.endswith(hint), err.message
    rejects(prog("x: f32[4, 6@DIDy] partial[sum@DIDx]", "t = sum(x, dims=[1])", "return t", mesh=M22),
            "partial_c3", 3, 3, "a reduction over a sharded axis of a partial")
    rejects(prog(PX, "p = permute(x, [1, 0])", "t = matmul(x, p)", "return t", mesh=M22), "partial_c3", 4, 3,
            "matmul of two sum-partials is not linear")
    rejects(prog("x: f32[4, 6@DIDy] partial[sum@DIDx], y: f32[6@DIDy, 2]", "t = matmul(x, y)", "return t", mesh=M22),
            "partial_c3", 3, 3, "a matmul whose contraction is sharded")
    err = rejects(prog(PX, "t = add(z, z)", "return t", mesh=M22), "partial_c3", 3, 3, "add of max-partials")
    assert "t = add(z, z) reads z: f32[4, 3] on m partial[max@DIDx]" in err.message
    rejects(prog(PX, "t = add(x, z)", "return t", mesh=M22), "partial_c3", 3, 3, "partial differently")
    rejects(prog("x: f32[4, 3] partial[avg@DIDx]", "t = sqrt(x)", "return t", mesh=M22), "partial_c3", 3, 3,
            "(an allreduce, then a division by the team size)")


def test_partial_c4():
    rejects(prog(PX, "t: f32[4, 3] = add(x, x)", "return t", mesh=M22), "partial_c4", 3, 3,
            "add gives a value partial[sum@DIDx], declared not partial")
    rejects(prog(PX, "t: f32[4, 3] partial[sum@DIDx] = add(y, y)", "return t", mesh=M22), "partial_c4", 3, 3,
            "make one with set")


def test_partial_c5():
    rejects(prog(PX, "t: f32[4, 3] partial[max@DIDx] = set(x)", "return t", mesh=M22), "partial_c5", 3, 3,
            "changes the pending reduction's kind")
    rejects(prog(PX, "t: f32[4, 3] partial[avg@DIDx] = set(y)", "return t", mesh=M22), "partial_c5", 3, 3,
            "no terms of an avg fold exactly")
    rejects(prog("x: f32[4, 3] partial[avg@DIDy,DIDx]", "t: f32[4, 3] partial[avg@DIDx] = set(x)", "return t",
                 mesh=M22), "partial_c5", 3, 3, "an avg reduces over all its axes or none")
    two = "mesh m = [[0, 1], [2, 3]]\nmesh n = [[4, 5], [6, 7]]"
    rejects(prog("y: f32[4, 3] on m", "t: f32[4, 3] on n partial[sum@DIDx] = set(y)", "return t", mesh=two),
            "partial_c5", 4, 3, "a partial target stays on its source's mesh")


def test_result_c1():
    rejects(prog("x: f32[4, 2]", "y: f64[4, 2] = relu(x)", "return y"), "result_c1", 3, 3,
            "declared dtype f64, but the op gives f32")
    rejects(prog("x: f32[4, 2]", "y: f32[2, 4] = permute(x, [0, 1])", "return y"), "result_c1", 3, 3,
            "declared extents [2, 4], but the op gives [4, 2]")
    rejects(prog("x: f32[4, 2]", "y: f32[4] = sum(x, dims=[0])", "return y"), "result_c1", 3, 3,
            "declared extents [4], but the op gives [2]")


def test_result_c2():
    rejects(prog("x: f32[4, 2]", "y: f32[2@DIDx, 4] = permute(x, [1, 0])", "return y"), "result_c2", 3, 3,
            "a resharding needs an explicit set")
    text = "mesh m = [0, 1]\nmesh q = [2]\nfunc main(x: f32[4] on m) {\n" \
           "  y: f16[4] on q = cast(x, dtype=f16)\n  return y\n}\n"
    rejects(text, "result_c2", 4, 3)


def test_memory_c1(monkeypatch):
    """A run's memory is summed over every device (tests/test_memory_limit.py has the rest):
    64 bytes replicated on four devices is 256, over a limit of 200."""
    import numpy as np

    import refir
    from refir.errors import InputError

    text = "mesh m = [0, 1, 2, 3]\nfunc main(x: f32[16@DIDx] on m) {\n  y: f32[16] on m = set(x)\n  return y\n}\n"
    monkeypatch.setenv("REFIR_MAX_RUN_BYTES", "200")
    with pytest.raises(InputError, match=r"memory_c1"):
        refir.run(refir.load(text), {"x": np.arange(16, dtype=np.float32)}, backend="spmd", world=4)
    monkeypatch.setenv("REFIR_MAX_RUN_BYTES", str(1 << 20))
    assert refir.run(refir.load(text), {"x": np.arange(16, dtype=np.float32)}, backend="spmd",
                     world=4).outputs["y"].tolist() == list(range(16))


# ---- windows: slice, select, pad, cat (spec §5.8) ------------------------------------------


def test_slice_c1():
    rejects(prog("x: f32[4, 6]", "y = slice(x, starts=[0, 1], stops=[4])", "return y"), "slice_c1", 3, 3,
            "one entry per sliced axis")
    rejects(prog("x: f32[4, 6]", "y = slice(x, starts=[0], stops=[4], axes=[2])", "return y"), "slice_c1", 3, 3,
            "distinct axes in 0..1")


def test_slice_c2():
    rejects(prog("x: f32[N, 6]", "y = slice(x, starts=[0], stops=[2])", "return y"), "slice_c2", 3, 3,
            "symbolic extent N")


def test_slice_c3():
    rejects(prog("x: f32[4, 6]", "y = slice(x, starts=[0, 2], stops=[4, 7])", "return y"), "slice_c3", 3, 3,
            "axis 1 of extent 6: 2:7:1")
    rejects(prog("x: f32[4, 6]", "y = slice(x, starts=[-1], stops=[4])", "return y"), "slice_c3", 3, 3)
    rejects(prog("x: f32[4, 6]", "y = slice(x, starts=[0], stops=[4], steps=[0])", "return y"), "slice_c3", 3, 3)


def test_select_c1():
    rejects(prog("x: f32[4, 6]", "y = select(x, axis=2, index=0)", "return y"), "select_c1", 3, 3,
            "axis 2 is not an axis")


def test_select_c2():
    rejects(prog("x: f32[4, 6]", "y = select(x, axis=1, index=6)", "return y"), "select_c2", 3, 3,
            "index 6 is outside axis 1 of extent 6")
    rejects(prog("x: f32[4, 6]", "y = select(x, axis=0, index=-1)", "return y"), "select_c2", 3, 3)


def test_select_c3():
    """Checked when the inputs bind N: an InputError at the equation, on every backend."""
    text = prog("x: f32[N, 6]", "y = select(x, axis=0, index=3)", "return y")
    with pytest.raises(InputError, match=r"prog.rir:3:3: in y: select index 3 is outside axis 0 of extent N=3 "
                       r"\[select_c3\]"):
        refir.run(refir.parse(text, FILE), {"x": np.zeros((3, 6), np.float32)}, backend="global")
    assert refir.run(refir.parse(text, FILE), {"x": np.arange(24, dtype=np.float32).reshape(4, 6)},
                     backend="global").outputs["y"].tolist() == [18, 19, 20, 21, 22, 23]


def test_pad_c1():
    rejects(prog("x: f32[4, 6]", "y = pad(x, low=[1], high=[0, 0])", "return y"), "pad_c1", 3, 3,
            "one width per axis (2)")
    rejects(prog("x: f32[4, 6]", "y = pad(x, low=[1, -1], high=[0, 0])", "return y"), "pad_c1", 3, 3, ">= 0")


def test_pad_c2():
    rejects(prog("x: f32[4, N]", "y = pad(x, low=[0, 1], high=[0, 0])", "return y"), "pad_c2", 3, 3,
            "pads axis 1, which is of symbolic extent N")


def test_pad_c3():
    rejects(prog("x: i8[4]", "y = pad(x, low=[1], high=[0], value=0.5)", "return y"), "pad_c3", 3, 3,
            "needs a float tensor")
    rejects(prog("x: i8[4]", "y = pad(x, low=[1], high=[0], value=128)", "return y"), "pad_c3", 3, 3,
            "outside i8's range -128..127")
    rejects(prog("x: bool[4]", "y = pad(x, low=[1], high=[0], value=2)", "return y"), "pad_c3", 3, 3)
    with pytest.raises(VerifyError, match=r"\[pad_c3\]: in y: the value 10000000000000000000\.\.\. is beyond"):
        refir.verify(refir.parse(prog("x: f16[4]", f"y = pad(x, low=[1], high=[0], value={10**400})", "return y")))


def test_cat_c1():
    rejects(prog("x: f32[4, 6]", "y = cat(x, x, axis=2)", "return y"), "cat_c1", 3, 3, "axis 2 is not an axis")


def test_cat_c2():
    rejects(prog("x: f32[4, 6], z: f32[4, 5]", "y = cat(x, z, axis=0)", "return y"), "cat_c2", 3, 3,
            "operand 1 has extent 5 on axis 1")
    rejects(prog("x: f32[4, 6], z: f16[4, 6]", "y = cat(x, z, axis=0)", "return y"), "cat_c2", 3, 3)
    text = "mesh m = [0, 1]\nmesh q = [2]\nfunc main(x: f32[4] on m, z: f32[4] on q) {\n" \
           "  y = cat(x, z, axis=0)\n  return y\n}\n"
    rejects(text, "cat_c2", 4, 3, "one dtype, rank and mesh")


def test_cat_c3():
    rejects(prog("x: f32[N, 6]", "y = cat(x, x, axis=0)", "return y"), "cat_c3", 3, 3, "symbolic extent N")


def test_cat_c4():
    rejects(prog("x: f32[4@DIDx, 6], z: f32[4, 6]", "y = cat(x, z, axis=1)", "return y"), "cat_c4", 3, 3,
            "reshard one with set")


def test_window_results_may_be_replicated_only_on_the_axes_they_change():
    ok = prog("x: f32[6@DIDx, 5]", "y: f32[3, 5] on m = slice(x, starts=[0], stops=[3])", "return y")
    assert str(refir.verify(refir.parse(ok, FILE)).types["y"]) == "f32[3, 5] on m"
    rejects(prog("x: f32[6, 5@DIDx]", "y: f32[3, 5] on m = slice(x, starts=[0], stops=[3])", "return y"),
            "result_c2", 3, 3, "only an axis the op changes may be declared replicated")


def test_reshape_c1():
    rejects(prog("x: f32[8]", "y = reshape(x, [-2, 2])", "return y"), "reshape_c1", 3, 3, "-2 is no extent")
    rejects(prog("x: f32[8]", "y = reshape(x, [b, 8])", "return y"), "reshape_c1", 3, 19, "'b' is reserved")


def test_reshape_c2():
    rejects(prog("x: f32[8]", "y = reshape(x, [3, 2])", "return y"), "reshape_c2", 3, 3, "(6 elements)")
    rejects(prog("x: f32[S, 4]", "y = reshape(x, [S, 3])", "return y"), "reshape_c2", 3, 3, "(3*S elements)")
    with pytest.raises(InputError, match=r"reshape of 12 elements into 15 \[reshape_c2\]"):  # symbolic: at run
        refir.run(prog("x: f32[E], w: f32[h, d]", "y = reshape(x, [h, d])", "return y"),
                  {"x": np.zeros(12, np.float32), "w": np.zeros((3, 5), np.float32)}, world=2)


def test_reshape_c3():
    rejects(prog("x: f32[4, 8@DIDx]", "y = reshape(x, [32])", "return y"), "reshape_c3", 3, 3,
            "set x to replicated on axis 1 first: `x_whole: f32[4, 8] on m = set(x)`")


def test_reshape_c4():
    rejects(prog("x: f32[10@DIDx]", "y = reshape(x, [5, 2])", "return y", mesh="mesh m = [0, 1, 2, 3]"),
            "reshape_c4", 3, 3, "the blocks do not split exactly")
    with pytest.raises(InputError, match=r"bind E=10.*do not split exactly \[reshape_c4\]"):
        refir.run(prog("x: f32[E@DIDx], w: f32[h, d]", "y = reshape(x, [h, d])", "return y"),
                  {"x": np.zeros(10, np.float32), "w": np.zeros((5, 2), np.float32)}, world=2)


def test_reshape_c5():
    rejects(prog("x: f32[8]", "y = reshape(x, [-1, -1])", "return y"), "reshape_c5", 3, 3, "at most one extent is -1")
    rejects(prog("x: f32[S, 4]", "y = reshape(x, [-1, 2, -1])", "return y"), "reshape_c5", 3, 3, "-1")


def test_reshape_c6():
    rejects(prog("x: f32[6]", "y = reshape(x, [4, -1])", "return y"), "reshape_c6", 3, 3,
            "the other extents (4 elements) do not divide the operand's 6")
    rejects(prog("x: f32[6]", "y = reshape(x, [0, -1])", "return y"), "reshape_c6", 3, 3, "(0 elements)")
    rejects(prog("x: f32[S, 4], w: f32[T]", "y = reshape(x, [T, -1])", "return y"), "reshape_c6", 3, 3, "do not divide")
    rejects(prog("x: f32[S, 4]", "y = reshape(x, [-1, 2])", "return y"), "reshape_c6", 3, 3,
            "-1 would be 2*S, which is no extent")
    rejects(prog("x: f32[S, T]", "y = reshape(x, [-1])", "return y"), "reshape_c6", 3, 3, "-1 would be S*T")
    checked = refir.verify(refir.parse(prog("x: f32[S@DIDx, 6]", "y = reshape(x, [S, 2, -1])", "return y"), FILE))
    assert str(checked.types["y"]) == "f32[S@DIDx, 2, 3] on m"
    assert checked.func.eqns[0].op == ops.Reshape(("S", 2, 3))  # what lowering and the backends are handed


# ---- every label has its test -----------------------------------------------------------


def test_every_label_the_code_raises_has_a_negative_test_here():
    sources = "".join(p.read_text() for p in sorted((ROOT / "refir").rglob("*.py")))
    labels = set(re.findall(r'"([a-z]+_c[0-9]+)"', sources))
    tests = set(re.findall(r"^def test_([a-z]+_c[0-9]+)\(", Path(__file__).read_text(), re.M))
    assert len(labels) >= 34
    assert labels <= tests, sorted(labels - tests)


def test_every_label_the_code_raises_is_in_the_spec():
    sources = "".join(p.read_text() for p in sorted((ROOT / "refir").rglob("*.py")))
    spec = (ROOT / "docs" / "spec.md").read_text()
    labels = set(re.findall(r'"([a-z]+_c[0-9]+)"', sources))
    assert {lab for lab in labels if f"**{lab}**" not in spec} == set()


# ---- extent expressions (spec §3: type_c9, type_c10; §5.10: reshape_c7) ----------------------
# (tests/test_reshape_symbolic.py holds their wider cases)

def test_type_c9():
    rejects(prog("x: f32[6]", "y: f32[6/4, 4] = reshape(x, [6/4, 4])", "return y"), "type_c9", 3, 10, "6/4 is no")
    rejects(prog("x: f32[E]", "y: f32[-2*E] = reshape(x, [-2*E])", "return y"), "type_c9", 3, 10, "a negative factor")


def test_type_c10():
    rejects(prog("x: f32[E/4, 2]", "return x"), "type_c10", 2, 11, "is the expression E/4")


def test_reshape_c7():
    rejects(prog("x: f32[S, E], w: f32[T]", "y = reshape(x, [T, E/4])", "return y"), "reshape_c7", 3, 3,
            "(E*T/4 elements)")
