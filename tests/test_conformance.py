"""The conformance suite: its corpus, its generator, its comparator and its teeth.

The two long runs (corpus and 200 generated programs on every backend, alone
here and under mpirun in test_conformance_mpi.py) are what CI relies on; the
rest pins the pieces down one by one.
"""

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from math import prod
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT
from hypothesis import given, settings

import refir
from conformance.bounds import reference
from conformance.cases import CORPUS, Case, bundled_cases, cases_of
from conformance.check import check_backend, reference_of
from conformance.cli import available_backends
from conformance.compare import bad_elements
from conformance.data import SENTINEL, DataSpec, View, place
from conformance.explore import replayed, spans
from conformance.generate import BUDGET, generate
from conformance.shrink import RandomDraw, shrink
from conformance.strategies import cases, programs
from conformance.teeth import hunt, table
from refir.cli import main
from refir.frontends.builder import Builder
from refir.ir import ops
from refir.ir.types import extent_value
from refir.lowering.lower import lower
from refir.running.bindings import bind_inputs, devices_needed
from refir.text.printer import print_program

CORPUS_FILES = sorted(CORPUS.glob("*.rir"))


def lowered_corpus():
    return [(f.stem, lower(refir.verify(refir.load(f)))) for f in CORPUS_FILES]


# ---- the corpus --------------------------------------------------------------------


def test_corpus_has_forty_programs_each_with_expect_lines():
    assert len(CORPUS_FILES) >= 40
    for f in CORPUS_FILES:
        assert refir.load(f).expects, f"{f.name} has no # expect: line"


def test_corpus_runs_every_communication_with_both_layouts_on_both_sides():
    """Each communication reads and writes row-major and non-row-major buffers.
    What a reducing one sends is always the local partial lowering makes, which
    is row-major; its destination still comes both ways."""
    seen = defaultdict(set)
    for _, low in lowered_corpus():
        for step in low.steps:
            if step.is_communication:
                src = low.types[step.tensor_args()[0]]
                seen[type(step.op)].add(("src", src.order == tuple(range(src.rank))))
                seen[type(step.op)].add(("dst", step.type.order == tuple(range(step.type.rank))))
    reducing = (ops.Allreduce, ops.Reduce, ops.ReduceScatter)
    for comm in ops.COMMUNICATIONS:
        sides = ("dst",) if comm in reducing else ("src", "dst")
        want = {(side, row_major) for side in sides for row_major in (True, False)}
        assert want <= seen[comm], f"{comm.__name__}: missing {sorted(want - seen[comm])}"


def test_corpus_meshes_and_symbols():
    sizes, permuted, two_d, pipelines = set(), 0, 0, 0
    for f in CORPUS_FILES:
        program = refir.load(f)
        for m in program.meshes:
            if m.ndim == 1:
                sizes.add(m.shape[0])
                permuted += list(m.devices) != sorted(m.devices)
            two_d += m.ndim == 2
        pipelines += len({t.mesh for t in refir.verify(program).types.values()}) > 1
        if refir.verify(program).symbols:
            bindings = {tuple(sorted(c.bindings.items())) for c in cases_of(f)}
            assert len(bindings) >= 2, f"{f.name} runs its symbols at one binding only"
    assert sizes >= {1, 2, 3, 4} and permuted >= 10 and two_d >= 5 and pipelines >= 5


# ---- the runs CI relies on -----------------------------------------------------------


def test_corpus_and_200_generated_programs_agree_on_every_backend(tmp_path, capsys):
    junit = tmp_path / "conform.xml"
    rc = main(["conform", "--cases", "200", "--junit", str(junit), "--save", str(tmp_path / "fails")])
    out = capsys.readouterr().out
    assert rc == 0, out
    suite = ET.parse(junit).getroot().find("testsuite")
    backends = available_backends()
    assert int(suite.get("failures")) == 0
    assert {c.get("classname").split(".")[1] for c in suite.iter("testcase")} == set(backends)
    generated = {c.get("name") for c in suite.iter("testcase") if c.get("classname").endswith(".generated")}
    assert len({n.split("[")[0].split("/")[0] for n in generated}) == 200
    assert int(suite.get("tests")) == len(list(suite.iter("testcase"))) > 200 * len(backends)


def test_every_mutant_is_killed_by_its_check():
    """Each mutant stops at its first kill (the whole table, every count, is
    docs/conformance.md's sample, which tests/test_docs_samples.py runs)."""
    kills = hunt(bundled_cases(), until_killed=True)
    print(table(kills))
    assert len(kills) >= 8
    for k in kills:
        assert k.killed, f"{k.mutant.name} survives ({dict(k.checks)})"
        assert k.checks[k.mutant.by] == 1 or k.not_run, f"{k.mutant.name} ran on past its first kill"


# ---- failures: caught, shrunk, saved, replayed ---------------------------------------


def replay(command: str, cwd: Path, path: Path | None = None) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": f"{ROOT}{':' + str(path) if path else ''}", "NUMBA_ENABLE_CUDASIM": "1", "PATH": ""}
    args = command.split()
    assert args[:3] == ["python", "-m", "refir"]
    return subprocess.run([sys.executable, *args[1:]], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_example_wrong_backend_is_caught_and_its_failure_replays(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # of seed 0's first three programs, a backend that ignores input strides fails two (0 and 2:
    # an input in another order); each failure is shrunk, saved and replayed (a process each)
    rc = main(["conform", "--backend", "conformance.examples.row_major:run", "--no-corpus", "--cases", "3",
               "--save", "fails"])
    out = capsys.readouterr().out
    assert rc == 1
    commands = sorted(set(re.findall(r"replay: (.+)", out)))
    assert len(commands) == 2, out
    for command in commands:
        assert re.match(r"python -m refir (conform|run) fails/", command), command
        saved = Path(command.split()[4])
        program = refir.load(saved)
        assert 1 <= len(program.funcs[0].eqns) <= 2, print_program(program)  # shrunk
        assert "# data: {" in saved.read_text()
        done = replay(command, tmp_path)
        assert done.returncode == 1 and "FAILED" in done.stdout, done.stdout + done.stderr


BF16_SET = """mesh m0 = [0, 1, 2]

func main(x0: bf16[2, 2, 1] on m0) {
  t1: bf16[2, 2, 1] on m0 = set(x0)
  return t1
}
# expect: t1 = np.load('want.npz')['t1']
"""


def test_a_bf16_replay_reads_its_saved_inputs_and_expected_values_bit_for_bit(tmp_path, monkeypatch, capsys):
    """np.savez keeps bf16 as raw 2-byte records (|V2): `refir run --inputs` and its expect
    line's np.load take them back as bf16, and conform's check of whether such a replay shows
    a failure reads them alike (a bf16 case of the row-major example was saved with a
    `run` replay that crashed in the expect line)."""
    from conformance.failures import replays_with_run

    monkeypatch.chdir(tmp_path)
    x = np.array([3.0, 1.0, 0.0, -2.0]).astype(refir.ir.types.DTYPES["bf16"]).reshape(2, 2, 1)
    np.savez("in.npz", x0=x)
    np.savez("want.npz", t1=x)
    Path("p.rir").write_text(BF16_SET)
    assert main(["run", "p.rir", "--inputs", "in.npz", "--backend", "spmd"]) == 0
    assert "all 1 expect lines hold" in capsys.readouterr().out
    case = Case("generated", "bf16", refir.load("p.rir"), {}, DataSpec("exact", 0))
    assert not replays_with_run(case, Path("in.npz"), "spmd")


OFF_BY_ONE = '''
import numpy as np

from interp.backend import run_spmd


def run(lowered, inputs, scalars, world):
    out = run_spmd(lowered, inputs, scalars, world)
    return {r: {d: np.array(x + x.dtype.type(1)) for d, x in bufs.items()} for r, bufs in out.items()}
'''


def test_a_wrong_value_replays_with_refir_run(tmp_path, monkeypatch, capsys):
    (tmp_path / "off_by_one.py").write_text(OFF_BY_ONE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = main(["conform", "--backend", "off_by_one:run", "--no-corpus", "--cases", "2", "--save", "fails"])
    out = capsys.readouterr().out
    assert rc == 1
    command = re.findall(r"replay: (.+)", out)[0]
    assert command.startswith("python -m refir run fails/") and "--inputs fails/" in command
    done = replay(command, tmp_path, tmp_path)
    assert done.returncode == 1 and "FAILED" in done.stdout, done.stdout + done.stderr


# ---- the generator ---------------------------------------------------------------------


@given(programs())
def test_generated_programs_verify_print_back_and_bind(g):
    program = g.program
    assert refir.parse(print_program(program)) == program
    checked = refir.verify(program)
    assert devices_needed(checked) <= 4
    for t in checked.types.values():  # an extent expression (E/4, 2*N) at its largest binding too
        assert prod(max(extent_value(a.extent, b) for b in g.bindings) for a in t.axes) <= BUDGET
    for bindings in g.bindings:
        case = Case("generated", "g", program, bindings, g.data)
        assert bind_inputs(checked, case.inputs()) == bindings


# Program 93 of seed 0, as the generator's draws make it: a change to what or in
# which order the generator draws changes the programs every seed gives. The
# resharding tail (conformance/generate_forms.py), drawn last, added meshes f0 and
# f1, input x2 and t7 to what the program was before it, and changed nothing else.
PINNED = """mesh m0 = [[[3, 0]], [[1, 2]]]
mesh m1 = [[0, 1]]
mesh f0 = [[[1], [0]], [[3], [2]]]
mesh f1 = [[[3], [0]], [[1], [2]]]

func main(x0: bf16[4@DIDy] on m1 layout[0], x1: bf16[4, 4] on m1, x2: u8[2, 2, 1@(DIDx,DIDy)] on f0) {
  t1: bf16[4] on m1 layout[0] = set(x0)
  t2 = permute(t1, [0])
  t3 = matmul(t2, x1)
  t4 = unsqueeze(t3, dims=[0])
  t5: bf16[4@DIDy, 4] on m1 layout[1, 0] = expand(t4, 4, 4)
  t6: bf16[4@DIDx, 4@DIDz] on m0 = set(t5)
  t7: u8[2, 2, 1@DIDy] on f0 = set(x2)
  return t5, t6, t7
}
"""


def test_a_seed_gives_the_same_programs_every_time_and_they_print_back():
    g = generate(RandomDraw(0, 93))
    assert print_program(g.program) == PINNED
    assert g.bindings == ({},)
    assert g.data == DataSpec("exact", 979, (("x0", View((0,), (2,), (False,))),
                                             ("x1", View((1, 0), (2, 1), (True, True))),
                                             ("x2", View((1, 0, 2), (1, 2, 1), (True, False, True)))))
    for i in range(150):
        first, second = RandomDraw(1, i), RandomDraw(1, i)
        a, b = generate(first), generate(second)
        assert (a, first.record) == (b, second.record)
        assert refir.parse(print_program(a.program)) == a.program  # the built program round-trips


def test_the_generator_makes_every_equation_through_the_builder(monkeypatch):
    calls = []
    apply = Builder.apply

    def counted(self, op, args, **kw):
        calls.append(op)
        return apply(self, op, args, **kw)

    monkeypatch.setattr(Builder, "apply", counted)
    for i in range(20):
        calls.clear()
        g = generate(RandomDraw(2, i))
        assert calls == [e.op for e in g.program.funcs[0].eqns]
        assert g.program.file == "<built>"


@settings(max_examples=30)
@given(cases())
def test_hypothesis_cases_agree_on_spmd(case):
    assert check_backend(case, "spmd", reference_of(case)) == [], print_program(case.program)


def test_shrinking_finds_a_small_program():
    """Shrink 'the program has a matmul' from the first seed that has one."""
    def has_matmul(choices):
        case = replayed(choices, "s")[0]
        return case.choices if any(isinstance(e.op, ops.Matmul) for e in case.checked.func.eqns) else None

    seed = next(s for s in range(200) if has_matmul(tuple(_record(s))))
    small = replayed(shrink(tuple(_record(seed)), has_matmul, spans), "s")[0]
    eqns = small.checked.func.eqns
    # one matmul, or one after the set that brings an operand onto its mesh
    assert len(eqns) <= 2 and isinstance(eqns[-1].op, ops.Matmul), print_program(small.program)
    assert all(isinstance(e.op, ops.Set) for e in eqns[:-1]), print_program(small.program)


def _record(seed):
    draw = RandomDraw(seed)
    generate(draw)
    return draw.record


# ---- the comparator and the numerics model -------------------------------------------


def test_nan_infinities_and_signed_zeros():
    want = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0], np.float32)
    exact = np.zeros(5)
    assert not bad_elements(np.array([np.nan, np.inf, -np.inf, -0.0, 1.0], np.float32), want, exact).any()
    wrong = np.array([1.0, np.nan, np.inf, 0.0, np.nan], np.float32)
    assert bad_elements(wrong, want, exact).tolist() == [True, True, True, False, True]
    assert not bad_elements(wrong, want, np.full(5, np.inf)).any()  # unconstrained


def test_integers_are_bit_exact():
    assert bad_elements(np.array([1, 2], np.int8), np.array([1, 3], np.int8), np.zeros(2)).tolist() == [False, True]


def bounds_of(text, **inputs):
    checked = refir.verify(refir.parse(text))
    return reference(checked, inputs, bind_inputs(checked, inputs))[1]


SUM = "mesh m = [0]\nfunc main(x: {dt}[4, 2]) {{\n  s: {dt}[2] = {kind}(x, dims=[0])\n  return s\n}}\n"


def test_float_sums_are_exact_on_integers_and_bounded_otherwise():
    ints = np.arange(8, dtype=np.float32).reshape(4, 2)
    assert not bounds_of(SUM.format(dt="f32", kind="sum"), x=ints)["s"].any()
    floats = ints + np.float32(0.25)
    b = bounds_of(SUM.format(dt="f32", kind="sum"), x=floats)["s"]
    assert np.allclose(b, 4 * np.finfo(np.float32).eps * np.abs(floats).sum(0))


def test_products_that_may_overflow_are_unconstrained():
    big = np.full((4, 2), 300.0, np.float16)
    assert np.isinf(bounds_of(SUM.format(dt="f16", kind="prod"), x=big)["s"]).all()


def test_an_inexact_float_cast_to_an_integer_is_unconstrained():
    text = ("mesh m = [0]\nfunc main(x: f32[4, 2]) {\n  s: f32[2] = sum(x, dims=[0])\n"
            "  i: i32[2] = cast(s, dtype=i32)\n  return i\n}\n")
    assert np.isinf(bounds_of(text, x=np.full((4, 2), 0.1, np.float32))["i"]).all()
    assert not bounds_of(text, x=np.ones((4, 2), np.float32))["i"].any()


# ---- input views ------------------------------------------------------------------------


@pytest.mark.parametrize("view", [View((1, 0), (2, 1), (True, False)), View((0, 1), (1, 2), (False, True)),
                                  View((2, 0, 1), (2, 2, 1), (True, True, False))])
def test_inputs_lie_in_memory_as_their_view_says(view):
    x = np.arange(prod(range(2, 2 + len(view.order))), dtype=np.float32).reshape(range(2, 2 + len(view.order)))
    v = place(x, view)
    assert np.array_equal(v, x) and not v.flags.c_contiguous
    assert [s < 0 for s in v.strides] == list(view.flip)
    assert (v.base == SENTINEL).sum() == v.base.size - x.size


def test_a_dense_data_kind_lays_every_input_out_row_major_and_names_its_case(tmp_path):
    """`# data: exact/dense`: the gpu's word copy of long rows takes only row-major inputs,
    which a drawn view is a third of the time (window_word_rows runs both)."""
    f = tmp_path / "two.rir"
    f.write_text("mesh m = [0, 1]\nfunc main(x: f32[4@DIDx, 6], y: i32[3, 2]) {\n  return x, y\n}\n"
                 "# data: exact exact/dense special/dense\n")
    drawn, dense, special = cases_of(f, seed=3)
    assert [c.name for c in (drawn, dense, special)] == ["two/exact", "two/exact/dense", "two/special/dense"]
    for case in (dense, special):
        for v in case.inputs().values():
            assert v.flags.c_contiguous and (v if v.base is None else v.base).size == v.size  # no gaps
    assert not all(v.flags.c_contiguous for v in drawn.inputs().values())  # seed 3 draws a strided view
    assert np.array_equal(dense.inputs()["x"], drawn.inputs()["x"])  # the same values, laid out anew
    f.write_text(f.read_text().replace("special/dense", "exact/rowmajor"))
    with pytest.raises(refir.RefirError, match=r"unknown data kind 'exact/rowmajor'.*may end in /dense"):
        cases_of(f)
