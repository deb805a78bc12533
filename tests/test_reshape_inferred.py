"""reshape with numpy's -1 (docs/spec.md §5.10, reshape_c5, reshape_c6): the verifier
infers the extent from the types (an integer or one symbol), lowering and every
backend get the shape with it filled in, and global, spmd, gpu (simulated) and one
MPI job agree with numpy's reshape, on sharded and uneven operands, strided inputs
and declared layouts; the builder and the printer keep the -1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import refir
from refir.frontends.builder import Builder
from refir.ir import ops
from refir.lowering.lower import lower
from tests.helpers import BACKENDS, assert_cases_pass, assert_runs_as, run_mpi

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    # heads out of a hidden axis, the head count inferred: [S, 32@DIDx] -> [S, -1, 8] is [S, 4@DIDx, 8]
    "heads": ("mesh m = [0, 1, 2, 3]", "x: f32[S, 32@DIDx]", "y = reshape(x, [S, -1, 8])", {"S": 3},
              "f32[S, 4@DIDx, 8] on m", (3, 4, 8)),
    # the symbol inferred, an uneven sharded outer axis (5 over 3: 2, 2, 1) kept whole rows
    "symbol": ("mesh m = [2, 0, 1]", "x: i32[S@DIDx, 6]", "y = reshape(x, [-1, 2, 3])", {"S": 5},
               "i32[S@DIDx, 2, 3] on m", (5, 2, 3)),
    # a merge of a sharded outer axis into a -1, a declared column-major result
    "merge": ("mesh m = [0, 1, 2, 3]", "x: f16[4@DIDx, 2, 3]", "y: f16[24@DIDx] on m = reshape(x, [-1])", {},
              "f16[24@DIDx] on m", (24,)),
    "layout": ("mesh m = [1, 0]", "x: f64[6, 4]", "y: f64[3, 8] on m layout[1, 0] = reshape(x, [3, -1])", {},
               "f64[3, 8] on m layout[1, 0]", (3, 8)),
}


def program(name: str) -> str:
    mesh, params, body, *_ = CASES[name]
    return f"{mesh}\nfunc main({params}) {{\n  {body}\n  return y\n}}\n"


def inputs(name: str) -> dict[str, np.ndarray]:
    checked = refir.verify(refir.parse(program(name)))
    (p,) = checked.func.params
    shape = tuple(CASES[name][3].get(a.extent, a.extent) for a in p.type.axes)
    x = np.arange(np.prod(shape), dtype=p.type.np_dtype).reshape(shape)
    return {"x": np.ascontiguousarray(x[::-1])[::-1]}  # negative strides: read in logical C order


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_verifier_infers_the_extent_and_hands_it_on(name):
    checked = refir.verify(refir.parse(program(name)))
    assert str(checked.types["y"]) == CASES[name][4]
    (e,) = checked.func.eqns
    assert -1 not in e.op.shape and e.op.shape == tuple(a.extent for a in checked.types["y"].axes)
    assert [ops.op_name(s.op) for s in lower(checked).steps if s.is_communication] == []  # local


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_backend_agrees_with_numpy(name, backend):
    xs = inputs(name)
    assert_runs_as(program(name), xs, xs["x"].reshape(CASES[name][5]), backend, CASES[name][3], world=4,
                   keep="all" if backend != "global" else None)


def test_builder_and_printer_keep_the_minus_one():
    b = Builder()
    m = b.mesh([0, 1], name="m")
    x = b.input("x", "f32", ["S", "8@DIDx"], mesh=m)
    y = x.reshape(["S", 2, -1])
    b.output(y)
    prog = b.build()
    text = refir.print_program(prog)
    assert "reshape(x, [S, 2, -1])" in text
    assert refir.parse(text) == prog
    assert str(refir.verify(prog).types[y.name]) == "f32[S, 2@DIDx, 4] on m"


def test_a_symbol_bound_to_zero_keeps_the_inferred_extent():
    text = "mesh m = [0]\nfunc main(x: f32[S, 8]) {\n  y = reshape(x, [S, -1])\n  return y\n}\n"
    for backend in BACKENDS:
        y = refir.run(text, {"x": np.zeros((0, 8), np.float32)}, backend=backend).outputs["y"]
        assert y.shape == (0, 8), backend


def test_under_mpiexec_every_rank_agrees(tmp_path):
    f = tmp_path / "heads.rir"
    f.write_text(program("heads") + "# expect: y = x.reshape(3, 4, 8)\n# bind: S=3\n")
    done = run_mpi(4, ["-m", "refir", "run", str(f)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all 1 expect lines hold" in done.stdout, done.stdout


def test_the_generator_writes_minus_one_and_those_programs_agree_on_every_backend():
    from conformance.explore import drawn
    from conformance.generate import generate
    from conformance.shrink import RandomDraw

    found = [i for i in range(60) if any(isinstance(e.op, ops.Reshape) and -1 in e.op.shape
                                         for e in generate(RandomDraw(0, i)).program.funcs[0].eqns)]
    assert found
    assert_cases_pass(drawn(0, found[0]), BACKENDS, context=found[0])
