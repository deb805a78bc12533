"""The verifier on windows (slice, select, pad, cat: spec §5.8) and reshape.

Each negative test is named after its label (docs/spec.md) and asserts the
VerifyError's label and where it points: `file:line:col` and the caret under
that column (verify_helpers.rejects). tests/test_verify.py checks that every
label the code raises has its test in one of these files."""

import numpy as np
import pytest
from verify_helpers import FILE, prog, rejects

import refir
from refir.errors import InputError, VerifyError
from refir.ir import ops

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


def test_reshape_c8():
    rejects(prog("x: f32[S], u: f32[T, U]", "y = reshape(x, [T, U, -1])", "return y"), "reshape_c8", 3, 3,
            "-1 would be S/(T*U), which no extent expression writes")
    rejects(prog("x: f32[S], w: f32[T]", "y = reshape(x, [2, T, -1])", "return y"), "reshape_c8", 3, 3,
            "-1 would be S/(2*T)")
    rejects(prog("x: f32[S]", "y = reshape(x, [S, S, S, -1])", "return y"), "reshape_c8", 3, 3,
            r"-1 would be 1/(S*S)")


def test_reshape_c5():
    rejects(prog("x: f32[8]", "y = reshape(x, [-1, -1])", "return y"), "reshape_c5", 3, 3, "at most one extent is -1")
    rejects(prog("x: f32[S, 4]", "y = reshape(x, [-1, 2, -1])", "return y"), "reshape_c5", 3, 3, "-1")


def test_reshape_c6():
    rejects(prog("x: f32[6]", "y = reshape(x, [4, -1])", "return y"), "reshape_c6", 3, 3,
            "the other extents (4 elements) do not divide the operand's 6")
    rejects(prog("x: f32[6]", "y = reshape(x, [0, -1])", "return y"), "reshape_c6", 3, 3, "have 0 elements")
    rejects(prog("x: f32[S, 6], w: f32[T]", "y = reshape(x, [T, 0, -1])", "return y"), "reshape_c6", 3, 3,
            "have 0 elements")
    # a quotient with symbols is an expression, divided exactly once bound (type_c9)
    for shape, want in [("[T, -1]", "f32[T, 4*S/T] on m"), ("[-1, 2]", "f32[2*S, 2] on m"),
                        ("[-1]", "f32[4*S] on m"), ("[3, -1]", "f32[3, 4*S/3] on m")]:
        text = prog("x: f32[S, 4], w: f32[T]", f"y = reshape(x, {shape})", "return y")
        assert str(refir.verify(refir.parse(text, FILE)).types["y"]) == want, shape
    checked = refir.verify(refir.parse(prog("x: f32[S@DIDx, 6]", "y = reshape(x, [S, 2, -1])", "return y"), FILE))
    assert str(checked.types["y"]) == "f32[S@DIDx, 2, 3] on m"
    assert checked.func.eqns[0].op == ops.Reshape(("S", 2, 3))  # what lowering and the backends are handed
