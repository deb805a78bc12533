"""The mask ops (docs/spec.md §5.9) on every backend: comparisons, where, iota and the
unary tanh erf sigmoid rsqrt sin cos. Values against numpy, every device's block
(iota's global indices on uneven blocks), strides, the printer round trip, the
bounds of §10 (num_c7), a bool mask through the gpu backend's collectives, the
nvFuser importer, and one run under mpiexec."""

import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import refir
from interp import masks
from interp.error_bounds import propagate
from interp.mask_bounds import MASK_ULPS
from interp.numerics import CONFORM
from refir.errors import InputError
from refir.frontends import builder
from refir.frontends.builder import Builder
from refir.frontends.nvfuser import import_nvfuser
from refir.ir.types import as_dtype, bf16, has_layout
from refir.text.printer import print_program

sys.path.insert(0, os.path.dirname(__file__))
from helpers import ROOT, run_mpi  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
BACKENDS = ("global", "spmd", "gpu")
CORPUS = sorted((ROOT / "conformance" / "corpus").glob("masks_*.rir"))

CAUSAL = """mesh m = [2, 0, 3, 1]

func main(s: f32[S@DIDx, S] on m) {
  r: i32[S@DIDx, S] on m = iota(axis=0)
  c: i32[S@DIDx, S] on m layout[1, 0] = iota(axis=1)
  k: bool[S@DIDx, S] on m = ge(r, c)
  w: f32[S@DIDx, S] on m = where(k, s, -inf)
  mx: f32[S@DIDx] on m = max(w, dims=[1])
  return r, c, k, w, mx
}
"""


def runs(text: str, inputs: dict[str, np.ndarray]) -> dict[str, refir.RunResult]:
    program = refir.parse(text)
    return {b: refir.run(program, inputs, backend=b) for b in BACKENDS}


def test_causal_mask_on_every_backend_with_uneven_blocks():
    s = (np.arange(50, dtype=np.float32) * 0.5).reshape(5, 10)[::-1, ::2]  # negative and gapped strides
    assert s.strides == (-40, 8)
    got = runs(CAUSAL, {"s": s})
    tril = np.tril(np.ones((5, 5), bool))
    for b, res in got.items():
        out = res.outputs
        np.testing.assert_array_equal(out["r"], np.arange(5)[:, None].repeat(5, 1), err_msg=b)
        np.testing.assert_array_equal(out["c"], np.arange(5)[None, :].repeat(5, 0), err_msg=b)
        np.testing.assert_array_equal(out["k"], tril, err_msg=b)
        assert out["k"].dtype == np.bool_
        np.testing.assert_array_equal(out["w"], np.where(tril, s, -np.inf), err_msg=b)
        np.testing.assert_array_equal(out["mx"], np.where(tril, s, -np.inf).max(1), err_msg=b)
    for b in ("spmd", "gpu"):
        shards = got[b].shards
        # mesh [2, 0, 3, 1]: coordinate k is device m[k]; 5 rows over 4 are blocks 2, 2, 1, 0
        for device, rows in zip((2, 0, 3, 1), ([0, 1], [2, 3], [4], [])):
            r = shards["r"][device]
            np.testing.assert_array_equal(r, np.array(rows, np.int32)[:, None].repeat(5, 1), err_msg=f"{b} {device}")
            c = shards["c"][device]
            assert has_layout(c, (1, 0)), (b, device, c.strides)
            if len(rows) > 1:
                assert c.strides == (4, 4 * len(rows)), (b, device, c.strides)
            np.testing.assert_array_equal(shards["k"][device], tril[rows], err_msg=f"{b} {device}")


def test_each_comparison_on_nan_inf_and_signed_zero_with_scalars_either_side():
    x = np.array([[np.nan, 1.0, -0.0, np.inf, -2.5, 3.0]], np.float32)
    y = np.array([[np.nan, 2.0, 0.0, np.inf, -2.5, 1.0]], np.float32)
    want = {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}
    for name, value in want.items():
        text = ("mesh m = [0, 1]\nfunc main(x: f32[1, 6@DIDx], y: f32[1, 6]) {\n"
                f"  k = {name}(x, y)\n  a = {name}(x, 1)\n  b2 = {name}(-2.5, y)\n  return k, a, b2\n}}\n")
        for b, res in runs(text, {"x": x, "y": y}).items():
            np.testing.assert_array_equal(res.outputs["k"], value, err_msg=f"{name} on {b}")
            np.testing.assert_array_equal(res.outputs["a"], masks.COMPARE_FNS[name](x, np.float32(1)), err_msg=b)
            np.testing.assert_array_equal(res.outputs["b2"], masks.COMPARE_FNS[name](np.float32(-2.5), y), err_msg=b)


def test_comparisons_of_bf16_and_integers_compare_values():
    h = as_dtype(np.array([[1.0, -3.0, 0.5, 7.0]]), bf16())
    n = np.array([[1, -3, 200, 7]], np.int32)
    text = ("mesh m = [0, 1]\nfunc main(h: bf16[1, 4@DIDx], n: i32[1, 4]) {\n"
            "  a = lt(h, 0.75)\n  c = eq(n, 200)\n  return a, c\n}\n")
    for b, res in runs(text, {"h": h, "n": n}).items():
        np.testing.assert_array_equal(res.outputs["a"], [[False, True, True, False]], err_msg=b)
        np.testing.assert_array_equal(res.outputs["c"], [[False, False, True, False]], err_msg=b)


def test_where_picks_values_and_broadcasts_scalars_and_b_axes():
    k = np.array([[True, False, True], [False, False, True]])
    x = as_dtype(np.array([[1.5, 2.5, -3.0], [4.0, np.nan, 6.0]]), bf16())
    y = as_dtype(np.array([[9.0], [-0.0]]), bf16())
    text = ("mesh m = [1, 0]\nfunc main(k: bool[2@DIDx, 3], x: bf16[2, 3], y: bf16[2, b]) {\n"
            "  w = where(k, x, y)\n  v = where(k, 0.5, y)\n  u = where(k, x, -inf)\n  return w, v, u\n}\n")
    for b, res in runs(text, {"k": k, "x": x, "y": y}).items():
        out = res.outputs
        assert out["w"].tobytes() == np.where(k, x, y).tobytes(), b  # bits: -0.0 stays -0.0
        np.testing.assert_array_equal(out["v"].astype(np.float32), np.where(k, 0.5, y.astype(np.float32)))
        np.testing.assert_array_equal(out["u"].astype(np.float32), np.where(k, x.astype(np.float32), -np.inf))


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "f64"])
def test_unary_ops_follow_numpy_rounded_once_from_float32(dtype):
    rng = np.random.default_rng(3)
    np_dt = bf16() if dtype == "bf16" else np.dtype({"f16": np.float16, "f32": np.float32, "f64": np.float64}[dtype])
    x = as_dtype(rng.uniform(-6, 6, (4, 6)), np_dt)
    names = ("tanh", "erf", "sigmoid", "rsqrt", "sin", "cos")
    body = "".join(f"  {n}_ = {n}(x)\n" for n in names)
    text = (f"mesh m = [0, 1, 2]\nfunc main(x: {dtype}[4@DIDx, 6]) {{\n{body}"
            f"  return {', '.join(n + '_' for n in names)}\n}}\n")
    wide = np.float64 if dtype == "f64" else np.float32
    xw = x.astype(wide)
    one = wide(1)
    truth = {"tanh": np.tanh(xw), "erf": np.array([math.erf(v) for v in xw.astype(np.float64).ravel()]).reshape(
        x.shape).astype(wide), "sigmoid": one / (one + np.exp(-xw)), "rsqrt": one / np.sqrt(xw),
             "sin": np.sin(xw), "cos": np.cos(xw)}
    got = runs(text, {"x": x})
    for n in names:
        want = as_dtype(truth[n], np_dt)
        for b in ("global", "spmd"):
            assert got[b].outputs[n + "_"].tobytes() == want.tobytes(), (n, b)
        # the simulator's kernels use numpy's functions too: the same bits
        g = got["gpu"].outputs[n + "_"]
        assert g.dtype == want.dtype and np.array_equal(g, want, equal_nan=True), (n, dtype)


def test_iota_dtypes_convert_as_cast_from_i64_and_keep_global_indices():
    text = ("mesh q = [[3, 1], [0, 2]]\nfunc main(x: f32[2]) {\n"
            "  a: i8[300@DIDx, b] on q = iota(axis=0)\n  e: bf16[300, 2@DIDy] on q = iota(axis=0)\n"
            "  f: f32[3@DIDy, 5@DIDx] on q layout[1, 0] = iota(axis=1)\n  return a, e, f\n}\n")
    idx = np.arange(300)
    for b, res in runs(text, {"x": np.zeros(2, np.float32)}).items():
        out = res.outputs
        np.testing.assert_array_equal(out["a"][:, 0], idx.astype(np.int8), err_msg=b)  # wraps past 127
        assert out["a"][200, 0] == -56
        np.testing.assert_array_equal(out["e"][:, 0].astype(np.float32),
                                      as_dtype(idx.astype(np.float32), bf16()).astype(np.float32))
        assert float(out["e"][257, 1]) == 256.0  # rounds to even past 256
        np.testing.assert_array_equal(out["f"], np.arange(5, dtype=np.float32)[None].repeat(3, 0))
        if b != "global":
            # device 2 is coordinates (1, 1): rows 2..3 of DIDy, columns 3..5 of DIDx
            block = res.shards["f"][2]
            np.testing.assert_array_equal(block, [[3, 4]])
            assert has_layout(block, (1, 0))


def test_the_mask_ops_print_and_parse_back():
    text = (ROOT / "conformance" / "corpus" / "masks_compare_where.rir").read_text()
    for path in CORPUS:
        program = refir.load(path)
        assert refir.parse(print_program(program)) == program, path.name
    assert "-inf" in print_program(refir.parse(text))


def test_tanh_conform_bound_is_2k_plus_1_ulps_and_rsqrt_is_exact():
    text = "mesh m = [0]\nfunc main(x: f32[3]) {\n  t = tanh(x)\n  r = rsqrt(x)\n  k = lt(x, 1)\n  return t, r, k\n}\n"
    checked = refir.verify(refir.parse(text))
    x = np.array([0.5, 2.0, 1e-3], np.float32)
    values = {"x": x, "t": np.tanh(x), "r": np.float32(1) / np.sqrt(x), "k": x < 1}
    bounds = propagate(checked, values, {}, CONFORM)
    eps = float(np.finfo(np.float32).eps)
    sub = float(np.finfo(np.float32).smallest_subnormal)
    np.testing.assert_allclose(bounds["t"], (2 * MASK_ULPS["tanh"] + 1) * (eps * np.abs(np.tanh(x)) + sub))
    assert not bounds["r"].any() and not bounds["k"].any()


def test_a_bool_mask_allgathered_and_gathered_passes_on_gpu():
    path = ROOT / "conformance" / "corpus" / "masks_bool_collectives.rir"
    program = refir.load(path)
    x = np.arange(25, dtype=np.float32).reshape(5, 5)
    got = refir.run(program, {"x": x}, backend="gpu")
    strict = np.tril(np.ones((5, 5), bool), -1)
    np.testing.assert_array_equal(got.outputs["kg"], strict)
    np.testing.assert_array_equal(got.outputs["kr"], strict)
    np.testing.assert_array_equal(got.outputs["ka"], strict)
    np.testing.assert_array_equal(got.outputs["w"], np.where(strict, x, 0))
    np.testing.assert_array_equal(got.outputs["any"], strict.any(0))
    for d, buf in got.shards["kg"].items():
        assert buf.dtype == np.bool_ and buf.tobytes() == strict.tobytes(), d


def test_nvfuser_causal_mask_imports_and_agrees_everywhere():
    imported = import_nvfuser((Path(__file__).parent / "data" / "nvfuser_causal_mask.txt").read_text(), "mask.txt")
    text = print_program(imported.program)
    assert "T1: i64[i0] on m = iota(axis=0)" in text
    assert "T4: bool[i0, i0] on m = ge(T2, T3)" in text
    assert "T5: f32[i0, i0] on m = where(T4, T0, -inf)" in text
    assert "T9: f32[i0, i0] on m = tanh(T5)" in text
    x = np.linspace(-2, 2, 16, dtype=np.float32).reshape(4, 4)
    tril = np.tril(np.ones((4, 4), bool))
    for b, res in {b: refir.run(imported.program, {"T0": x}, backend=b) for b in BACKENDS}.items():
        np.testing.assert_array_equal(res.outputs["T8"], np.where(tril, x, -np.inf).max(1), err_msg=b)
        np.testing.assert_array_equal(res.outputs["T9"], np.tanh(np.where(tril, x, -np.inf)), err_msg=b)


def test_the_mask_corpus_under_mpiexec():
    done = run_mpi(4, ["-m", "refir", "conform", *map(str, CORPUS), "--cases", "0", "--backend", "spmd",
                       "--backend", "gpu"], timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all backends agree" in done.stdout


def test_the_builder_makes_the_causal_program_the_text_does():
    b = Builder()
    m = b.mesh([2, 0, 3, 1], name="m")
    s = b.input("s", "f32", ["S@DIDx", "S"], mesh=m)
    r = builder.iota(b, b.type("i32", ["S@DIDx", "S"]), 0, name="r")
    c = builder.iota(b, b.type("i32", ["S@DIDx", "S"], layout=[1, 0]), 1, name="c")
    k = r.ge(c, name="k")
    w = builder.where(k, s, -math.inf, name="w")
    mx = w.max([1], name="mx")
    b.output(r, c, k, w, mx)
    built = b.build()
    assert print_program(built) == print_program(refir.parse(CAUSAL))
    t = s.tanh(name="t")
    assert t.type.dtype == "f32" and builder.compare("lt", 0, s, name="z").type.dtype == "bool"
    with pytest.raises(InputError, match="unknown comparison 'lte'"):
        builder.compare("lte", s, s)


@pytest.mark.parametrize("kind", ["float", "special"])
def test_the_mask_ops_bounds_are_sound_against_exact_arithmetic(kind):
    """num_c7/num_x10: on the mask corpus, the reference is within REFERENCE of the
    value in long double (64 bits), and spmd and gpu within CONFORM + REFERENCE."""
    from dataclasses import replace

    from test_expect_bounds import _exactly, _within

    from conformance.cases import cases_of
    from conformance.check import quiet
    from interp.error_bounds import every_value
    from interp.numerics import REFERENCE
    from refir.ir.types import is_float

    if np.finfo(np.longdouble).nmant < 60:
        pytest.skip("long double is float64 here: no exact yardstick")
    checked_values = 0
    with quiet():
        for path in CORPUS:
            for c in cases_of(path, "corpus", 0):
                c = replace(c, data=replace(c.data, kind=kind))
                inputs = c.inputs()
                values = every_value(c.checked, inputs, c.bindings)
                exact = _exactly(c.checked, inputs, c.bindings)
                r = propagate(c.checked, values, c.bindings, REFERENCE)
                con = propagate(c.checked, values, c.bindings, CONFORM)
                for k in values:
                    if is_float(values[k].dtype):
                        assert _within(values[k], exact[k], r[k]), (c.name, k)
                        checked_values += 1
                for b in ("spmd", "gpu"):
                    for k, v in refir.run(c.program, inputs, backend=b).outputs.items():
                        if is_float(v.dtype):
                            assert _within(v, exact[k], con[k] + r[k]), (c.name, k, b)
    assert checked_values > 20


def test_sigmoid_where_exp_overflows_is_bounded_by_the_smallest_normal():
    """1 / (1 + exp(95)) is 0 in f32 while the true value is a subnormal: num_x10's floor."""
    from interp.numerics import REFERENCE

    text = "mesh m = [0]\nfunc main(x: f32[4]) {\n  g = sigmoid(x)\n  r = rsqrt(x)\n  return g, r\n}\n"
    checked = refir.verify(refir.parse(text))
    x = np.array([-95.0, -100.0, 3.0, 0.0], np.float32)
    values = {"x": x, **refir.run(refir.parse(text), {"x": x}, backend="global").outputs}
    assert values["g"][0] == 0 and values["r"][3] == np.inf
    r = propagate(checked, values, {}, REFERENCE)
    true = np.array([math.exp(-95.0), math.exp(-100.0)])  # 1 / (1 + e^95) to 1e-41 relative
    assert np.all(np.abs(values["g"][:2].astype(np.float64) - true) <= r["g"][:2])


def test_inf_literals_parse_print_and_are_not_names():
    p = refir.parse("mesh m = [0]\nfunc main(x: f32[2]) {\n  y = add(x, inf)\n  z = maximum(x, -inf)\n"
                    "  return y, z\n}\n")
    assert [str(a) for e in p.funcs[0].eqns for a in e.args if not hasattr(a, "name")] == ["inf", "-inf"]
    assert refir.parse(print_program(p)) == p
    with pytest.raises(refir.RefirError):
        refir.parse("mesh m = [0]\nfunc main(inf: f32[2]) {\n  return inf\n}\n")


def test_nvfuser_infix_comparison_and_a_shifted_iota():
    from refir.errors import ParseError

    base = (Path(__file__).parent / "data" / "nvfuser_causal_mask.txt").read_text()
    lt = base.replace("   >= T3_l_int64_t", "   < T3_l_int64_t")
    assert "T4: bool[i0, i0] on m = lt(T2, T3)" in print_program(import_nvfuser(lt, "lt.txt").program)
    with pytest.raises(ParseError, match="start 0 and step 1"):
        import_nvfuser(base.replace("iota(i0, 0, 1, int64_t)", "iota(i0, 3, 1, int64_t)"), "shifted.txt")
