"""matmul of operands of different ranks (np.matmul: batch broadcasting, 1-D
promotion), with today's sharding rules: every backend against numpy, bit for
bit (integer-valued floats: the float64 accumulation is exact), every device's
buffer in the block and strides its type gives, and one run under mpiexec."""

import numpy as np
import pytest
from helpers import BACKENDS, assert_runs_as, run_mpi

import refir

MESH = "mesh m = [0, 1, 2, 3]\n"
CASES = {
    # [B, S, E] x [E, F@DIDx]: a column-parallel linear of a 3-D input, local
    "column_parallel_3d": ("x: f32[2, 3, 5], w: f32[5, 6@DIDx]", "y = matmul(x, w)",
                           lambda x, w: x @ w),
    # [B, S, F@DIDx] x [F@DIDx, E]: a row-parallel one, partial sums then an allreduce (uneven F: 6 over 4)
    "row_parallel_3d": ("x: f32[2, 3, 6@DIDx], w: f32[6@DIDx, 5]", "y: f32[2, 3, 5] = matmul(x, w)",
                        lambda x, w: x @ w),
    # the same, its result declared sharded: a reduce_scatter of the partial sums
    "row_parallel_scatter": ("x: f32[2, 4, 6@DIDx], w: f32[6@DIDx, 5]", "y: f32[2, 4@DIDx, 5] = matmul(x, w)",
                             lambda x, w: x @ w),
    # a batch axis sharded in a, broadcast (b) in the weight
    "batch_broadcast": ("x: f32[5@DIDx, 3, 4], w: f32[b, 4, 2]", "y = matmul(x, w)", lambda x, w: x @ w),
    # a missing leading batch axis of the weight, the weight's leading axis broadcast
    "batch_missing": ("x: f32[3, 2, 5, 4], w: f32[2, 4, 3@DIDx]", "y = matmul(x, w)", lambda x, w: x @ w),
    # 1-D operands: matrix-vector, vector-matrix, dot with a sharded contraction
    "vector_right": ("x: f32[2, 3@DIDx, 4], w: f32[4]", "y = matmul(x, w)", lambda x, w: x @ w),
    "vector_left": ("x: f32[4], w: f32[2, 4, 7@DIDx]", "y = matmul(x, w)", lambda x, w: x @ w),
    "dot_sharded": ("x: f32[9@DIDx], w: f32[9@DIDx]", "y: f32[] = matmul(x, w)", lambda x, w: x @ w),
    "vector_sharded_k": ("x: f32[3, 10@DIDx], w: f32[10@DIDx]", "y = matmul(x, w)", lambda x, w: x @ w),
    "integers_wrap": ("x: i8[2, 3, 4], w: i8[4]", "y = matmul(x, w)",
                      lambda x, w: (x.astype(np.int64) @ w.astype(np.int64)).astype(np.int8)),
}


def program(name: str) -> str:
    params, body, _ = CASES[name]
    return MESH + f"func main({params}) {{\n  {body}\n  return y\n}}\n"


def inputs(checked, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for p in checked.func.params:
        shape = tuple(1 if a.broadcast else a.extent for a in p.type.axes)
        x = rng.integers(-60 if p.type.dtype == "i8" else -4, 60 if p.type.dtype == "i8" else 5, shape)
        out[p.name] = x.astype(p.type.np_dtype)
    # one input with negative strides: a backend must honour any layout
    first = checked.func.params[0].name
    out[first] = np.ascontiguousarray(out[first][::-1])[::-1]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_matmul_of_any_ranks_agrees_with_numpy(name, backend):
    checked = refir.verify(refir.parse(program(name)))
    xs = inputs(checked, 7)
    with np.errstate(over="ignore"):
        want = CASES[name][2](*xs.values())
    assert_runs_as(checked.program, xs, want, backend)


def test_lowering_of_a_sharded_contraction_names_its_collective():
    lowered = refir.run(refir.parse(program("row_parallel_scatter")),
                        inputs(refir.verify(refir.parse(program("row_parallel_scatter"))), 1)).lowered
    kinds = [type(s.op).__name__ for s in lowered.steps]
    assert kinds == ["Matmul", "ReduceScatter"]
    assert str(lowered.types["y~1"]) == "f32[2, 4, 5] on m partial[sum@DIDx]"
    lowered = refir.run(refir.parse(program("dot_sharded")),
                        inputs(refir.verify(refir.parse(program("dot_sharded"))), 1)).lowered
    assert [type(s.op).__name__ for s in lowered.steps] == ["Matmul", "Allreduce"]


def test_inferred_types_follow_numpy_promotion():
    def inferred(name):
        return str(refir.verify(refir.parse(program(name))).types["y"])

    assert inferred("vector_right") == "f32[2, 3@DIDx] on m"
    assert inferred("vector_left") == "f32[2, 7@DIDx] on m"
    assert inferred("batch_broadcast") == "f32[5@DIDx, 3, 2] on m"
    assert inferred("batch_missing") == "f32[3, 2, 5, 3@DIDx] on m"


def test_matmul_of_any_ranks_under_mpiexec(tmp_path):
    path = tmp_path / "mm.rir"
    path.write_text(MESH + """func main(x: f32[2, 3, 6@DIDx], w: f32[6@DIDx, 5], v: f32[5]) {
  y: f32[2, 3, 5] = matmul(x, w)
  z = matmul(y, v)
  return y, z
}
# expect: y = x @ w
# expect: z = (x @ w) @ v
""")
    done = run_mpi(4, ["-m", "refir", "run", str(path), "--backend", "spmd"], timeout=120)
    assert done.returncode == 0, done.stderr
    assert "all 2 expect lines hold" in done.stdout
