"""The generator's resharding tails (conformance/generate_forms.py, issue 29 item 6):
over a few seeds they draw `set`s between every pair of forms (replicated, sharded,
nested, partial, interleaved) on 1-D, 2-D and 3-D meshes and to another mesh, every
partial kind, partial inputs combined as spec §3.3 allows, chains of sets, split
factors that cut evenly and not, in nests and on partial values; every drawn
program verifies; the tails leave the rest of each seed's program as it was (the
second, interleaved tail the first too); the drawn programs agree on every
backend; and the generated cases alone kill the nest, partial and split factor
mutants, which the rest of the generator does not."""

import re
from collections import Counter
from functools import cache

import pytest
from helpers import assert_cases_pass

import conformance.generate as generate_module
import conformance.generate_forms as forms
from conformance.coverage import Coverage, not_reached, render
from conformance.coverage_forms import COLUMNS, SPLIT_COLUMNS, SPLIT_ROWS, allowed, pairs_of, split_columns
from conformance.explore import drawn
from conformance.generate import generate
from conformance.generate_forms import FORMS, NAMES, form_of, is_resharding
from conformance.shrink import RandomDraw
from refir.checks.verifier import verify
from refir.ir import ops
from refir.ir.types import PARTIAL_KINDS, Axis, Mesh, TensorType

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
            g = generate(RandomDraw(seed, i))
            checked = verify(g.program)  # every drawn program verifies
            sets = _tail_types(checked)
            firsts = [p for p in sets if p[0].mesh.name in ("f0", "f1")]
            for tail, got in (("tail", firsts), ("interleaved tail", sets[len(firsts):])):
                if got:
                    seen[tail] += 1
                    seen[f"chain of {len(got)}"] += 1
            for s, d in sets:
                if is_resharding(s, d):
                    seen[(form_of(s), form_of(d), "another mesh" if s.mesh != d.mesh else f"{s.mesh.ndim}-D")] += 1
                    for side, t, other in (("from", s, d), ("to", d, s)):
                        seen.update(("split", side, form_of(other), c) for c in split_columns(t, g.bindings[0]))
                for t in (s, d):
                    for a in t.axes:
                        if a.split:
                            seen[f"split {a.split} on a {t.mesh.ndim}-D mesh"] += 1
                            seen[f"interleaved on a {t.mesh.ndim}-D mesh"] += 1
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
                if p.type.interleaved():
                    seen["partial input also interleaved" if p.type.partial else "interleaved input"] += 1
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


SPLITS = [(side, other, c) for side, other in SPLIT_ROWS for c in SPLIT_COLUMNS]


@pytest.mark.parametrize("cell", SPLITS, ids=lambda p: f"{p[0]}-{p[1]}-{p[2]}")
def test_the_interleaved_tail_draws_sets_from_and_to_every_form_cut_evenly_unevenly_nested_partial(cell):
    assert drawn_facts()[("split", *cell)] > 0, sorted((k, v) for k, v in drawn_facts().items() if k[0] == "split")


@pytest.mark.parametrize("fact", ["interleaved on a 1-D mesh", "interleaved on a 2-D mesh", "interleaved on a 3-D mesh",
                                  "split (2,) on a 1-D mesh", "split (3,) on a 1-D mesh", "split (4,) on a 1-D mesh",
                                  "split (1, 2) on a 2-D mesh", "split (2, 1) on a 2-D mesh",
                                  "split (2, 2) on a 2-D mesh", "split (3, 1) on a 3-D mesh",
                                  "interleaved input", "partial input also interleaved"])
def test_the_interleaved_tail_draws_split_factors_on_every_mesh_rank_nest_and_input(fact):
    assert drawn_facts()[fact] > 0, sorted((k, v) for k, v in drawn_facts().items() if isinstance(k, str))


def test_about_half_the_programs_get_each_tail():
    n = len(SEEDS) * PROGRAMS
    assert 0.4 * n < drawn_facts()["tail"] < 0.6 * n
    assert 0.4 * n < drawn_facts()["interleaved tail"] < 0.6 * n


def test_the_tail_is_drawn_last_so_a_seeds_program_keeps_its_equations_inputs_and_cases(monkeypatch):
    monkeypatch.setattr(generate_module, "expression_tail", lambda m, made: [])  # drawn after it (its own test)
    with_tail = [generate(RandomDraw(1, i)) for i in range(40)]
    monkeypatch.setattr(forms, "INTERLEAVED_PERCENT", 0)
    first_only = [generate(RandomDraw(1, i)) for i in range(40)]
    monkeypatch.setattr(forms, "PERCENT", 0)
    without = [generate(RandomDraw(1, i)) for i in range(40)]
    grown = {"first": 0, "second": 0}
    for (a, b), which in [*((p, "second") for p in zip(with_tail, first_only)),
                          *((p, "first") for p in zip(first_only, without))]:
        fa, fb = a.program.funcs[0], b.program.funcs[0]
        assert fa.eqns[:len(fb.eqns)] == fb.eqns and fa.params[:len(fb.params)] == fb.params
        assert a.bindings == b.bindings and a.data.views[:len(b.data.views)] == b.data.views
        assert a.program.meshes[:len(b.program.meshes)] == b.program.meshes
        grown[which] += len(fa.eqns) > len(fb.eqns)
    assert grown["first"] > 10 and grown["second"] > 8, grown


def test_the_interleaved_row_places_its_form_and_the_first_tail_never_draws_it():
    mesh = Mesh("g", (2, 2), (3, 1, 0, 2))
    assert form_of(TensorType("f32", (Axis(7, "DIDx", split=(2,)),), mesh)) == "interleaved"
    assert form_of(TensorType("f32", (Axis(7, ("DIDy", "DIDx"), split=(1, 3)),), mesh)) == "interleaved"
    assert form_of(TensorType("f32", (Axis(7, ("DIDy", "DIDx")),), mesh)) == "nested"
    assert form_of(TensorType("f32", (Axis(7, "DIDx", split=(2,)),), mesh, None, ("DIDy",), "sum")) == "partial"
    assert is_resharding(TensorType("f32", (Axis(7, "DIDx", split=(2,)),), mesh),
                         TensorType("f32", (Axis(7, "DIDx"),), mesh))
    for seed in SEEDS:
        for i in range(PROGRAMS):
            for s, d in _tail_types(verify(generate(RandomDraw(seed, i)).program)):
                if s.mesh.name in ("f0", "f1"):
                    assert not s.interleaved() and not d.interleaved(), (seed, i, s, d)


def test_split_columns_tell_even_runs_from_uneven_ones():
    mesh = Mesh("g", (2, 2), (0, 1, 2, 3))
    assert split_columns(TensorType("f32", (Axis(8, "DIDx", split=(2,)),), mesh), {}) == ["even"]
    assert split_columns(TensorType("f32", (Axis(7, "DIDx", split=(2,)),), mesh), {}) == ["uneven"]
    nest = Axis("N", ("DIDy", "DIDx"), split=(2, 1))
    assert split_columns(TensorType("f32", (nest,), mesh, None, (), ""), {"N": 8}) == ["even", "in a nest"]
    assert split_columns(TensorType("f32", (Axis(3, "DIDx", split=(3,)),), mesh, None, ("DIDy",), "max"),
                         {}) == ["uneven", "partial"]
    assert split_columns(TensorType("f32", (Axis(8, "DIDx"),), mesh), {}) == []


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
                                  ("replicated", "partial", "2-D"), ("nested", "nested", "2-D"),
                                  ("interleaved", "partial", "2-D"), ("partial", "interleaved", "3-D"),
                                  ("interleaved", "interleaved", "another mesh"), ("nested", "interleaved", "2-D"),
                                  ("interleaved", "sharded", "1-D")])
def test_drawn_programs_of_each_pair_agree_on_every_backend(pair):
    index = next(i for i in range(PROGRAMS) if any(
        is_resharding(s, d) and (form_of(s), form_of(d), "another mesh" if s.mesh != d.mesh else
                                 f"{s.mesh.ndim}-D") == pair
        for s, d in _tail_types(verify(generate(RandomDraw(0, i)).program))))
    assert_cases_pass(drawn(0, index), context=(pair, index))


# split_factor_off_by_one shows only where the runs of sf and sf + 1 are as long (5, 12, 13
# rows over 2 or 3 devices): the first program of seed 0 that kills it is 73.
@pytest.mark.parametrize("name, programs", [("nest_order_swapped", 60), ("partial_as_reduced", 60),
                                            ("split_factor_off_by_one", 80)])
def test_the_generated_cases_alone_kill_the_nest_partial_and_split_factor_mutants(name, programs, monkeypatch):
    from conformance.mutants import MUTANTS
    from conformance.teeth import hunt

    mutant = [m for m in MUTANTS if m.name == name]
    (kill,) = hunt([c for i in range(programs) for c in drawn(0, i)], mutants=mutant)
    assert kill.killed and kill.first.startswith("gen0-"), (name, kill.first)
    value = kill.first.split("elements of ")[1].split()[0]  # the result that differs ...
    index = int(kill.first.split("-")[1].split("/")[0].split("[")[0])
    checked = verify(generate(RandomDraw(0, index)).program)
    assert checked.types[value].mesh.name.startswith("f")  # ... is the tail's
    monkeypatch.setattr(forms, "PERCENT", 0)  # without the tails, the same programs do not kill it
    monkeypatch.setattr(forms, "INTERLEAVED_PERCENT", 0)
    (kill,) = hunt([c for i in range(programs) for c in drawn(0, i)], mutants=mutant)
    assert not kill.killed, kill.first


def test_an_avg_partials_set_to_a_mesh_without_its_mesh_axes_draws_no_partial():
    """An avg target keeps its source's mesh axes, so no partial fits on a mesh that lacks
    them (the sweep's seed 1 program 945 asked a 1-D mesh for DIDy's size)."""
    two, one = Mesh("f2", (2, 2), (3, 1, 0, 2)), Mesh("f3", (4,), (0, 1, 2, 3))
    avg = TensorType("f32", (Axis(4), Axis(6, "DIDx", split=(2,))), two, None, ("DIDy",), "avg")
    axes = (Axis(4), Axis(6))
    assert forms._partial_fits(forms.Source("f32", axes, two, avg, True))
    assert not forms._partial_fits(forms.Source("f32", axes, one, avg, True))
    assert_cases_pass(drawn(1, 945), context=(1, 945))
