"""The generator's resharding tail (conformance/generate_forms.py, issue 29 item 6):
over a few seeds it draws `set`s between every pair of forms (replicated, sharded,
nested, partial) on 1-D, 2-D and 3-D meshes and to another mesh, every partial kind,
partial inputs combined as spec §3.3 allows, chains of sets; every drawn program
verifies; the tail leaves the rest of each seed's program as it was; the drawn
programs agree on every backend; and the generated cases alone kill the nest and
partial mutants, which the rest of the generator does not."""

import re
from collections import Counter
from functools import cache

import pytest
from helpers import assert_cases_pass

import conformance.generate as generate_module
import conformance.generate_forms as forms
from conformance.coverage import Coverage, not_reached, render
from conformance.coverage_forms import COLUMNS, allowed, pairs_of
from conformance.explore import drawn
from conformance.generate import generate
from conformance.generate_forms import FORMS, NAMES, form_of, is_resharding
from conformance.shrink import RandomDraw
from refir.checks.verifier import verify
from refir.ir import ops
from refir.ir.types import PARTIAL_KINDS, TensorType

SEEDS = (0, 1)
PROGRAMS = 300


def _tail_types(checked: object) -> list[tuple[TensorType, TensorType]]:
    types = checked.types  # type: ignore[attr-defined]
    return [(types[e.args[0].name], types[e.out]) for e in checked.func.eqns  # type: ignore[attr-defined]
            if isinstance(e.op, ops.Set) and types[e.out].mesh.name.startswith("f")]


@cache
def drawn_facts() -> Counter:
    seen: Counter = Counter()
    for seed in SEEDS:
        for i in range(PROGRAMS):
            checked = verify(generate(RandomDraw(seed, i)).program)  # every drawn program verifies
            sets = _tail_types(checked)
            if sets:
                seen["tail"] += 1
                seen[f"chain of {len(sets)}"] += 1
            for s, d in sets:
                if is_resharding(s, d):
                    seen[(form_of(s), form_of(d), "another mesh" if s.mesh != d.mesh else f"{s.mesh.ndim}-D")] += 1
                if s.partial:
                    seen[f"from {s.partial_kind}"] += 1
                nests = [len(a.dids) for t in (s, d) for a in t.axes if a.nested]
                seen.update(f"nest of {n}" for n in nests)
                if any(t.mesh.ndim > 1 and list(t.mesh.devices) != sorted(t.mesh.devices) for t in (s, d)):
                    seen["permuted mesh of 2-D or more"] += 1
            for e in checked.func.eqns:
                args = [checked.types[a.name] for a in e.args if hasattr(a, "name") and a.name in checked.types]
                if isinstance(e.op, ops.Binary) and args and args[0].partial:
                    seen[f"{e.op.name} of a {args[0].partial_kind}-partial"] += 1
            for p in checked.func.params:
                if p.type.partial and any(a.shard for a in p.type.axes):
                    seen["partial input also sharded"] += 1
    return seen


PAIRS = [(s, d, c) for s in NAMES for d in NAMES for c in COLUMNS if allowed(s, d, c)]


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}->{p[1]}@{p[2]}")
def test_the_tail_draws_every_pair_of_forms_on_every_mesh_rank(pair):
    assert drawn_facts()[pair] > 0, sorted((k, v) for k, v in drawn_facts().items() if isinstance(k, tuple))


@pytest.mark.parametrize("fact", [*(f"from {k}" for k in PARTIAL_KINDS), "nest of 2", "nest of 3",
                                  "chain of 1", "chain of 2", "chain of 3", "permuted mesh of 2-D or more",
                                  "add of a sum-partial", "mul of a sum-partial", "mul of a prod-partial",
                                  "maximum of a max-partial", "partial input also sharded"])
def test_the_tail_draws_every_kind_nest_chain_and_legal_reader(fact):
    assert drawn_facts()[fact] > 0, sorted((k, v) for k, v in drawn_facts().items() if isinstance(k, str))


def test_about_half_the_programs_get_a_tail():
    assert 0.4 * len(SEEDS) * PROGRAMS < drawn_facts()["tail"] < 0.6 * len(SEEDS) * PROGRAMS


def test_the_tail_is_drawn_last_so_a_seeds_program_keeps_its_equations_inputs_and_cases(monkeypatch):
    monkeypatch.setattr(generate_module, "expression_tail", lambda m, made: [])  # drawn after it (its own test)
    with_tail = [generate(RandomDraw(1, i)) for i in range(40)]
    monkeypatch.setattr(forms, "PERCENT", 0)
    without = [generate(RandomDraw(1, i)) for i in range(40)]
    grown = 0
    for a, b in zip(with_tail, without):
        fa, fb = a.program.funcs[0], b.program.funcs[0]
        assert fa.eqns[:len(fb.eqns)] == fb.eqns and fa.params[:len(fb.params)] == fb.params
        assert a.bindings == b.bindings and a.data.views[:len(b.data.views)] == b.data.views
        grown += len(fa.eqns) > len(fb.eqns)
    assert grown > 10


def test_forms_classify_every_type_once():
    for seed in SEEDS:
        for i in range(60):
            for t in verify(generate(RandomDraw(seed, i)).program).types.values():
                assert sum(f.is_of(t) for f in FORMS) == 1, t


def test_coverage_counts_pairs_and_lists_the_missing_ones():
    cases = [c for i in range(30) for c in drawn(1, i)]
    cov = Coverage().measure(cases)
    total = Counter()
    seen = set()
    for c in cases:
        if id(c.program) not in seen:
            seen.add(id(c.program))
            total += pairs_of(c)
    assert cov.pairs == total and sum(total.values()) > 20
    out = render(cov, 30, 1)
    table = out.split("reshardings (set) from form to form")[1].split("reshardings from a partial value")[0]
    rows = {m[1]: m[2].split() for m in re.finditer(r"^(\w+ -> \w+) +(.*)$", table, re.M)}
    assert len(rows) == len(NAMES) ** 2
    assert rows["replicated -> replicated"] == [str(cov.pairs[("replicated", "replicated", "another mesh")])]
    missing = not_reached(cov, 30, 1)
    for s, d, col in PAIRS:
        where = "another mesh" if col == "another mesh" else f"a {col} mesh"
        line = f"a set {s} -> {d} on {where}: 30 generated programs (seed 1) did not draw it"
        assert (line in "\n".join(missing)) == (cov.pairs[(s, d, col)] == 0), (s, d, col)


@pytest.mark.parametrize("pair", [("partial", "nested", "3-D"), ("nested", "sharded", "another mesh"),
                                  ("replicated", "partial", "2-D"), ("nested", "nested", "2-D")])
def test_drawn_programs_of_each_pair_agree_on_every_backend(pair):
    index = next(i for i in range(PROGRAMS) if any(
        is_resharding(s, d) and (form_of(s), form_of(d), "another mesh" if s.mesh != d.mesh else
                                 f"{s.mesh.ndim}-D") == pair
        for s, d in _tail_types(verify(generate(RandomDraw(0, i)).program))))
    assert_cases_pass(drawn(0, index), context=(pair, index))


@pytest.mark.parametrize("name", ["nest_order_swapped", "partial_as_reduced"])
def test_the_generated_cases_alone_kill_the_nest_and_partial_mutants(name, monkeypatch):
    from conformance.mutants import MUTANTS
    from conformance.teeth import hunt

    mutant = [m for m in MUTANTS if m.name == name]
    (kill,) = hunt([c for i in range(60) for c in drawn(0, i)], mutants=mutant)
    assert kill.killed and kill.first.startswith("gen0-"), (name, kill.first)
    value = kill.first.split("elements of ")[1].split()[0]  # the result that differs ...
    index = int(kill.first.split("-")[1].split("/")[0].split("[")[0])
    checked = verify(generate(RandomDraw(0, index)).program)
    assert checked.types[value].mesh.name.startswith("f")  # ... is the tail's
    monkeypatch.setattr(forms, "PERCENT", 0)  # without the tail, the same programs do not kill it
    (kill,) = hunt([c for i in range(60) for c in drawn(0, i)], mutants=mutant)
    assert not kill.killed, kill.first
