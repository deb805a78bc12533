"""expand: b axes broadcast to concrete extents (np.broadcast_to, materialized),
to sharded extents too (each device makes its own block, a local step): every
backend against numpy, every device's buffer in its block and strides, the
printer round trip, the builder, and one run under mpiexec."""

import numpy as np
import pytest
from helpers import BACKENDS, assert_runs_as, run_mpi

import refir
from refir.frontends.builder import Builder

CASES = {
    # [b, 8] -> [N@DIDx, 8]: uneven blocks (6 over 4: 2, 2, 2, 0)
    "sharded_rows": ("mesh m = [0, 1, 2, 3]", "x: f32[b, 8], s: f32[N]", "y: f32[N@DIDx, 8] = expand(x, N, 8)",
                     {"N": 6}, lambda x, s: np.broadcast_to(x, (6, 8))),
    # an axis x already shards keeps its blocks; the expanded one replicated, a declared layout
    "kept_shard": ("mesh m = [0, 1, 2]", "x: f32[4@DIDx, b, 3]",
                   "y: f32[4@DIDx, 5, 3] on m layout[2, 0, 1] = expand(x, 4, 5, 3)", {},
                   lambda x: np.broadcast_to(x, (4, 5, 3))),
    # a 2-D mesh with permuted ids: the expanded axis sharded on DIDy, another kept on DIDx
    "mesh_2d": ("mesh m = [[3, 1], [0, 2]]", "x: i32[b, 5@DIDx, b]",
                "y: i32[3@DIDy, 5@DIDx, 2] = expand(x, 3, 5, 2)", {},
                lambda x: np.broadcast_to(x, (3, 5, 2))),
    # to extent 0 and to extent 1: empty and single
    "zero_and_one": ("mesh m = [0, 1]", "x: f16[b, b]", "y = expand(x, 0, 1)", {},
                     lambda x: np.broadcast_to(x, (0, 1))),
    "bool_values": ("mesh m = [0, 1]", "x: bool[b, 3]", "y: bool[5@DIDx, 3] = expand(x, 5, 3)", {},
                    lambda x: np.broadcast_to(x, (5, 3))),
}


def program(name: str) -> str:
    mesh, params, body, *_ = CASES[name]
    return f"{mesh}\nfunc main({params}) {{\n  {body}\n  return y\n}}\n"


def inputs(checked, bindings, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for p in checked.func.params:
        shape = tuple(1 if a.broadcast else bindings.get(a.extent, a.extent) for a in p.type.axes)
        out[p.name] = rng.integers(-9, 10, shape).astype(p.type.np_dtype)
    first = checked.func.params[0].name  # negative strides: a backend must honour any layout
    out[first] = np.ascontiguousarray(out[first][::-1])[::-1]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_expand_agrees_with_numpy(name, backend):
    checked = refir.verify(refir.parse(program(name)))
    bindings = CASES[name][3]
    xs = inputs(checked, bindings, 3)
    # materialized: the strides of a dense buffer in the declared layout, no zeros
    assert_runs_as(checked.program, xs, CASES[name][4](*xs.values()), backend, bindings)


def test_expand_to_a_sharded_extent_is_one_local_step():
    lowered = refir.run(refir.parse(program("sharded_rows")),
                        inputs(refir.verify(refir.parse(program("sharded_rows"))), {"N": 6}, 0)).lowered
    assert [type(s.op).__name__ for s in lowered.steps] == ["Expand"]
    assert lowered.segments[0].kind == "compute"


def test_expand_prints_and_parses_back():
    for name in CASES:
        p = refir.parse(program(name))
        assert refir.parse(refir.print_program(p)) == p
    assert "expand(x, N, 8)" in refir.print_program(refir.parse(program("sharded_rows")))


def test_builder_expands():
    b = Builder()
    b.mesh([0, 1, 2, 3])
    x = b.input("x", "f32", ["b", 8])
    b.input("s", "f32", ["N"])
    y = x.expand([b.sym("N"), 8], shard={0: "DIDx"}, name="y")
    b.output(y)
    prog = b.build()
    assert refir.print_program(prog) == refir.print_program(refir.parse(program("sharded_rows")))


def test_expand_under_mpiexec(tmp_path):
    path = tmp_path / "ex.rir"
    path.write_text("""mesh m = [0, 1, 2, 3]
func main(x: f32[b, 8], y: f32[N, b, 3@DIDx]) {
  e: f32[N@DIDx, 8] = expand(x, N, 8)
  f = expand(y, N, 5, 3)
  return e, f
}
# expect: e = x + 0 * y[:, :, :1].sum(2)
# expect: f = y + 0 * x[:, :5, None]
# bind: N=6
""")
    done = run_mpi(4, ["-m", "refir", "run", str(path), "--backend", "spmd"], timeout=120)
    assert done.returncode == 0, done.stderr
    assert "all 2 expect lines hold" in done.stdout
