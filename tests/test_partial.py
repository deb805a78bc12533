"""Partial values as types (docs/spec.md §3.3): text, builder, lowering, the terms
each device holds, and every backend's results (the verifier's refusals are in
test_verify_partial.py, test_partial_c1..c5)."""

import numpy as np
import pytest

import refir
from conformance.data import edge_values
from interp.impls import fold
from refir.frontends.builder import Builder
from refir.ir import ops
from refir.ir.types import DTYPES, PARTIAL_KINDS, TensorType
from refir.lowering.lower import lower
from refir.running.partial_inputs import partial_term

MESH = "mesh m = [[2, 0], [3, 1]]\n"


def checked(body: str, params: str):
    return refir.verify(refir.parse(MESH + f"func main({params}) {{\n{body}\n}}\n"))


def test_every_kind_round_trips_through_the_text():
    for kind in PARTIAL_KINDS:
        text = MESH + f"func main(x: f32[4, 2] partial[{kind}@DIDx,DIDy] layout[1, 0]) {{\n  return x\n}}\n"
        p = refir.parse(text)
        t = p.funcs[0].params[0].type
        assert (t.partial, t.partial_kind, t.layout) == (("DIDy", "DIDx"), kind, (1, 0))
        assert refir.parse(refir.print_program(p)) == p
        assert str(t) == f"f32[4, 2] on m layout[1, 0] partial[{kind}@DIDy,DIDx]"


def test_the_builder_makes_and_reduces_partial_values():
    b = Builder()
    b.mesh([[0, 1], [2, 3]])
    x = b.input("x", "i32", [5, 3], partial=("sum", ["DIDx"]))
    c = b.input("c", "i32", [5, 3])
    y = (x + x) * c
    r = y.set(shard={0: "DIDx"})  # a resharding of a partial reduces it: a reduce_scatter
    p = r.set(shard={}, partial=("max", ["DIDy"]))  # replicated -> partial
    b.output(y, r, p)
    prog = b.build()
    types = refir.verify(prog).types
    assert (types["x"].partial, types[y.name].partial_kind, types[r.name].partial) == (("DIDx",), "sum", ())
    assert (types[p.name].partial_kind, types[p.name].partial) == ("max", ("DIDy",))
    assert refir.parse(refir.print_program(prog)) == refir.parse(refir.print_program(prog))
    steps = [type(s.op) for s in lower(refir.verify(prog)).steps]
    assert ops.ReduceScatter in steps and ops.Partition in steps


def _plan(c, name):
    return [(ops.op_name(s.op), s.op) for s in lower(c).steps if s.eqn.out == name]


def test_set_to_and_from_partial_lowers_as_the_spec_says():
    c = checked("  r: i32[5, 3] = set(x)\n  s: i32[5@DIDx, 3] = set(x)\n"
                "  p: i32[5, 3] partial[sum@DIDy,DIDx] = set(x)\n"
                "  q: i32[5, 3] partial[sum@DIDx] = set(r)\n  v: f32[4] = set(a)\n  return r, s, p, q, v",
                "x: i32[5, 3] partial[sum@DIDx], a: f32[4] partial[avg@DIDy,DIDx]")
    assert _plan(c, "r") == [("allreduce", ops.Allreduce("sum", ("DIDx",)))]
    assert _plan(c, "s") == [("reduce_scatter", ops.ReduceScatter("sum", "DIDx", 0))]
    assert _plan(c, "p") == [("partition", ops.Partition("sum", ("DIDy",)))]  # DIDx kept: no move
    assert _plan(c, "q") == [("partition", ops.Partition("sum", ("DIDx",)))]
    assert _plan(c, "v") == [("div", ops.Binary("div")), ("allreduce", ops.Allreduce("sum", ("DIDy", "DIDx")))]


def _folds_back(t: TensorType, x: np.ndarray, n: int) -> None:
    terms = [partial_term(t, x, k, n, "x") for k in range(n)]
    kind = "sum" if t.partial_kind == "avg" else t.partial_kind
    for order in (terms, terms[::-1], terms[1:] + terms[:1]):  # exact in any order of the fold
        with np.errstate(all="ignore"):
            got = fold(kind, order)
            if t.partial_kind == "avg":
                got = (got / got.dtype.type(n)).astype(got.dtype)
        assert got.dtype == x.dtype
        same = (got == x) | (np.isnan(got.astype(np.float64)) & np.isnan(x.astype(np.float64))) \
            if x.dtype.kind not in "biu" else got == x
        assert same.all(), (t, n, x[~same][:4], got[~same][:4])
        if x.dtype.kind not in "biu":  # the sign of zero too
            zero = x == 0
            assert (np.signbit(got[zero]) == np.signbit(x[zero])).all()
    if n > 1 and (t.partial_kind == "sum" and x.dtype.kind in "iu" or t.partial_kind == "prod" and x.dtype.kind == "i"):
        assert not np.array_equal(terms[0], x)  # term 0 is not the value itself (unsigned prods have no signs)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kind", PARTIAL_KINDS)
def test_a_partial_inputs_terms_reduce_to_it_exactly(dtype, kind):
    """Edge values (NaN, infinities, signed zeros, subnormals, extremes) included."""
    mesh = refir.parse(MESH + "func main(x: f32[1]) {\n  return x\n}\n").meshes[0]
    t = TensorType(dtype, (), mesh, None, ("DIDx",), kind)
    if (dtype == "bool" and kind in ("sum", "prod", "avg")) or (kind == "avg" and dtype not in
                                                                  ("f16", "bf16", "f32", "f64")):
        return  # partial_c2
    x = edge_values(DTYPES[dtype], (400,), np.random.default_rng(3))
    for n in (1, 2, 4):
        if kind == "avg":  # values whose n-fold overflows have no avg terms (an InputError)
            with np.errstate(all="ignore"):
                x = np.where(np.isfinite((x * x.dtype.type(n)).astype(x.dtype)) | ~np.isfinite(x), x,
                             x.dtype.type(1)).astype(x.dtype)
        _folds_back(t, x, n)


PROGRAM = MESH + """func main(a: i32[5, 3] partial[sum@DIDx], c: i32[5, 3], f: f32[6] partial[max@DIDy]) {
  t: i32[5, 3] partial[sum@DIDx] = mul(a, c)
  r: i32[5, 3] = set(t)
  s: i32[5@DIDy, 3] = set(t)
  p: i32[5, 3] partial[sum@DIDy] = set(r)
  g: f32[6] partial[max@DIDy] = maximum(f, 0.0)
  return r, s, p, g, t
}
"""


@pytest.mark.parametrize("backend", ["global", "spmd", "gpu"])
def test_every_backend_gives_the_reduced_values(backend):
    rng = np.random.default_rng(0)
    a = rng.integers(-50, 50, (5, 3)).astype(np.int32)
    c = rng.integers(-3, 4, (5, 3)).astype(np.int32)
    f = rng.standard_normal(6).astype(np.float32)
    got = refir.run(PROGRAM, {"a": a, "c": c, "f": f}, backend=backend).outputs
    want = {"r": a * c, "s": a * c, "p": a * c, "g": np.maximum(f, 0), "t": a * c}
    for k, v in want.items():
        assert np.array_equal(got[k], v), k


def test_each_device_holds_its_term():
    rng = np.random.default_rng(1)
    a = rng.integers(-50, 50, (5, 3)).astype(np.int32)
    c = np.ones((5, 3), np.int32)
    f = np.zeros(6, np.float32)
    res = refir.run(PROGRAM, {"a": a, "c": c, "f": f}, backend="spmd", keep="all")
    # devices [[2, 0], [3, 1]]: teams along DIDx are (2, 0) and (3, 1); term 0 with devices 2 and 3
    held = res.kept["a"]
    assert not np.array_equal(held[2], a) and np.array_equal(held[2] + held[0], a)
    assert np.array_equal(held[2], held[3]) and np.array_equal(held[0], held[1])
    # r -> partial over DIDy (teams (2, 3) and (0, 1)): devices 2 and 0 keep it, 3 and 1 hold zeros
    p = res.shards["p"]
    assert np.array_equal(p[2], a) and np.array_equal(p[0], a)
    assert not p[3].any() and not p[1].any()
    # a reduce_scatter over DIDx of 5 rows: 3 and 2, each the sum of its team's terms
    s = res.shards["s"]
    assert [s[d].shape for d in (2, 0, 3, 1)] == [(3, 3), (3, 3), (2, 3), (2, 3)]


def test_the_mutant_that_takes_a_term_for_the_value_is_killed():
    from conformance.cases import CORPUS, cases_of
    from conformance.mutants import MUTANTS
    from conformance.teeth import hunt

    cases = cases_of(CORPUS / "partial_sum_linear.rir")
    assert cases
    (kill,) = hunt(cases, mutants=[m for m in MUTANTS if m.name == "partial_as_reduced"], backends=("spmd",))
    assert kill.killed, kill


def test_partial_mesh_axes_are_one_order_however_named():
    # a matmul over K@(DIDy,DIDx) declared partial over DIDx,DIDy is the type it infers: no copy
    text = ("mesh m = [[0, 1], [2, 3]]\n"
            "func main(a: f32[3, 8@(DIDy,DIDx)], w: f32[8@(DIDy,DIDx), 5]) {\n"
            "  p: f32[3, 5] on m partial[sum@DIDx,DIDy] = matmul(a, w)\n"
            "  return p\n}\n")
    from refir.checks.verifier import verify
    from refir.lowering.lower import lower
    from refir.text.parser import parse
    checked = verify(parse(text))
    assert str(checked.types["p"]).endswith("partial[sum@DIDy,DIDx]")
    assert [type(s.op).__name__ for s in lower(checked).steps] == ["Matmul"]


OVERFLOWING_TERMS = """mesh g = [[0, 1], [2, 3]]
func main(x: f16[2] partial[avg@DIDy,DIDx]) {
  t = mul(x, 2.0)
  r: f16[2] = set(t)
  return r
}
"""


def test_a_term_that_may_overflow_where_the_value_fits_leaves_it_unconstrained(monkeypatch):
    """An f16 avg of 4 holds terms of 4X: at X = -16376 they reach -65504, times 2.0 they
    overflow though 2X fits (the sweep's gen0-526): num_c8's M passes the range, the
    bound is infinite there (num_c6), and a value that fits stays held to its bound."""
    from conformance import cases
    from conformance.cases import Case
    from conformance.check import check_backend, reference_of
    from conformance.data import DataSpec

    x = np.array([-16376.0, 3.0], np.float16)
    monkeypatch.setattr(cases, "make_inputs", lambda params, bindings, spec: {"x": x.copy()})
    case = Case("generated", "overflowing-terms", refir.parse(OVERFLOWING_TERMS), {}, DataSpec("exact", 0))
    ref = reference_of(case)
    assert ref.values["r"].tolist() == [-32752.0, 6.0]
    assert np.isinf(ref.bounds["r"][0]) and np.isfinite(ref.bounds["r"][1])
    for backend in ("spmd", "gpu"):
        assert check_backend(case, backend, ref) == [], backend


def test_an_avg_inputs_drawn_values_leave_room_for_its_terms():
    """Edge data held f16 values whose 4-fold overflows, which no avg terms sum to (the
    sweep's gen0-256 stopped `conform` with an InputError): those are divided by n."""
    from conformance.data import DataSpec, avg_room, make_inputs

    x = np.array([4e4, -2e4, 1e4, np.inf, np.nan, -0.0], np.float16)
    got = avg_room(x, 4)
    assert got.dtype == np.float16 and got[:4].tolist() == [1e4, -5e3, 1e4, np.inf]
    assert np.isnan(got[4]) and np.signbit(got[5])
    t = checked("  return x", "x: f16[64, 8] partial[avg@DIDy,DIDx]").func.params[0].type
    for seed in range(5):
        v = make_inputs([("x", t)], {}, DataSpec("edge", seed))["x"]
        with np.errstate(all="ignore"):
            assert np.all(np.isfinite((v * np.float16(4)).astype(np.float16)) | ~np.isfinite(v))
