"""The Python builder: programs built by calls equal the parsed text, print to
.rir that parses back, run on the backends, and fail at the call that errs."""

import numpy as np
import pytest

import refir
from refir import builder
from refir.builder import Builder
from refir.errors import InputError, VerifyError


def scatter_after_permute() -> refir.Program:
    b = Builder()
    m0 = b.mesh([0], name="m0")
    m1 = b.mesh([0, 1, 2, 3], name="m1")
    x = b.input("x", "f32", [3, 4, 3, 5], mesh=m0)
    t1 = x.sum(dims=[3], name="t1")
    t2 = t1.permute([1, 0, 2], name="t2", layout=[1, 0, 2])
    t3 = t2.set(name="t3", mesh=m1, shard={0: "DIDx"})
    t4 = t3.permute([1, 0, 2], name="t4")
    out = builder.add(t4, t4, name="out")
    b.output(out)
    return b.build()


TEXT = """mesh m0 = [0]
mesh m1 = [0, 1, 2, 3]

func main(x: f32[3, 4, 3, 5] on m0) {
  t1: f32[3, 4, 3] on m0 = sum(x, dims=[3])
  t2: f32[4, 3, 3] on m0 layout[1, 0, 2] = permute(t1, [1, 0, 2])
  t3: f32[4@DIDx, 3, 3] on m1 = set(t2)
  t4: f32[3, 4@DIDx, 3] on m1 = permute(t3, [1, 0, 2])
  out: f32[3, 4@DIDx, 3] on m1 = add(t4, t4)
  return out
}
"""


def test_built_program_equals_the_parsed_text_and_prints_back():
    built = scatter_after_permute()
    assert built == refir.parse(TEXT)
    printed = refir.print_program(built)
    assert refir.parse(printed) == built
    assert "t2: f32[4, 3, 3] on m0 layout[1, 0, 2] = permute(t1, [1, 0, 2])" in printed


def test_built_program_runs_and_keeps_layouts():
    x = np.arange(180, dtype=np.float32).reshape(3, 4, 3, 5)
    result = refir.run(scatter_after_permute(), {"x": x}, backend="spmd")
    np.testing.assert_array_equal(result.outputs["out"], 2 * np.transpose(x.sum(3), (1, 0, 2)).transpose(1, 0, 2))
    lowered = result.lowered
    assert lowered is not None
    assert lowered.types["t2"].layout == (1, 0, 2)


def test_operators_symbols_and_automatic_names():
    b = Builder()
    b.mesh([0, 1])
    x = b.input("x", "f32", ["N@DIDx", 4])
    y = (2.0 * x - 1.0).relu()
    s = y.sum(dims=[0]) + b.sym("N")
    b.output(s)
    program = b.build()
    assert [e.out for e in program.funcs[0].eqns] == ["t0", "t1", "t2", "t3", "t4"]
    xv = np.arange(24, dtype=np.float32).reshape(6, 4) - 8
    got = refir.run(program, {"x": xv}, backend="spmd").outputs["t4"]
    np.testing.assert_array_equal(got, np.maximum(2 * xv - 1, 0).sum(0) + 6)


def test_a_bad_call_fails_where_it_is_made():
    b = Builder()
    b.mesh([0, 1])
    x = b.input("x", "f32", [4, 6])
    y = b.input("y", "i32", [4, 6])
    with pytest.raises(VerifyError) as e:
        x + y
    assert e.value.label == "elementwise_c2"
    with pytest.raises(VerifyError) as e:
        x.permute([0, 0])
    assert e.value.label == "permute_c1"
    with pytest.raises(InputError, match="bad axis"):
        b.input("z", "f32", ["4@DIDq"])
    with pytest.raises(InputError, match="result"):
        b.build()


def test_mesh_2d_and_matmul_with_a_partial_result():
    b = Builder()
    b.mesh([[0, 1], [2, 3]])
    a = b.input("a", "f32", [4, "K@DIDx"])
    w = b.input("w", "f32", ["K@DIDx", 6])
    c = (a @ w).set(shard={0: "DIDy"})  # partial sums, then a resharding
    b.output(c)
    program = b.build()
    av = np.arange(32, dtype=np.float32).reshape(4, 8) % 5
    wv = np.arange(48, dtype=np.float32).reshape(8, 6) % 3
    got = refir.run(program, {"a": av, "w": wv}, backend="spmd").outputs[c.name]
    np.testing.assert_array_equal(got, av @ wv)
