"""The verifier on inferred types, meshes and tensor types (mesh_c*, devices_c1,
type_c*, shard_c*).

Each negative test is named after its label (docs/spec.md) and asserts the
VerifyError's label and where it points: `file:line:col` and the caret under
that column (verify_helpers.rejects). tests/test_verify.py checks that every
label the code raises has its test in one of these files."""

import numpy as np
import pytest
from verify_helpers import FILE, prog, rejects

import refir
from interp.spmd import NumpyLocal, NumpyTransport, execute
from interp.transport import InProcess
from refir.checks.type_checks import check_type
from refir.errors import InputError, Loc, ParseError, RunError, VerifyError
from refir.ir.program import Func, Param, Program
from refir.ir.types import Axis, Mesh, TensorType, block, block_size
from refir.lowering.lower import lower
from refir.running.bindings import check_local_inputs

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


def test_type_c8():
    """A split factor is 2 or more (spec §3.4); one built in Python gives one >= 1 per mesh axis."""
    rejects(prog("x: f32[12@DIDx:1]", "return x"), "type_c8", 2, 26, "split factor 1")
    rejects(prog("x: f32[5@(DIDy:0,DIDx)]", "return x", mesh=MESH2), "type_c8", 2, 26, "split factor 0")
    with pytest.raises(VerifyError, match=r"\[type_c8\].*one integer >= 1 per mesh axis"):
        check_type(TensorType("f32", (Axis(5, ("DIDy", "DIDx"), split=(0, 2)),), Mesh("g", (2, 2), (0, 1, 2, 3))),
                   Loc(FILE, 1, 1))


def test_type_c9():
    rejects(prog("x: f32[6]", "y: f32[6/4, 4] = reshape(x, [6/4, 4])", "return y"), "type_c9", 3, 10, "6/4 is no")
    rejects(prog("x: f32[E]", "y: f32[-2*E] = reshape(x, [-2*E])", "return y"), "type_c9", 3, 10, "a negative factor")


def test_type_c10():
    rejects(prog("x: f32[E/4, 2]", "return x"), "type_c10", 2, 11, "is the expression E/4")
