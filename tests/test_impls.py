"""Every compute op against hand-computed arrays, on the global reference and on
spmd (the lowered program, ranks simulated in this process)."""

import numpy as np
import pytest

import refir

nan, inf = np.nan, np.inf
BACKENDS = ["global", "spmd"]


def run(backend, params, body, inputs, mesh="[0]"):
    lines = "\n".join(f"  {b}" for b in body)
    text = f"mesh m = {mesh}\nfunc main({params}) {{\n{lines}\n}}\n"
    return refir.run(text, inputs, backend=backend).outputs


def same(got, want):
    """Equal values, dtype and shape; NaN equals NaN."""
    want = np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.array_equal(got, want, equal_nan=got.dtype.kind == "f"), (got, want)


f32 = np.float32


# ---- elementwise -------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_binary_with_tensors_literals_and_symbols(backend):
    x = np.array([0.5, -1.0, 3.0], f32)
    y = np.array([2.0, 4.0, -0.5], f32)
    out = run(backend, "x: f32[D], y: f32[D]", [
        "a = add(x, 2)", "s = sub(2, x)", "m = mul(x, D)", "d = div(x, y)", "hi = maximum(x, y)",
        "lo = minimum(x, -0.75)", "return a, s, m, d, hi, lo"], {"x": x, "y": y})
    same(out["a"], np.array([2.5, 1.0, 5.0], f32))
    same(out["s"], np.array([1.5, 3.0, -1.0], f32))
    same(out["m"], np.array([1.5, -3.0, 9.0], f32))  # D is 3
    same(out["d"], np.array([0.25, -0.25, -6.0], f32))
    same(out["hi"], np.array([2.0, 4.0, 3.0], f32))
    same(out["lo"], np.array([-0.75, -1.0, -0.75], f32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_maximum_minimum_relu_propagate_nan(backend):
    x = np.array([1.0, nan, -2.0], f32)
    y = np.array([nan, 0.0, 5.0], f32)
    out = run(backend, "x: f32[3], y: f32[3]",
              ["hi = maximum(x, y)", "lo = minimum(x, y)", "r = relu(x)", "return hi, lo, r"], {"x": x, "y": y})
    same(out["hi"], np.array([nan, nan, 5.0], f32))
    same(out["lo"], np.array([nan, nan, -2.0], f32))
    same(out["r"], np.array([1.0, nan, 0.0], f32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_unary_ops(backend):
    x = np.array([0.0, 1.0, 4.0, -1.0], f32)
    out = run(backend, "x: f32[4]", [
        "n = neg(x)", "a = abs(x)", "e = exp(x)", "l = log(x)", "s = sqrt(x)", "r = relu(x)",
        "return n, a, e, l, s, r"], {"x": x})
    same(out["n"], np.array([-0.0, -1.0, -4.0, 1.0], f32))
    assert np.signbit(out["n"][0])
    same(out["a"], np.array([0.0, 1.0, 4.0, 1.0], f32))
    assert out["e"].dtype == f32  # exp and log agree within a few ulp (spec §10)
    np.testing.assert_allclose(out["e"], [1.0, np.e, np.e**4, 1 / np.e], rtol=4 * np.finfo(f32).eps)
    assert out["l"].dtype == f32
    np.testing.assert_allclose(out["l"], [-inf, 0.0, np.log(4.0), nan], rtol=4 * np.finfo(f32).eps)
    same(out["s"], np.array([0.0, 1.0, 2.0, nan], f32))
    same(out["r"], np.array([0.0, 1.0, 4.0, 0.0], f32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_b_axes_broadcast(backend):
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    row = np.array([[10, 20, 30]], np.int32)
    col = np.array([[100], [200]], np.int32)
    out = run(backend, "x: i32[2, 3], row: i32[b, 3], col: i32[2, b]",
              ["y = add(x, row)", "z = mul(row, col)", "return y, z"], {"x": x, "row": row, "col": col})
    same(out["y"], np.array([[11, 22, 33], [14, 25, 36]], np.int32))
    same(out["z"], np.array([[1000, 2000, 3000], [2000, 4000, 6000]], np.int32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_arithmetic_wraps_in_its_dtype(backend):
    x = np.array([127, -128, 44, 0], np.int8)
    u = np.array([0, 255, 16, 1], np.uint8)
    out = run(backend, "x: i8[4], u: u8[4]", [
        "a = add(x, 300)", "m = mul(x, 2)", "n = neg(x)", "ab = abs(x)", "us = sub(u, 1)", "um = mul(u, u)",
        "neg1 = add(u, -1)", "return a, m, n, ab, us, um, neg1"], {"x": x, "u": u})
    same(out["a"], np.array([-85, -84, 88, 44], np.int8))  # 300 wraps to 44 first
    same(out["m"], np.array([-2, 0, 88, 0], np.int8))
    same(out["n"], np.array([-127, -128, -44, 0], np.int8))
    same(out["ab"], np.array([127, -128, 44, 0], np.int8))
    same(out["us"], np.array([255, 254, 15, 0], np.uint8))
    same(out["um"], np.array([0, 1, 0, 1], np.uint8))
    same(out["neg1"], np.array([255, 254, 15, 0], np.uint8))


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_literals_of_any_size_wrap_into_the_dtype(backend):
    x = np.array([1, -2], np.int8)
    u = np.array([3, 0], np.uint8)
    w = np.array([0, 5], np.int64)
    out = run(backend, "x: i8[2], u: u8[2], w: i64[2]", [
        f"a = add(x, {2**64 + 44})", f"b2 = add(u, {-(2**70) - 1})", f"c = add(w, {2**63})", "return a, b2, c"],
        {"x": x, "u": u, "w": w})
    same(out["a"], np.array([45, 42], np.int8))
    same(out["b2"], np.array([2, 255], np.uint8))
    same(out["c"], np.array([-(2**63), -(2**63) + 5], np.int64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_bool_maximum_minimum_are_or_and(backend):
    x = np.array([False, False, True, True])
    y = np.array([False, True, False, True])
    out = run(backend, "x: bool[4], y: bool[4]", ["o = maximum(x, y)", "a = minimum(x, y)", "return o, a"],
              {"x": x, "y": y})
    same(out["o"], np.array([False, True, True, True]))
    same(out["a"], np.array([False, False, False, True]))


# ---- cast --------------------------------------------------------------------------------

FLOATS_IN = np.array([1.9, -1.9, 3e9, -3e9, nan, inf, -inf, -0.5, 127.5, -128.5, 255.9], f32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype, want", [
    ("i8", np.array([1, -1, 127, -128, 0, 127, -128, 0, 127, -128, 127], np.int8)),
    ("u8", np.array([1, 0, 255, 0, 0, 255, 0, 0, 127, 0, 255], np.uint8)),
    ("i32", np.array([1, -1, 2**31 - 1, -(2**31), 0, 2**31 - 1, -(2**31), 0, 127, -128, 255], np.int32)),
    ("i64", np.array([1, -1, 3000000000, -3000000000, 0, 2**63 - 1, -(2**63), 0, 127, -128, 255], np.int64)),
    ("bool", np.array([True] * 11)),
    ("f16", np.array([1.9, -1.9, inf, -inf, nan, inf, -inf, -0.5, 127.5, -128.5, 255.9], np.float16)),
])
def test_cast_from_float_truncates_saturates_and_sends_nan_to_zero(backend, dtype, want):
    out = run(backend, "x: f32[11]", [f"y = cast(x, dtype={dtype})", "return y"], {"x": FLOATS_IN})
    same(out["y"], want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cast_between_integers_wraps_and_bool_is_nonzero(backend):
    x = np.array([127, -128, 44, 0], np.int8)
    out = run(backend, "x: i8[4]", [
        "u = cast(x, dtype=u8)", "w = cast(x, dtype=i64)", "f = cast(x, dtype=f32)", "t = cast(x, dtype=bool)",
        "back = cast(t, dtype=i16)", "return u, w, f, t, back"], {"x": x})
    same(out["u"], np.array([127, 128, 44, 0], np.uint8))
    same(out["w"], np.array([127, -128, 44, 0], np.int64))
    same(out["f"], np.array([127.0, -128.0, 44.0, 0.0], f32))
    same(out["t"], np.array([True, True, True, False]))
    same(out["back"], np.array([1, 1, 1, 0], np.int16))
    big = np.array([300, -1, 65535], np.int32)
    out = run(backend, "x: i32[3]", ["y = cast(x, dtype=u8)", "z = cast(x, dtype=i16)", "return y, z"], {"x": big})
    same(out["y"], np.array([44, 255, 255], np.uint8))
    same(out["z"], np.array([300, -1, -1], np.int16))


# ---- shape ops ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_permute(backend):
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int16)
    cube = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    out = run(backend, "x: i16[2, 3], c: i16[2, 3, 4]",
              ["t = permute(x, [1, 0])", "p = permute(c, [2, 0, 1])", "return t, p"], {"x": x, "c": cube})
    same(out["t"], np.array([[1, 4], [2, 5], [3, 6]], np.int16))
    p = out["p"]
    assert p.shape == (4, 2, 3)
    # p[i, j, k] = c[j, k, i] = 12 j + 4 k + i
    assert p[1, 0, 2] == 9 and p[3, 1, 0] == 15 and p[0, 1, 2] == 20
    same(p[2], np.array([[2, 6, 10], [14, 18, 22]], np.int16))


@pytest.mark.parametrize("backend", BACKENDS)
def test_unsqueeze(backend):
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], f32)
    out = run(backend, "x: f32[2, 3]", ["u = unsqueeze(x, dims=[0, 3])", "v = unsqueeze(x, dims=[1])", "return u, v"],
              {"x": x})
    same(out["u"], np.array([[[[1.0], [2.0], [3.0]], [[4.0], [5.0], [6.0]]]], f32))
    same(out["v"], np.array([[[1.0, 2.0, 3.0]], [[4.0, 5.0, 6.0]]], f32))


# ---- reductions --------------------------------------------------------------------------

INTS = np.array([[6, 3, -2], [5, 12, 7]], np.int32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind, dims, want", [
    ("sum", [0], [11, 15, 5]),
    ("sum", [1], [7, 24]),
    ("sum", [0, 1], 31),
    ("prod", [1], [-36, 420]),
    ("max", [0], [6, 12, 7]),
    ("min", [1], [-2, 5]),
    ("band", [0], [4, 0, 6]),
    ("bor", [0], [7, 15, -1]),
    ("bxor", [1], [-5, 14]),
])
def test_reduction_kinds(backend, kind, dims, want):
    out = run(backend, "x: i32[2, 3]", [f"y = {kind}(x, dims={dims})", "return y"], {"x": INTS})
    same(out["y"], np.array(want, np.int32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_reductions_wrap(backend):
    x = np.full((2, 3), 100, np.int8)
    out = run(backend, "x: i8[2, 3]", ["s = sum(x, dims=[1])", "p = prod(x, dims=[1])", "return s, p"], {"x": x})
    same(out["s"], np.array([44, 44], np.int8))  # 300 mod 256
    same(out["p"], np.array([64, 64], np.int8))  # 1_000_000 mod 256
    big = np.array([2**31 - 1, 1], np.int32)
    out = run(backend, "x: i32[2]", ["s = sum(x, dims=[0])", "return s"], {"x": big})
    same(out["s"], np.array(-(2**31), np.int32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_sums_accumulate_in_float64_and_round_once(backend):
    x = np.array([1e8, 1.0, -1e8], f32)
    h = np.array([2048, 1, 1], np.float16)
    out = run(backend, "x: f32[3], h: f16[3]", ["s = sum(x, dims=[0])", "t = sum(h, dims=[0])", "return s, t"],
              {"x": x, "h": h})
    same(out["s"], np.array(1.0, f32))  # float32 left to right would give 0
    same(out["t"], np.array(2050, np.float16))  # float16 left to right would give 2048


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_propagates_through_sum_prod_max_min(backend):
    x = np.array([[1.0, nan, 3.0], [4.0, 5.0, 6.0]], f32)
    out = run(backend, "x: f32[2, 3]", [
        "s = sum(x, dims=[1])", "p = prod(x, dims=[0])", "hi = max(x, dims=[1])", "lo = min(x, dims=[0])",
        "return s, p, hi, lo"], {"x": x})
    same(out["s"], np.array([nan, 15.0], f32))
    same(out["p"], np.array([4.0, nan, 18.0], f32))
    same(out["hi"], np.array([nan, 6.0], f32))
    same(out["lo"], np.array([1.0, nan, 3.0], f32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_reductions_give_the_identity(backend):
    f = np.zeros((0, 2), f32)
    out = run(backend, "x: f32[N, 2]", [
        "s = sum(x, dims=[0])", "p = prod(x, dims=[0])", "hi = max(x, dims=[0])", "lo = min(x, dims=[0])",
        "return s, p, hi, lo"], {"x": f})
    same(out["s"], np.array([0.0, 0.0], f32))
    same(out["p"], np.array([1.0, 1.0], f32))
    same(out["hi"], np.array([-inf, -inf], f32))
    same(out["lo"], np.array([inf, inf], f32))
    body = ["s = sum(x, dims=[0])", "p = prod(x, dims=[0])", "hi = max(x, dims=[0])", "lo = min(x, dims=[0])",
            "a = band(x, dims=[0])", "o = bor(x, dims=[0])", "e = bxor(x, dims=[0])", "return s, p, hi, lo, a, o, e"]
    out = run(backend, "x: i8[N, 2]", body, {"x": np.zeros((0, 2), np.int8)})
    for name, value in dict(s=0, p=1, hi=-128, lo=127, a=-1, o=0, e=0).items():
        same(out[name], np.array([value, value], np.int8))
    out = run(backend, "x: u8[N, 2]", body, {"x": np.zeros((0, 2), np.uint8)})
    for name, value in dict(s=0, p=1, hi=0, lo=255, a=255, o=0, e=0).items():
        same(out[name], np.array([value, value], np.uint8))
    body = ["hi = max(x, dims=[0])", "lo = min(x, dims=[0])", "a = band(x, dims=[0])", "o = bor(x, dims=[0])",
            "return hi, lo, a, o"]
    out = run(backend, "x: bool[N, 2]", body, {"x": np.zeros((0, 2), bool)})
    for name, value in dict(hi=False, lo=True, a=True, o=False).items():
        same(out[name], np.array([value, value]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_reduction_over_a_sharded_axis(backend):
    out = run(backend, "x: f32[N@DIDx, 2]", ["hi = max(x, dims=[0])", "s = sum(x, dims=[0])", "return hi, s"],
              {"x": np.zeros((0, 2), f32)}, mesh="[1, 0]")
    same(out["hi"], np.array([-inf, -inf], f32))
    same(out["s"], np.array([0.0, 0.0], f32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reduction_over_a_sharded_axis_propagates_nan(backend):
    x = np.array([[1.0, 2.0], [nan, 0.0], [3.0, -1.0], [0.5, 9.0]], f32)
    out = run(backend, "x: f32[4@DIDx, 2]", ["hi = max(x, dims=[0])", "lo = min(x, dims=[0])", "s = sum(x, dims=[0])",
                                              "return hi, lo, s"], {"x": x}, mesh="[0, 1]")
    same(out["hi"], np.array([nan, 9.0], f32))
    same(out["lo"], np.array([nan, -1.0], f32))
    same(out["s"], np.array([nan, 10.0], f32))


# ---- matmul ------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul(backend):
    a = np.array([[1, 2], [3, 4]], f32)
    b = np.array([[5, 6], [7, 8]], f32)
    batch_a = np.stack([a, 2 * a])
    batch_b = np.stack([b, np.eye(2, dtype=f32)])
    out = run(backend, "a: f32[2, 2], w: f32[2, 2], ba: f32[2, 2, 2], bw: f32[2, 2, 2]",
              ["z = matmul(a, w)", "bz = matmul(ba, bw)", "return z, bz"],
              {"a": a, "w": b, "ba": batch_a, "bw": batch_b})
    same(out["z"], np.array([[19, 22], [43, 50]], f32))
    same(out["bz"], np.array([[[19, 22], [43, 50]], [[2, 4], [6, 8]]], f32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_integers_wrap_and_floats_accumulate_wide(backend):
    a = np.full((2, 3), 100, np.int8)
    out = run(backend, "a: i8[2, 3], w: i8[3, 2]", ["z = matmul(a, w)", "return z"], {"a": a, "w": a.T.copy()})
    same(out["z"], np.full((2, 2), 48, np.int8))  # 30000 mod 256
    x = np.array([[1e8, 1.0, -1e8]], f32)
    out = run(backend, "a: f32[1, 3], w: f32[3, 1]", ["z = matmul(a, w)", "return z"],
              {"a": x, "w": np.ones((3, 1), f32)})
    same(out["z"], np.array([[1.0]], f32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_with_a_sharded_contraction(backend):
    a = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.int32)
    w = np.array([[1, 0, 2], [0, 1, 0], [1, 1, 1], [2, 0, -1]], np.int32)
    r = refir.run("mesh m = [1, 0]\nfunc main(a: i32[2, 4@DIDx], w: i32[4@DIDx, 3]) {\n"
                  "  z = matmul(a, w)\n  return z\n}\n", {"a": a, "w": w}, backend=backend)
    want = np.array([[12, 5, 1], [28, 13, 9]], np.int32)
    same(r.outputs["z"], want)
    if backend == "spmd":
        assert [type(s.op).__name__ for s in r.lowered.steps] == ["Matmul", "Allreduce"]
        for d in (0, 1):
            same(r.shards["z"][d], want)
            assert r.shards["z"][d].strides == (12, 4)
