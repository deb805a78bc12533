"""Issue 25, item 2: reaching an op must mean values that expose its errors.

The `edge` data kind holds, for each op's known error classes, values where a
common wrong implementation parts from the spec's (conformance/classes.py);
`conform --coverage` says which classes each op's data exposed; the data
mutants are those wrong implementations, and the default run kills each.
"""

import re
from pathlib import Path

import numpy as np
import pytest

import refir
from conformance.cases import CORPUS, Case, bundled_cases, cases_of
from conformance.check import check_case
from conformance.classes import CLASSES as ERROR_CLASSES
from conformance.classes import Site, exposed, recip_div, ties_away, truncating
from conformance.coverage import Coverage, missing_classes, not_reached, render
from conformance.data import DataSpec, edge_values
from conformance.explore import drawn
from conformance.mutants import MUTANTS
from conformance.teeth import hunt
from refir.cli import main
from refir.ir import ops
from refir.ir.types import DTYPES, Axis, Mesh, TensorType, as_dtype

DATA_MUTANTS = ["div_as_reciprocal", "cast_ties_away", "combine_drops_later_nan", "sqrt_via_rsqrt",
                "exp_via_exp2", "log_range_reduced", "float_to_int_floor"]
EDGE_FILES = ["edge_elementwise", "edge_casts", "edge_reductions"]


def _default_cases() -> list[Case]:
    """What `python -m refir` runs: the bundled corpus and examples, then 20 generated programs at seed 0."""
    return bundled_cases(0) + [c for index in range(20) for c in drawn(0, index)]


def _mutants(names: list[str]):
    return [m for m in MUTANTS if m.name in names]


def _div_case(kind: str) -> Case:
    text = "mesh m = [0, 1]\nfunc main(x: f32[4, 8@DIDx], y: f32[4, 8@DIDx]) {\n  q = div(x, y)\n  return q\n}\n"
    program = refir.parse(text)
    return Case("files", "div", program, {}, DataSpec(kind, 0))


# ---- the mutants: the default run kills them, and only its edge data does -------------------


def test_conform_mutants_lists_every_data_mutant_killed(capsys):
    args = ["conform", "--mutants"] + [a for n in DATA_MUTANTS for a in ("--mutant", n)]
    assert main(args) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines() if line.split()[:1] in
            [[n] for n in DATA_MUTANTS]}
    assert rows == {n: "values" for n in DATA_MUTANTS}, out
    assert f"{len(DATA_MUTANTS)} mutants, {len(DATA_MUTANTS)} killed" in out


def test_without_the_edge_data_the_default_run_misses_them():
    # The bug: a*(1/b) passed the default run. Its other data still lets it through,
    # but for half_precision_rounding's bf16 quotients of float data (shown below).
    plain = [c for c in _default_cases() if c.data.kind != "edge" and not c.name.startswith("half_precision")]
    kills = hunt(plain, mutants=_mutants(["div_as_reciprocal", "cast_ties_away", "log_range_reduced"]),
                 backends=("spmd",))
    assert [(k.mutant.name, k.killed) for k in kills] == [
        ("div_as_reciprocal", False), ("cast_ties_away", False), ("log_range_reduced", False)]


def test_bf16_quotients_of_float_data_also_expose_a_reciprocal_division():
    rounding = [c for c in _default_cases() if c.name.startswith("half_precision_rounding")]
    (kill,) = hunt(rounding, mutants=_mutants(["div_as_reciprocal"]), backends=("spmd",))
    assert kill.killed and kill.first.startswith("half_precision_rounding"), kill.first


@pytest.mark.parametrize("name, program", [("div_as_reciprocal", "edge_elementwise"),
                                           ("cast_ties_away", "edge_casts"),
                                           ("combine_drops_later_nan", "edge_reductions")])
def test_each_edge_file_kills_its_mutant_by_values(name, program):
    (kill,) = hunt(cases_of(CORPUS / f"{program}.rir", "corpus"), mutants=_mutants([name]), backends=("spmd",))
    assert kill.killed and kill.first.startswith(f"{program}/edge: values:"), kill.first


# ---- coverage: reaching is not exposing ------------------------------------------------------


def test_div_on_small_integers_is_reached_but_not_exposed():
    cov = Coverage().measure([_div_case("exact")])
    assert ("div", "f32") in cov.local
    assert missing_classes(cov, "div", "f32") == ["a*(1/b)", "flush to zero"]
    assert "div on f32: reached, but no case's data exposed a*(1/b), flush to zero" in not_reached(cov, 0, 0)
    local = render(cov, 0, 0).split("communications x mesh axis")[0]
    (div,) = [line for line in local.splitlines() if line.startswith("div ")]
    assert div.split() == ["div", "✗", "·", "✗", "✗"]  # f16 f32 f64 bf16: f32 reached, never exposed
    cov = Coverage().measure([_div_case("edge")])
    assert missing_classes(cov, "div", "f32") == []
    assert ("div", "f32", "a*(1/b)") in exposed(_div_case("edge"))


def test_a_class_counts_only_where_it_changes_a_result():
    # The same division, its result cast to bool: a one-ulp error never reaches a result.
    text = ("mesh m = [0]\nfunc main(x: f32[4, 8], y: f32[4, 8]) {\n  q = div(x, y)\n"
            "  z = cast(q, dtype=bool)\n  return z\n}\n")
    case = Case("files", "div_bool", refir.parse(text), {}, DataSpec("edge", 0))
    assert not any(row == "div" and c == "a*(1/b)" for row, _, c in exposed(case))


def test_conform_coverage_prints_the_data_classes(capsys):
    assert main(["conform", "--coverage", "--cases", "0"]) == 0
    out = capsys.readouterr().out
    table = out.split("data classes:")[1].split("allowed cells not reached")[0]
    rows = {tuple(line.split()[:2]): line.split() for line in table.splitlines() if line.strip()}
    assert rows[("div", "a*(1/b)")][2:6] == ["f16", "f32", "f64", "bf16"]  # exposed on every float
    assert rows[("div", "a*(1/b)")][6] == "-"  # and missing on none
    assert re.search(r"^max\s+NaN in a later block\s+f16 f32 f64 bf16\s+-", table, re.M)
    assert re.search(r"^cast to bf16\s+ties to even\s+\S", table, re.M)
    assert "exp on f16" not in out  # within 4 ulps there: no class to expose


def test_every_class_is_exposed_somewhere_by_the_default_run():
    cov = Coverage().measure(_default_cases())
    names = {c for _, _, c in cov.classes}
    assert names == {c.name for c in ERROR_CLASSES}
    for row, dtype in [("div", d) for d in ("f16", "f32", "f64", "bf16")] + [("sqrt", "f32"), ("exp", "f32"),
                                                                              ("log", "f16"), ("cast to bf16", "f32"),
                                                                              ("cast to f16", "f64"), ("max", "f32")]:
        assert missing_classes(cov, row, dtype) == [], (row, dtype)


# ---- the wrong implementations and the data -----------------------------------------------------


def test_ties_away_and_truncation_differ_from_nearest_even_only_where_they_should():
    bf16 = DTYPES["bf16"]
    tie = np.array([1 + 2 ** -8, -(1 + 2 ** -8), 1 + 3 * 2 ** -8, 1 + 2 ** -9], np.float32)
    assert list(as_dtype(tie, bf16).astype(float)) == [1.0, -1.0, 1 + 2 ** -6, 1.0]  # nearest even
    assert list(ties_away(tie, bf16).astype(float)) == [1 + 2 ** -7, -(1 + 2 ** -7), 1 + 2 ** -6, 1.0]
    assert list(truncating(tie, bf16).astype(float)) == [1.0, -1.0, 1 + 2 ** -7, 1.0]


def test_reciprocal_division_is_wrong_on_edge_data_and_right_on_small_integers():
    rng = np.random.default_rng(0)
    a, b = (edge_values(np.dtype(np.float32), (64,), rng) for _ in range(2))
    with np.errstate(all="ignore"):
        wrong, right = recip_div(a, b), np.divide(a, b)
        assert (np.isfinite(right) & (wrong != right)).sum() >= 3
        small = np.arange(-4, 5, dtype=np.float32)
        assert (recip_div(small[:, None], np.array([1, 2, 3, 4], np.float32)) == small[:, None]
                / np.array([1, 2, 3, 4], np.float32)).all()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_edge_floats_hold_every_pool():
    rng = np.random.default_rng(1)
    x = edge_values(np.dtype(np.float64), (4, 8), rng)
    f16, bf16 = np.dtype(np.float16), DTYPES["bf16"]
    assert np.isnan(x).any() and np.isinf(x).any()
    assert ((np.abs(x) < np.finfo(np.float64).tiny) & (x != 0)).any()  # subnormal
    assert ((x < 0) & (x != np.round(x)) & (x > -101)).any()  # negative fraction
    assert (ties_away(x, f16) != as_dtype(x, f16)).any() and (ties_away(x, bf16) != as_dtype(x, bf16)).any()
    assert (x.astype(np.float32).astype(f16) != x.astype(f16)).any()  # f64 -> f16 rounds twice through f32


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_edge_integers_hold_ties_of_every_narrower_float():
    rng = np.random.default_rng(2)
    x = edge_values(np.dtype(np.int64), (4, 8), rng)
    assert (x.astype(np.float64).astype(np.float32) != x.astype(np.float32)).any()  # i64 -> f32 via f64
    for to in map(np.dtype, (np.float16, np.float32, np.float64)):
        right = as_dtype(x, to)  # a tie with an even lower neighbour shows ties-away, an odd one truncation
        assert ((ties_away(x, to) != right) | (truncating(x, to) != right)).any(), to


def _site(x: np.ndarray, extent: int) -> Site:
    t = TensorType("f32", (Axis(extent, "DIDx"), Axis(2)), Mesh("m", (4,), (0, 1, 2, 3)))
    return Site(ops.Reduction("max", (0,)), [x], [t], x.dtype)


def test_nan_in_a_later_block_and_empty_blocks():
    from conformance.classes import _empty_block, _nan_later_block

    x = np.array([[-1, -2], [-3, np.nan], [-5, -6]], np.float32)  # 3 rows over 4 devices: 1, 1, 1, 0
    assert np.isnan(_nan_later_block(_site(x, 3))[1]) == np.False_  # device 1's NaN dropped
    first = np.array([[np.nan, -2], [-3, -4], [-5, -6]], np.float32)
    assert np.isnan(_nan_later_block(_site(first, 3))[0])  # device 0's NaN kept
    assert _empty_block(_site(x, 3))[0] == 0  # the empty block counted as 0 beats -1
    assert _empty_block(_site(np.ones((4, 2), np.float32), 4)) is None  # no empty block: no such site


def test_edge_reductions_put_nan_in_a_later_block_than_device_zeros():
    (case,) = cases_of(CORPUS / "edge_reductions.rir")
    x = case.inputs()["xf32"]  # 5 rows over 4 devices: device 0 holds rows 0 and 1
    later = np.isnan(x[2:]).any(axis=0) & ~np.isnan(x[:2]).any(axis=0)
    assert later.any()


def test_a_reshape_of_bools_to_a_symbolic_shape_is_judged_by_its_extents():
    # A reshape's symbols are extents: read in the tensor's dtype, N=3 was True (1), and
    # the C-order class reshaped 18 elements into (1, 3, 2) (seed 1's program 17 broke
    # `conform --coverage --cases 60 --seed 1`).
    text = """mesh m = [0]

func main(x: bool[N, 6]) {
  y = reshape(x, [N, 3, 2])
  return y
}
"""
    case = Case("files", "r", refir.parse(text), {"N": 3}, DataSpec("float", 1))
    assert ("reshape", "bool", "C order") in exposed(case)


# ---- the gpu backend agrees with the edge data --------------------------------------------------


@pytest.mark.parametrize("name", EDGE_FILES)
def test_the_gpu_backend_agrees_on_the_edge_files(name):
    (case,) = cases_of(Path(CORPUS / f"{name}.rir"))
    (outcome,) = check_case(case, ["gpu"])
    assert outcome.status == "pass", outcome.problems
