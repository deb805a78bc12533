"""The generator's reshapes of extent expressions (conformance/generate_reshape_expr.py,
issue 27): drawn after every other draw, so the programs of older seeds are theirs
with this tail appended; over a few hundred seeds they split symbolic axes by an
integer and by a symbol, merge into products, add an extent-1 axis, write -1 for an
expression, keep sharded groups local, and agree on every backend; `--coverage`'s
reshape table names what they reach."""

from collections import Counter
from functools import cache

from helpers import assert_cases_pass

import conformance.generate as generate_module
from conformance.explore import drawn
from conformance.generate import generate
from conformance.reshape_coverage import ROWS, cells_of, missing
from conformance.shrink import RandomDraw
from refir.checks.rules_reshape import INFERRED
from refir.ir import ops
from refir.ir.extents import ExtentExpr

PROGRAMS = 300


def _kinds(case: object) -> set[str]:
    checked = case.checked  # type: ignore[attr-defined]
    (written,) = [f for f in checked.program.funcs if f.name == checked.func.name]
    out = set()
    for given, e in zip(written.eqns, checked.func.eqns):
        if not isinstance(e.op, ops.Reshape):
            continue
        x, y = checked.types[e.tensor_args()[0]], checked.types[e.out]
        exprs = [v for v in e.op.shape if isinstance(v, ExtentExpr)]
        out |= {"integer divisor" for v in exprs if isinstance(v.den, int) and v.den > 1}
        out |= {"symbol divisor" for v in exprs if isinstance(v.den, str)}
        out |= {"product" for v in exprs if v.den == 1}
        if INFERRED in given.op.shape and isinstance(e.op.shape[given.op.shape.index(INFERRED)], ExtentExpr):
            out.add("-1 is an expression")
        if exprs and y.sharding() and not any(isinstance(p.op, ops.Set) and p.out == e.args[0].name
                                              for p in checked.func.eqns):
            out.add("sharded, local")
        if any(isinstance(a.extent, ExtentExpr) for a in x.axes) and not exprs:
            out.add("back to plain extents")
    return out


@cache
def _drawn() -> dict[int, set[str]]:
    return {i: _kinds(drawn(0, i)[0]) for i in range(PROGRAMS)}


def test_the_tail_draws_every_kind_of_expression_reshape():
    counts = Counter(k for kinds in _drawn().values() for k in kinds)
    assert set(counts) == {"integer divisor", "symbol divisor", "product", "-1 is an expression",
                           "sharded, local", "back to plain extents"}, counts
    assert sum(1 for kinds in _drawn().values() if kinds) >= PROGRAMS // 10


def test_older_seeds_keep_their_programs_and_gain_only_the_tail(monkeypatch):
    real = {i: generate(RandomDraw(0, i)).program.funcs[0] for i in range(60)}
    monkeypatch.setattr(generate_module, "expression_tail", lambda m, made: [])
    changed = 0
    for i, f in real.items():
        old = generate(RandomDraw(0, i)).program.funcs[0]
        assert f.params[:len(old.params)] == old.params and f.eqns[:len(old.eqns)] == old.eqns, i
        assert f.results[:len(old.results)] == old.results, i
        changed += f != old
    assert changed  # the tail did draw something


def test_the_drawn_programs_agree_on_every_backend():
    wanted = ["symbol divisor", "-1 is an expression", "sharded, local", "back to plain extents"]
    seeds = [next(i for i, kinds in _drawn().items() if k in kinds) for k in wanted]
    for i in dict.fromkeys(seeds):
        assert_cases_pass(drawn(0, i), context=i)


def test_the_coverage_cells_of_a_drawn_program():
    cells = set().union(*(cells_of(drawn(0, i)[0]) for i in range(PROGRAMS)))
    assert {(r, c) for r in ROWS for c in ("expression", "-1 is an expression", "sharded group")} <= cells
    assert missing(cells, "why") == []
    i = next(i for i, kinds in _drawn().items() if "-1 is an expression" in kinds)
    assert any(c == "-1 is an expression" for _, c in cells_of(drawn(0, i)[0]))
