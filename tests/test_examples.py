"""The shared examples are the contract of the text format: each verifies, and
meets its `# expect:` lines on global and on spmd, with every device's buffer in
the block and layout its type implies. (Round trips: test_parse_print.py; under
mpiexec: test_mpi.py.)"""

import subprocess
import sys

import numpy as np
import pytest
from helpers import EXAMPLES, ROOT, assert_blocks, needs_shared

import refir
from refir.checks.expect_lines import check_expects
from refir.running.bindings import devices_needed
from refir.running.inputs import default_bindings, draw_inputs

pytestmark = needs_shared

# Larger symbol values than the defaults, each divisible as the meshes need.
BIGGER = {"allreduce_then_bias": {"D": 6, "K": 5, "M": 3, "N": 7}, "collectives": {"R": 8, "C": 12, "P": 4},
          "global_extent": {"D": 8}}


def float_inputs(checked, bindings, seed):
    """Inputs whose floats are not integer-valued (expect lines then hold within tolerance)."""
    rng = np.random.default_rng(seed)
    out = draw_inputs(checked, bindings, seed)
    for name, x in out.items():
        if x.dtype.kind == "f":
            out[name] = rng.standard_normal(x.shape).astype(x.dtype)
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_verifies_and_needs_the_world_its_meshes_name(path):
    checked = refir.verify(refir.load(path))
    assert checked.func.name == "main"
    assert devices_needed(checked) == {
        "allreduce_then_bias": 2, "layouts": 2}.get(path.stem, 4)


@pytest.mark.parametrize("backend", ["global", "spmd"])
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_meets_its_expect_lines(path, backend):
    program = refir.load(path)
    checked = refir.verify(program)
    runs = [(b := default_bindings(checked), draw_inputs(checked, b, 0)),
            (b := default_bindings(checked, BIGGER.get(path.stem)), draw_inputs(checked, b, 1))]
    if path.stem != "allreduce_then_bias":  # its f16 intermediates are exact on small integers only
        runs.append((b, float_inputs(checked, b, 2)))
    for bindings, inputs in runs:
        result = refir.run(program, inputs, backend=backend)
        assert result.bindings == bindings
        assert set(result.outputs) == {e.name for e in program.expects}
        assert check_expects(program, inputs, result.outputs) == []


def test_allreduce_then_bias_on_non_integer_data_agrees_within_the_spec_bound():
    path = EXAMPLES[[p.stem for p in EXAMPLES].index("allreduce_then_bias")]
    checked = refir.verify(refir.load(path))
    inputs = float_inputs(checked, BIGGER["allreduce_then_bias"], 5)
    ref = refir.run(checked.program, inputs, backend="global").outputs["out"]
    got = refir.run(checked.program, inputs, backend="spmd").outputs["out"]
    # a float reduction of n terms agrees when |got - ref| <= n * eps(dtype) * sum(|x_i|) (spec §10)
    a, w = (np.abs(inputs[k].astype(np.float64)) for k in ("a", "w"))
    bound = 6 * float(np.finfo(np.float16).eps) * np.einsum("dkm,dkn->mn", a, w)
    assert np.all(np.abs(got.astype(np.float64) - ref) <= bound)
    assert not np.array_equal(got, ref)  # the data does exercise rounding in another order


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_shards_have_their_blocks_and_layouts(path):
    program = refir.load(path)
    checked = refir.verify(program)
    bindings = default_bindings(checked, BIGGER.get(path.stem))
    inputs = float_inputs(checked, bindings, 4)
    result = refir.run(program, inputs, backend="spmd")
    for name in checked.func.results:
        t = checked.types[name]
        whole = result.outputs[name]
        assert set(result.shards[name]) == set(t.mesh.devices)
        assert all(buf.dtype == t.np_dtype for buf in result.shards[name].values())
        assert_blocks(t, result.shards[name], whole, bindings, any_tiny_strides=False)


def test_example_layouts_shard_strides_by_hand():
    x = np.arange(48, dtype=np.float32).reshape(6, 8) / 8
    y = np.arange(48, dtype=np.float32).reshape(8, 6) - 0.5
    result = refir.run(refir.load(EXAMPLES[[p.stem for p in EXAMPLES].index("layouts")]), {"x": x, "y": y})
    for d in (0, 1):
        g = result.shards["g"][d]
        assert g.shape == (8, 6) and g.strides == (4, 32)  # layout[1, 0]
        assert np.array_equal(g, x.T + y)


def test_example_mesh_2d_shards_by_hand():
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    result = refir.run(refir.load(EXAMPLES[[p.stem for p in EXAMPLES].index("mesh_2d")]), {"x": x})
    # g = [[0, 1], [2, 3]]: DIDy picks the row of the grid
    rowsum = np.array([15, 51, 87, 123], np.int32)
    assert {d: b.tolist() for d, b in result.shards["rowsum"].items()} == {
        0: rowsum[0:2].tolist(), 1: rowsum[0:2].tolist(), 2: rowsum[2:4].tolist(), 3: rowsum[2:4].tolist()}
    assert all(b.strides == (24, 4) and np.array_equal(b, x) for b in result.shards["full"].values())


@pytest.mark.parametrize("backend", ["global", "spmd"])
def test_every_example_runs_from_the_command_line(backend):
    for path in EXAMPLES:
        done = subprocess.run([sys.executable, "-m", "refir", "run", str(path), "--backend", backend],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        n = len(refir.load(path).expects)
        assert done.stdout.splitlines()[0].startswith(f"{path}: main on {backend}")
        assert done.stdout.rstrip().endswith(f"all {n} expect lines hold"), done.stdout
        assert done.stderr == ""
