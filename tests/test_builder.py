"""The Python builder: programs built by calls equal the parsed text, print to
.rir that parses back, run on the backends, and fail at the call that errs."""

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import refir
from refir.errors import InputError, VerifyError
from refir.frontends import builder
from refir.frontends.builder import Builder
from refir.ir import ops
from refir.ir.types import BROADCAST, DTYPES, Axis, Mesh, TensorType
from refir.lowering.lower import lower


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


def test_meshes_from_flat_ids_and_a_shape_keep_their_order():
    b = Builder()
    m2 = b.mesh([3, 1, 0, 2], name="m2", shape=(2, 2))
    m3 = b.mesh([2, 0, 3, 1], name="m3", shape=(2, 1, 2))
    assert (m2.shape, m2.devices) == ((2, 2), (3, 1, 0, 2))
    assert (m3.shape, m3.devices) == ((2, 1, 2), (2, 0, 3, 1))
    assert b.mesh([[2, 0], [3, 1]], name="same") == Mesh("same", (2, 2), (2, 0, 3, 1))
    x = b.input("x", "f32", [2], mesh=m3)
    b.output(x.set(typed=False))
    text = refir.print_program(b.build())
    assert "mesh m2 = [[3, 1], [0, 2]]\nmesh m3 = [[[2, 0]], [[3, 1]]]" in text
    with pytest.raises(InputError, match="3 device ids do not fill shape"):
        b.mesh([0, 1, 2], name="bad", shape=(2, 2))
    with pytest.raises(InputError, match="one flat list"):
        b.mesh([[0, 1]], name="bad", shape=(1, 2))
    with pytest.raises(InputError, match="'m2' is declared twice"):
        b.mesh([0], name="m2")


def test_inputs_of_every_dtype_and_did_given_as_types():
    b = Builder()
    m = b.mesh([0, 1, 2, 3, 4, 5, 6, 7], shape=(2, 2, 2))
    for i, dtype in enumerate(DTYPES):
        t = b.type(dtype, ["N@DIDz", "3@DIDy", "b", "M@DIDx"], layout=[3, 1, 0, 2])
        v = b.input(f"x{i}", t)
        assert v.type == TensorType(dtype, (Axis("N", "DIDz"), Axis(3, "DIDy"), BROADCAST, Axis("M", "DIDx")),
                                    m, (3, 1, 0, 2))
    b.output(v)
    program = b.build()
    assert refir.parse(refir.print_program(program)) == program
    assert "x9: bf16[N@DIDz, 3@DIDy, b, M@DIDx] on m layout[3, 1, 0, 2]" in refir.print_program(program)
    with pytest.raises(InputError, match="not both"):
        b.input("y", t, ["N"])
    with pytest.raises(InputError, match="say its axes"):
        b.input("y", "f32")
    with pytest.raises(InputError, match="'elsewhere' was not declared"):
        b.input("y", TensorType("f32", (Axis(2),), Mesh("elsewhere", (1,), (0,))))


def test_typed_false_leaves_a_type_to_inference_and_ops_by_name():
    b = Builder()
    b.mesh([0, 1])
    x = b.input("x", "f32", ["N@DIDx", 4])
    y = x.unary("exp", name="y", typed=False)
    z = builder.binary("sub", b.sym("N"), y, name="z")
    w = builder.unary("sqrt", z.binary("maximum", 0.0, name="r"), name="w", typed=False)
    b.output(w)
    program = b.build()
    text = refir.print_program(program)
    assert "  y = exp(x)\n  z: f32[N@DIDx, 4] on m = sub(N, y)\n  r: f32[N@DIDx, 4] on m = maximum(z, 0.0)\n" \
        "  w = sqrt(r)\n" in text
    assert refir.parse(text) == program
    assert [e.type is None for e in program.funcs[0].eqns] == [True, False, False, True]
    xv = np.arange(8, dtype=np.float32).reshape(2, 4) / 4
    got = refir.run(program, {"x": xv}).outputs["w"]
    np.testing.assert_allclose(got, np.sqrt(np.maximum(2 - np.exp(xv), 0)), rtol=1e-6)


def test_builder_errors_name_what_is_wrong():
    b = Builder()
    b.mesh([0, 1])
    x = b.input("x", "i16", [4, "N"])
    with pytest.raises(InputError, match="unknown unary op 'gelu'"):
        x.unary("gelu")
    with pytest.raises(InputError, match="unknown binary op 'pow'"):
        builder.binary("pow", x, 2)
    with pytest.raises(InputError, match="unknown reduction 'mean'"):
        x.reduce("mean", [0])
    with pytest.raises(InputError, match="unknown dtype 'f8'"):
        x.cast("f8")
    with pytest.raises(InputError, match=r"symbol 'M' is the extent of no input \(bound: N\)"):
        b.sym("M")
    with pytest.raises(InputError, match="typed=False leaves the type to inference"):
        x.set(typed=False, shard={0: "DIDx"})
    with pytest.raises(InputError, match="not both"):
        x.set(result_type=x.type, layout=[1, 0])
    with pytest.raises(InputError, match="'m9' was not declared"):
        x.set(mesh=Mesh("m9", (2,), (0, 1)))
    with pytest.raises(InputError, match=r"partial=\('mean', \['DIDx'\]\): give \(kind, mesh axes\)"):
        x.set(partial=("mean", ["DIDx"]))
    kept = x.sum([0], result_type=replace(x.type, axes=x.type.axes[1:], partial=("DIDx",), partial_kind="sum"))
    assert kept.type.partial == ("DIDx",)  # a reduction's local sums, declared partial (spec §3.3)


def test_uneven_and_empty_blocks_and_a_resharding_to_a_given_type():
    b = Builder()
    b.mesh([3, 1, 0, 2], shape=(2, 2))
    x = b.input("x", "f32", ["3@DIDx", 1])  # 3 rows over 2 devices; 1 column over 2: one block empty
    y = x.set(result_type=b.type("f32", [3, "1@DIDy"], layout=[1, 0]))
    b.output(y)
    xv = np.arange(3, dtype=np.float32).reshape(3, 1)
    result = refir.run(b.build(), {"x": xv})
    np.testing.assert_array_equal(result.outputs[y.name], xv)
    assert {d: a.shape for d, a in result.shards[y.name].items()} == {3: (3, 1), 1: (3, 1), 0: (3, 0), 2: (3, 0)}


def test_communications_come_from_set_and_declared_reduction_results():
    """A source program moves data with `set` and the declared result of a
    reduction; lowering picks the collective, on meshes whose ids are out of order."""
    b = Builder()
    m = b.mesh([1, 0, 3, 2], name="m", shape=(2, 2))
    p0, p1 = b.mesh([1, 0], name="p0"), b.mesh([3, 2], name="p1")
    x = b.input("x", "i32", ["4@DIDy", "6@DIDx"], mesh=m)
    y = b.input("y", "i32", [4, "6@DIDx"], mesh=m)
    z = b.input("z", "i32", ["5@DIDx"], mesh=p0)
    made = {
        "allgather": x.set(shard={}),
        "all_to_all": y.set(shard={0: "DIDx"}),
        "reduce_scatter": y.sum([1], shard={0: "DIDx"}),  # the partial sums over DIDx land sharded on it
        "allreduce": y.sum([1], typed=False),  # or replicated
        "send_recv": z.set(mesh=p1),  # a pipeline stage
        "reduce": z.sum([0], mesh=p1),
    }
    b.output(*made.values())
    program = b.build()
    steps = {s.out: ops.op_name(s.op) for s in lower(refir.verify(program)).steps}
    assert {kind: steps[v.name] for kind, v in made.items()} == {kind: kind for kind in made}
    xv = np.arange(24, dtype=np.int32).reshape(4, 6) - 7
    yv, zv = xv * 3, np.arange(5, dtype=np.int32)
    got = refir.run(program, {"x": xv, "y": yv, "z": zv}).outputs
    expected = {"allgather": xv, "all_to_all": yv, "reduce_scatter": yv.sum(1), "allreduce": yv.sum(1),
                "send_recv": zv, "reduce": zv.sum()}
    for kind, v in made.items():
        np.testing.assert_array_equal(got[v.name], expected[kind])


def test_the_examples_of_the_builder_page_run():
    page = Path(__file__).resolve().parents[1] / "docs" / "frontends" / "builder.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    assert len(blocks) == 2
    for block in blocks:
        done = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("mesh m")
