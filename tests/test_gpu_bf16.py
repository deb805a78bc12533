"""bfloat16 on the gpu backend: the device stores its bits (numba has no bf16
type) and converts in the kernels. The conversions agree bit for bit with
ml_dtypes on float32 values and with the spec's rounding of a double (through
float32, refir.ir.types.as_dtype), and programs in bf16 agree with spmd on every
buffer."""

import sys
from pathlib import Path

import numpy as np
import pytest

import refir
from gpu_backend.kernels.functions import bf16_decode, bf16_encode
from refir.ir.types import BF16, as_dtype
from refir.running.inputs import default_bindings, draw_inputs

sys.path.insert(0, str(Path(__file__).parent))
from helpers import run_mpi  # noqa: E402


def test_decode_is_exact_on_every_bit_pattern():
    bits = np.arange(1 << 16, dtype=np.uint16)
    want = bits.view(BF16).astype(np.float32)
    got = np.array([bf16_decode(b) for b in bits], np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))  # -0.0 included


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_encode_rounds_as_the_spec():
    rng = np.random.default_rng(0)
    every = np.arange(1 << 16, dtype=np.uint16).view(BF16).astype(np.float32)
    # Halfway and just-off-halfway points between neighbours (ties to even), subnormals, overflow.
    up = (every.view(np.uint32) + np.uint32(0x8000)).view(np.float32)
    near = (every.view(np.uint32) + np.uint32(0x7FFF)).view(np.float32)
    doubles = rng.standard_normal(2000) * 10.0 ** rng.integers(-40, 39, 2000)
    values = np.concatenate([every, up, near, rng.standard_normal(2000).astype(np.float32),
                             np.float32([3.4e38, -3.4e38, 1e-40, -1e-45, 0.0, -0.0, np.inf])]).astype(np.float64)
    values = np.concatenate([values, doubles, [1 + 2.0**-8 + 2.0**-30]])  # a double that rounds via float
    want = values.astype(np.float32).astype(BF16).view(np.uint16)  # ml_dtypes on float32: one rounding
    assert np.array_equal(as_dtype(values, BF16).view(np.uint16), want)
    got = np.array([bf16_encode(v) for v in values], np.uint16)
    nan = np.isnan(values.astype(np.float32))
    assert np.array_equal(got[~nan], want[~nan])
    assert np.all((got[nan] & 0x7FFF) == 0x7FC0)


BF16_PROGRAM = """mesh m = [0, 1]
func main(x: bf16[4@DIDx, 6], y: bf16[4, 6]) {
  s: bf16[4@DIDx, 6] = add(x, y)
  p: bf16[4@DIDx, 6] = mul(s, 0.3)
  n: bf16[4@DIDx, 6] = neg(p)
  r: bf16[4@DIDx, 6] = relu(n)
  mx: bf16[4@DIDx, 6] = maximum(r, x)
  t: bf16[4] = sum(mx, dims=[1])
  c: f32[4] = cast(t, dtype=f32)
  sg: bf16[4, 6] = set(s)
  k: i32[4, 6] = cast(sg, dtype=i32)
  back: bf16[4, 6] = cast(k, dtype=bf16)
  g: bf16[6] = max(x, dims=[0])
  pg: bf16[4, 6] = set(p)
  yt: bf16[6, 4] = permute(y, [1, 0])
  w: bf16[6, 6] = matmul(yt, pg)
  return c, back, g, w
}
"""


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("backend", ["global", "spmd", "gpu"])
def test_a_double_reaches_bf16_through_float32(backend):
    # a = 1 + 2^-8 + 2^-30: float32 drops the 2^-30, leaving a tie that goes to even
    # (1.0); rounded directly, as ml_dtypes >= 0.7 rounds a double, it would be 1 + 2^-7.
    # e = 1 + 2^-7 + 2^-8 - 2^-30: float32 rounds it up to a tie that goes to 1 + 2^-6.
    a, e = 1 + 2.0**-8 + 2.0**-30, 1 + 2.0**-7 + 2.0**-8 - 2.0**-30
    text = """mesh m = [0]
func main(x: f64[3, 1], z: bf16[3, 1]) {
  y: bf16[3, 1] = cast(x, dtype=bf16)
  s: f64[1] = sum(x, dims=[0])
  c: bf16[1] = cast(s, dtype=bf16)
  t: bf16[1] = sum(z, dims=[0])
  return y, c, t
}"""
    x = np.array([[a], [-a], [e]])  # its sum is e
    z = np.array([[1.0], [2.0**-8], [2.0**-30]]).astype(BF16)  # each exact in bf16; the sum in float64 is a
    out = refir.run(text, {"x": x, "z": z}, backend=backend).outputs
    assert out["y"].view(np.uint16).ravel().tolist() == [0x3F80, 0xBF80, 0x3F82]
    assert out["c"].view(np.uint16).tolist() == [0x3F82]
    assert out["t"].view(np.uint16).tolist() == [0x3F80]


def test_bf16_program_agrees_with_spmd_bit_for_bit():
    text = BF16_PROGRAM
    program = refir.parse(text)
    rng = np.random.default_rng(1)
    inputs = {n: (rng.standard_normal((4, 6)) * 3).astype(BF16) for n in ("x", "y")}
    inputs["x"][0, 0] = np.nan
    spmd = refir.run(program, inputs, backend="spmd")
    gpu = refir.run(program, inputs, backend="gpu")
    for name, value in spmd.outputs.items():
        got = gpu.outputs[name]
        assert got.dtype == value.dtype
        if value.dtype == BF16:
            nan = np.isnan(value.astype(np.float32))
            assert np.array_equal(np.isnan(got.astype(np.float32)), nan), name
            assert np.array_equal(got.view(np.uint16)[~nan], value.view(np.uint16)[~nan]), name
        else:
            np.testing.assert_array_equal(got, value, err_msg=name)


@pytest.mark.parametrize("backend", ["global", "spmd", "gpu"])
def test_bf16_inputs_come_back_with_their_dtype(backend):
    program = refir.parse("mesh m = [0, 1]\nfunc main(x: bf16[4@DIDx, 2]) {\n  y: bf16[4, 2] = set(x)\n"
                          "  return y\n}\n")
    x = np.arange(8, dtype=np.float32).reshape(4, 2).astype(BF16)
    y = refir.run(program, {"x": x}, backend=backend).outputs["y"]
    assert y.dtype == BF16 and np.array_equal(y.view(np.uint16), x.view(np.uint16))


MPI_PROGRAM = """mesh m = [0, 1]
func main(x: bf16[4@DIDx, 6], y: bf16[4, 6@DIDx]) {
  t: bf16[6] = sum(x, dims=[0])
  g: bf16[4, 6] = set(y)
  a: bf16[4@DIDx, 6] = set(y)
  return t, g, a
}
"""


@pytest.mark.parametrize("backend", ["spmd", "gpu"])
def test_bf16_under_mpiexec_matches_in_process(backend, tmp_path):
    """One rank per process: the MPI transports move bf16 as bytes, the gpu
    backend's kernels convert it."""
    prog = tmp_path / "bf16.rir"
    prog.write_text(MPI_PROGRAM)
    out = tmp_path / "out.npz"
    done = run_mpi(2, ["-m", "refir", "run", str(prog), "--backend", backend, "--seed", "0", "--out", str(out)])
    assert done.returncode == 0, done.stderr
    program = refir.load(prog)
    inputs = draw_inputs(refir.verify(program), default_bindings(refir.verify(program)), 0)
    want = refir.run(program, inputs, backend="spmd").outputs
    with np.load(out) as got:
        for name, value in want.items():
            assert got[name].tobytes() == value.tobytes(), name
