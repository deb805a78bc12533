"""The verifier on partial values (docs/spec.md §3.3, partial_c*).

Each negative test is named after its label (docs/spec.md) and asserts the
VerifyError's label and where it points: `file:line:col` and the caret under
that column (verify_helpers.rejects). tests/test_verify.py checks that every
label the code raises has its test in one of these files."""



from verify_helpers import FILE, prog, rejects

import refir

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
