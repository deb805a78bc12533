"""`trace --backend gpu`: the gpu backend's device buffers, read back after
each step (on CPU through numba's CUDA simulator), against the spmd ones,
step by step, device by device."""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import OWN_EXAMPLES, ROOT, run_mpi

import refir
from conformance.cases import CORPUS, cases_of
from refir.cli import main
from refir.explain.placement import placement

TUTORIAL = ROOT / "docs" / "tutorial"
PROGRAMS = sorted(CORPUS.glob("*.rir")) + sorted(TUTORIAL.glob("*.rir")) + OWN_EXAMPLES


def bits(x: np.ndarray) -> bytes:
    """The elements' bytes in logical order (NaNs, -0.0 and bf16 compared exactly)."""
    return np.ascontiguousarray(x).view(np.uint8).tobytes()


def same(x: np.ndarray, y: np.ndarray) -> bool:
    """Equal values: NaN to NaN, and (as spec section 10 lets max and min
    return either) -0.0 to +0.0; bf16 compared through f32, which holds it exactly."""
    if x.dtype.kind == "V":  # bfloat16
        x, y = x.astype(np.float32), y.astype(np.float32)
    return np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")


def dense(strides: tuple[int, ...], shape: tuple[int, ...]) -> list[int]:
    return [s for s, n in zip(strides, shape) if n > 1]


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_gpu_buffers_are_the_spmd_ones_step_by_step(path):
    case = cases_of(path)[0]
    inputs = case.inputs()
    spmd = refir.run(case.program, inputs, keep="all")
    gpu = refir.run(case.program, inputs, backend="gpu", keep="all")
    assert list(gpu.kept) == list(spmd.kept)  # every input and step, in program order
    lowered = gpu.lowered
    params = {p.name for p in case.checked.func.params}
    for name, blocks in spmd.kept.items():
        assert sorted(gpu.kept[name]) == sorted(blocks), name
        facts = None if name in params else placement(name, lowered.types[name], gpu.bindings)
        for d, want in blocks.items():
            got = gpu.kept[name][d]
            assert isinstance(got, np.ndarray) and got.shape == want.shape and got.dtype == want.dtype, (name, d)
            assert same(got, want), (name, d)
            if facts is not None:  # laid out as its type declares (an input keeps the caller's strides)
                assert dense(got.strides, got.shape) == dense(facts.block(d).byte_strides, got.shape), (name, d)
    for name, value in spmd.outputs.items():
        assert same(gpu.outputs[name], value), name


@pytest.mark.parametrize("path, more", [(TUTORIAL / "same_mesh.rir", []),
                                        (TUTORIAL / "scatter_after_permute.rir", ["--device", "0"]),
                                        (CORPUS / "uneven_all_to_all.rir", []),
                                        (CORPUS / "mesh3d_every_axis.rir", ["--value", "ry"])],
                         ids=["same_mesh", "scatter_device", "uneven", "mesh3d"])
def test_the_gpu_trace_prints_what_the_spmd_trace_prints(path, more, capsys):
    assert main(["trace", str(path), "--seed", "1", *more]) == 0
    spmd = capsys.readouterr().out
    assert main(["trace", str(path), "--seed", "1", "--backend", "gpu", *more]) == 0
    gpu = capsys.readouterr().out
    head, _, rest = gpu.partition("\n")
    assert ": main on gpu" in head and head.replace(" on gpu", " on spmd") == spmd.partition("\n")[0]
    assert "strides [" in rest and rest == spmd.partition("\n")[2]


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
                    reason="writes one element of a device array in place, as the CUDA simulator's arrays allow")
def test_a_gpu_trace_shows_the_devices_own_numbers(monkeypatch, capsys):
    """What the trace prints is read back from device memory as each step ends:
    an element a kernel got wrong shows there, on its device and step only."""
    from gpu_backend.impls import GpuLocal

    real = GpuLocal.__call__

    def wrong(self, step, device, args):
        out = real(self, step, device, args)
        if step.out == "out" and device == 1:
            out.data[out.offset] = -99  # the first element of device 1's result, in device memory
        return out

    path = TUTORIAL / "scatter_after_permute.rir"
    x = np.arange(180, dtype=np.float32).reshape(3, 4, 3, 5)
    spmd = refir.run(refir.load(path), {"x": x}, keep="all").kept
    monkeypatch.setattr(GpuLocal, "__call__", wrong)
    gpu = refir.run(refir.load(path), {"x": x}, backend="gpu", keep="all").kept
    assert gpu["out"][1][0, 0, 0] == -99 and spmd["out"][1][0, 0, 0] != -99
    assert bits(gpu["out"][1][1:]) == bits(spmd["out"][1][1:]) and bits(gpu["out"][0]) == bits(spmd["out"][0])
    assert bits(gpu["t4"][1]) == bits(spmd["t4"][1])
    assert main(["trace", str(path), "--seed", "0", "--backend", "gpu", "--device", "1", "--value", "out"]) == 0
    assert "[[-99." in capsys.readouterr().out


def test_under_mpiexec_the_gpu_trace_is_the_same(tmp_path, capsys):
    path = TUTORIAL / "same_mesh.rir"
    done = run_mpi(2, ["-m", "refir", "trace", str(path), "--seed", "2", "--backend", "gpu"], timeout=120)
    assert done.returncode == 0, done.stderr
    assert main(["trace", str(path), "--seed", "2", "--backend", "gpu"]) == 0
    assert done.stdout == capsys.readouterr().out


def test_trace_names_its_backends(capsys):
    with pytest.raises(SystemExit):
        main(["trace", str(TUTORIAL / "same_mesh.rir"), "--backend", "global"])
    assert "invalid choice: 'global' (choose from 'spmd', 'gpu')" in capsys.readouterr().err
