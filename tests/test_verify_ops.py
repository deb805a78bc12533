"""The verifier on the ops' own constraints: elementwise, where, iota, cast,
permute, unsqueeze, reductions, expand, matmul and set.

Each negative test is named after its label (docs/spec.md) and asserts the
VerifyError's label and where it points: `file:line:col` and the caret under
that column (verify_helpers.rejects). tests/test_verify.py checks that every
label the code raises has its test in one of these files."""

from verify_helpers import FILE, prog, rejects

import refir

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


def test_reshape_c7():
    rejects(prog("x: f32[S, E], w: f32[T]", "y = reshape(x, [T, E/4])", "return y"), "reshape_c7", 3, 3,
            "(E*T/4 elements)")
