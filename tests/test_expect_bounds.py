"""Expect lines held to exact arithmetic (docs/spec.md §10, num_x1..num_x9),
the rules they share with conform (num_c1..num_c4), and the mutant only they
can catch: bf16/f16 arithmetic rounding wrongly in the impls the reference
itself runs on."""

import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from helpers import ROOT

import refir
from conformance.cases import CORPUS, bundled_cases, cases_of
from conformance.check import check_case, quiet
from conformance.explore import drawn
from conformance.mutants import MUTANTS
from conformance.mutants.numeric import toward_zero
from conformance.teeth import hunt
from interp.error_bounds import every_value, propagate
from interp.impls import IMPLS, scalar_value
from interp.masks import iota_global
from interp.numerics import CONFORM, REFERENCE, expression, half_ulp
from refir.checks.expect_eval import evaluate_rounded
from refir.checks.expect_lines import check_expects
from refir.errors import Loc
from refir.ir import ops
from refir.ir.program import Lit, Sym, Var
from refir.ir.types import BF16, DTYPES, as_dtype, is_float

F32 = np.dtype(np.float32)
ZERO = """mesh m = [0, 1]

func main(x: bf16[4@DIDx, 3]) {
  z: bf16[4@DIDx, 3] = mul(x, 0.0)
  return z
}
# expect: z = x.astype(np.float32) * 3 + 5
"""
TWO_ROUNDINGS = """mesh m = [0, 1]

func main(a: bf16[4@DIDx, 8], w: bf16[4@DIDx, 8]) {
  p: bf16[4@DIDx, 8] = mul(a, w)
  q: bf16[4@DIDx, 8] = add(p, a)
  return q
}
"""


def floats(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return as_dtype(rng.uniform(-1, 1, shape) * 10.0 ** rng.uniform(-2, 2, shape), dtype)


def expects(text, lines, inputs, outputs=None):
    program = refir.parse(text + "".join(f"# expect: {line}\n" for line in lines))
    if outputs is None:
        outputs = refir.run(program, inputs, backend="spmd").outputs
    return check_expects(program, inputs, outputs)


def two_roundings_inputs():
    return {"a": floats((4, 8), BF16, 1), "w": floats((4, 8), BF16, 2)}


def test_num_x1_a_bf16_multiply_by_zero_fails_run_in_one_line(tmp_path):
    path = tmp_path / "zero.rir"
    path.write_text(ZERO)
    done = subprocess.run([sys.executable, "-m", "refir", "run", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and failed[0].startswith(f"FAILED {path}:7:1: z != x.astype(np.float32) * 3 + 5 (")
    assert "12 of 12 elements outside the bound" in failed[0] and "expect lines hold" not in done.stdout


def test_num_x1_the_bound_is_the_three_bounds_summed():
    program = refir.parse(TWO_ROUNDINGS)
    checked, inputs = refir.verify(program), two_roundings_inputs()
    values = every_value(checked, inputs, {})
    r = propagate(checked, values, {}, REFERENCE)
    e = propagate(checked, values, {}, expression(F32), r)
    c = propagate(checked, values, {}, CONFORM)
    q = values["q"].astype(np.float64)
    assert np.all(c["q"] == 0)  # correctly rounded ops of exact inputs: every backend gives these bits
    want = (values["p"].astype(np.float64) + inputs["a"].astype(np.float64))  # q unrounded
    assert np.all(np.abs(q - want) <= half_ulp(q, BF16) * (1 + 2.0 ** -7))
    p, slack = values["p"].astype(np.float64), 1 + 2.0 ** -7  # a bf16 is reached through float32
    assert np.array_equal(r["p"], half_ulp(p, BF16) * slack)  # num_x2: half an ulp per rounding, carried
    assert np.array_equal(r["q"], r["p"] + half_ulp(q, BF16) * slack)
    assert np.all(e["q"] < r["q"] / 1000)  # float32's roundings are small beside bf16's


def test_num_x2_one_ulp_off_fails_where_half_an_ulp_holds():
    text = TWO_ROUNDINGS.replace("  q: bf16[4@DIDx, 8] = add(p, a)\n  return q", "  return p")
    inputs = two_roundings_inputs()
    good = refir.run(refir.parse(text), inputs, backend="spmd").outputs
    line = "p = a.astype(np.float32) * w.astype(np.float32)"
    assert expects(text, [line], inputs, good) == []
    for index in [(1, 2), (3, 7)]:
        off = good["p"].copy()
        off.view(np.uint16)[index] += 1  # one ulp away from zero
        (failure,) = expects(text, [line], inputs, {"p": off})
        assert f"1 of 32 elements outside the bound; worst p[{index[0]}, {index[1]}]" in failure
    # Two roundings in a row: the float32 line cannot tell where the first one went.
    line = "q = a.astype(np.float32) * w.astype(np.float32) + a.astype(np.float32)"
    assert expects(TWO_ROUNDINGS, [line], inputs) == []


def test_num_x9_an_expression_rounded_through_bf16_is_exact():
    inputs = two_roundings_inputs()
    good = refir.run(refir.parse(TWO_ROUNDINGS), inputs, backend="spmd").outputs
    mirror = "q = ((a.astype(np.float32) * w).astype(bf16).astype(np.float32) + a).astype(bf16)"
    assert expects(TWO_ROUNDINGS, [mirror, "q = a * w + a"], inputs, good) == []
    # Rounded once where the program rounds twice: it does not state the program's roundings.
    (once,) = expects(TWO_ROUNDINGS, ["q = (a.astype(np.float32) * w + a).astype(bf16)"], inputs, good)
    assert "bound 0" in once
    near = good["q"].copy()
    near.view(np.uint16)[0, 0] ^= 1  # the last bit: the float32 line may allow it, the bf16 line does not
    (exact,) = expects(TWO_ROUNDINGS, [mirror], inputs, {"q": near})
    assert "1 of 32 elements outside the bound; worst q[0, 0]" in exact and "bound 0" in exact


def test_num_x9_a_sum_in_bf16_is_held_to_its_bound_not_exactly():
    text = CORPUS / "half_precision_rounding.rir"
    program = refir.load(text)
    case = cases_of(text, "corpus", 0)[0]
    outputs = refir.run(program, case.inputs(), backend="spmd").outputs
    assert check_expects(program, case.inputs(), outputs) == []
    s = outputs["s"].copy()
    s.view(np.uint16)[3] += 1  # one ulp: within a sum's bound
    assert check_expects(program, case.inputs(), {**outputs, "s": s}) == []
    s[3] = 2 * s[3] + 1
    assert [f for f in check_expects(program, case.inputs(), {**outputs, "s": s}) if ": s != (a * w + a)" in f]


def test_num_x5_a_literal_s_rounding_counts():
    text = """mesh m = [0, 1]

func main(x: bf16[4@DIDx, 8]) {
  y: bf16[4@DIDx, 8] = mul(x, 0.1)
  return y
}
"""
    inputs = {"x": floats((4, 8), BF16, 3)}
    assert expects(text, ["y = x.astype(np.float64) * 0.1"], inputs) == []
    program = refir.parse(text)
    values = every_value(refir.verify(program), inputs, {})
    r = propagate(refir.verify(program), values, {}, REFERENCE)
    # bf16(0.1) is 0.10009765625: the product's error is far past its own half ulp.
    y = values["y"].astype(np.float64)
    assert np.all(r["y"] >= np.abs(inputs["x"].astype(np.float64)) * (0.10009765625 - 0.1) + half_ulp(y, BF16))


def test_num_x4_a_float_to_integer_cast_is_decided_or_free():
    text = """mesh m = [0]

func main(x: f32[4]) {
  y: f32[4] = mul(x, 3.0)
  i: i32[4] = cast(y, dtype=i32)
  return i
}
"""
    x = np.array([1.1, 2.1, 1 / 3, -7.25], np.float32)
    program = refir.parse(text)
    checked = refir.verify(program)
    values = every_value(checked, {"x": x}, {})
    r = propagate(checked, values, {}, REFERENCE)
    assert list(r["i"]) == [0.0, 0.0, np.inf, 0.0]  # 3 * f32(1/3) is 1 within a rounding of either side
    assert expects(text, ["i = np.trunc(x.astype(np.float64) * 3).astype(np.int32)"], {"x": x}) == []
    (wrong,) = expects(text, ["i = np.trunc(x.astype(np.float64) * 3).astype(np.int32) + 1"], {"x": x})
    assert "3 of 4 elements" in wrong


def test_num_x7_the_precision_an_expression_computed_in():
    x = np.ones(3, BF16)
    scope = {"x": x, "y": np.ones(3, np.float32), "N": 4}
    loc = Loc("<t>", 1, 1)
    for expr, want in [("x.astype(np.float32) * 3 + 5", F32), ("x * 3 + 5", BF16), ("x.T", None),
                       ("x", None), ("(y * 2).astype(bf16)", BF16), ("y.astype(np.float64).sum() / N", np.float64),
                       ("np.float16(y[0]) + 1", np.float16), ("x.shape[0] * N", None)]:
        value, precision = evaluate_rounded(expr, scope, loc)
        assert precision == (None if want is None else np.dtype(want)), expr
    value, _ = evaluate_rounded("np.float64(1 + 2 ** -8 + 2 ** -30).astype(bf16)", scope, loc)
    assert value == as_dtype(np.float32(1 + 2 ** -8 + 2 ** -30), BF16)  # through float32, as refir rounds


def test_num_x8_a_non_finite_value_must_match_exactly():
    text = """mesh m = [0]

func main(x: f16[3]) {
  y: f16[3] = mul(x, 1000.0)
  return y
}
"""
    x = np.array([100.0, 1.0, np.nan], np.float16)
    assert expects(text, ["y = x * np.float16(1000)"], {"x": x}) == []
    (finite,) = expects(text, ["y = x.astype(np.float32) * 1000"], {"x": x})  # no float16 overflow
    assert "1 of 3 elements outside the bound; worst y[0] = inf vs 100000.0" in finite


def test_num_c2_correctly_rounded_ops_of_exact_operands_are_bit_exact_in_conform():
    program = refir.parse(TWO_ROUNDINGS)
    checked, inputs = refir.verify(program), two_roundings_inputs()
    values = every_value(checked, inputs, {})
    c = propagate(checked, values, {}, CONFORM)
    assert np.all(c["p"] == 0) and np.all(c["q"] == 0)


def test_num_c3_a_float_reduction_s_slack():
    text = "mesh m = [0]\n\nfunc main(x: f32[5, 2]) {\n  s: f32[2] = sum(x, dims=[0])\n  return s\n}\n"
    checked = refir.verify(refir.parse(text))
    x = np.array([[1, 0.5], [2, 0.25], [3, 0.1], [4, 0.2], [5, 0.3]], np.float32)
    c = propagate(checked, every_value(checked, {"x": x}, {}), {}, CONFORM)
    assert c["s"][0] == 0  # integers that sum exactly
    assert c["s"][1] == pytest.approx(5 * 2.0 ** -23 * float(np.sum(np.abs(x[:, 1]).astype(np.float64))))


def _exactly(checked, inputs, bindings):
    """Every value in long double with no rounding (floats stay exact to 64 bits)."""
    ld = np.longdouble
    env = {p.name: inputs[p.name].astype(np.float64).astype(ld) if is_float(inputs[p.name].dtype) else inputs[p.name]
           for p in checked.func.params}
    for e in checked.func.eqns:
        if isinstance(e.op, ops.Iota):  # indices: exact, but for a float dtype's own rounding
            out = iota_global(e.op, replace(checked.types[e.out], dtype="i64"), bindings)
            t = checked.types[e.out].np_dtype
            env[e.out] = out.astype(ld) if is_float(t) else as_dtype(out, t)
            continue
        values = e.args[1:] if isinstance(e.op, ops.Where) else e.args  # where's scalars take its values' dtype
        src = next(env[a.name] for a in values if isinstance(a, Var)).dtype
        args = [env[a.name] if isinstance(a, Var) else bindings[a.name] if isinstance(a, Sym)
                else a.value if isinstance(a, Lit) else a for a in e.args]
        args = [a if isinstance(a, np.ndarray) else np.array(float(a), ld) if src == ld else scalar_value(a, src)
                for a in args]
        op, float_op = e.op, src == ld
        with np.errstate(all="ignore"):
            if isinstance(op, ops.Cast) and float_op and is_float(DTYPES[op.dtype]):
                out = args[0]
            elif isinstance(op, ops.Cast) and not float_op and is_float(DTYPES[op.dtype]):
                out = args[0].astype(ld)
            elif isinstance(op, ops.Cast):
                out = IMPLS[ops.Cast](op, args[0].astype(np.float64) if float_op else args[0])
            elif isinstance(op, ops.Reduction) and op.kind in ("sum", "prod") and float_op:
                out = (np.sum if op.kind == "sum" else np.prod)(args[0], axis=tuple(op.dims), dtype=ld)
            elif isinstance(op, ops.Matmul) and float_op:
                out = np.matmul(*args)
            else:
                out = IMPLS[type(op)](op, *args)
                t = checked.types[e.out].np_dtype
                out = out if (float_op and is_float(t)) or out.dtype == t else as_dtype(out, t)
        env[e.out] = np.asarray(out)
    return env


def _within(value, exact, bound):
    v, x = np.asarray(value).astype(np.longdouble), exact.astype(np.longdouble)
    ok = ~np.isfinite(x) | ~np.isfinite(v) | ~np.isfinite(bound) | (np.abs(v - x) <= bound.astype(np.longdouble))
    return bool(ok.all())


@pytest.mark.parametrize("seed", [0, 1])
def test_num_x2_x3_the_reference_and_spmd_are_within_their_bounds_of_exact_arithmetic(seed):
    """Soundness, on the corpus's float cases and generated programs drawn on
    float data: the reference within REFERENCE of the exact value, spmd within
    CONFORM + REFERENCE. (Long double has 64 bits: f64 results stay checkable.)"""
    if np.finfo(np.longdouble).nmant < 60:
        pytest.skip("long double is float64 here: no exact yardstick")
    cases = [replace(c, data=replace(c.data, kind="float")) for c in bundled_cases(seed)
             if any(is_float(p.type.np_dtype) for p in c.checked.func.params)][:: 3 if seed else 4]
    cases += [replace(c, data=replace(c.data, kind="float")) for i in range(12) for c in drawn(seed + 5, i)]
    checked_values = 0
    with quiet():
        for c in cases:
            inputs = c.inputs()
            values = every_value(c.checked, inputs, c.bindings)
            exact = _exactly(c.checked, inputs, c.bindings)
            r = propagate(c.checked, values, c.bindings, REFERENCE)
            for k in values:
                if is_float(values[k].dtype):
                    assert _within(values[k], exact[k], r[k]), (c.name, k)
                    checked_values += 1
            for d in (F32, BF16):
                mirror = propagate(c.checked, values, c.bindings, expression(d), r)
                assert all(np.all(mirror[k] >= 0) for k in mirror)
            con = propagate(c.checked, values, c.bindings, CONFORM)
            for k, v in refir.run(c.program, inputs, backend="spmd").outputs.items():
                if is_float(v.dtype):
                    assert _within(v, exact[k], con[k] + r[k]), (c.name, k)
    assert checked_values > 50


def test_the_default_run_catches_a_reference_that_rounds_wrongly():
    """The planted bug: bf16/f16 arithmetic in interp/impls.py one ulp short. The
    global reference runs on it too, so every backend agrees with it; the
    default run's own cases (the corpus and shared examples) fail it by their
    expect lines alone."""
    (m,) = [m for m in MUTANTS if m.name == "half_precision_rounds_toward_zero"]
    x = np.array([1 + 2 ** -8 + 2 ** -12, -(1 + 2 ** -8 + 2 ** -12), 3.0], np.float32)
    assert list(toward_zero(x, BF16).astype(np.float32)) == [1.0, -1.0, 3.0]
    cases = [c for c in bundled_cases(0) if "half_precision" in c.name or "binary_replicated" in c.name]
    assert all(o.status == "pass" for c in cases for o in check_case(c, ["global", "spmd"]))
    with m.inject():
        outcomes = [o for c in bundled_cases(0) if c.program.expects for o in check_case(c, ["global", "spmd"])]
    failed = [o for o in outcomes if o.status == "fail"]
    assert failed and {p.check for o in failed for p in o.problems} == {"expect"}
    assert "half_precision_rounding" in {o.case.label for o in failed}  # edge_elementwise's bf16 ties too
    (kill,) = hunt(bundled_cases(0), mutants=[m], backends=("spmd",))
    assert kill.killed and set(kill.checks) == {"expect"}, kill.checks


def test_symbols_in_expect_lines_hold_in_conform():
    """conform hands the case's bindings to the expect lines, as run does."""
    path = CORPUS / "expect_names_a_symbol.rir"
    cases = cases_of(path, "corpus", 0)
    assert len(cases) == 4  # two bindings, two kinds of data
    outcomes = [o for c in cases for o in check_case(c, ["global", "spmd"])]
    assert [o.status for o in outcomes] == ["pass"] * 8, [str(p) for o in outcomes for p in o.problems]
