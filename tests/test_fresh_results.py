"""Every result buffer is the backend's own, dense in its declared layout
(issue 14): a returned parameter, a parameter `set` to the same placement, one
value under three names. On global, spmd and gpu in one process, and on spmd
and gpu under mpiexec with one rank per process: there, this file is the driver
(`python -m mpi4py tests/test_fresh_results.py`), and every rank checks the
buffers its backend returned before the runner gathers them.
"""

import os
import sys

import numpy as np
import pytest

import refir
from interp.backend import run_spmd
from interp.spmd import execute
from interp.transport import InProcess
from refir.errors import RunError
from refir.explain.lowered_listing import format_lowered
from refir.lowering.lower import lower
from refir.world.backend_types import Shards
from refir.world.ranks import mpi_world

sys.path.insert(0, os.path.dirname(__file__))
from helpers import ROOT, run_mpi  # noqa: E402

CORPUS = ROOT / "conformance" / "corpus"
# Per program: the byte strides every device's buffer of each result must have.
STRIDES = {
    "return_parameters": {"x": (12, 4), "w": (4, 12), "s": ()},  # w: i32[3, 2@DIDy] layout[1, 0], local [3, 1]
    "return_parameter_and_copies": {"y": (12, 6, 2), "x": (12, 6, 2), "z": (4, 2, 8)},  # f16, local [2, 2, 3]
}
PROGRAMS = sorted(STRIDES)
SOURCE = {"y": "x", "z": "x"}  # the input each result equals, where it is not its namesake


def strided_inputs(name: str) -> dict[str, np.ndarray]:
    """Views with gaps and negative strides, so a buffer passed through shows."""
    if name == "return_parameters":
        return {
            "x": np.arange(48, dtype=np.float32).reshape(6, 8).T[::-2, :3],  # byte strides (-8, 32)
            "w": np.arange(-6, 6, dtype=np.int32).reshape(3, 4)[:, ::2],
            "s": np.arange(3.0)[1:2].reshape(()),  # a 0-d view
        }
    return {"x": np.arange(-48, 48).astype(np.float16).reshape(4, 4, 6)[::-2, :, ::2]}


def problems(name: str, own: Shards, handed: Shards, inputs: dict[str, np.ndarray]) -> list[str]:
    """What is wrong with the buffers a backend returned: strides, values, and
    memory shared with an input (the caller's array or a device's block of it)
    or with another buffer returned."""
    found = []
    given = [inputs[p] for p in inputs] + [b for blocks in handed.values() for b in blocks.values()]
    seen: list[np.ndarray] = []
    for r, want in STRIDES[name].items():
        if set(own[r]) != set(handed[SOURCE.get(r, r)]):
            found.append(f"{r} comes back for devices {sorted(own[r])}, not {sorted(handed[SOURCE.get(r, r)])}")
        for d, buf in sorted(own[r].items()):
            if buf.strides != want:
                found.append(f"{r} on device {d} has byte strides {buf.strides}, not {want}")
            if any(np.shares_memory(buf, a) for a in given + seen):
                found.append(f"{r} on device {d} shares memory with an input or another result")
            if not np.array_equal(buf, handed[SOURCE.get(r, r)][d]):
                found.append(f"{r} on device {d} holds other values than its input")
            seen.append(buf)
    return found


OWN: dict[str, tuple[Shards, Shards]] = {}  # backend -> (what it returned, what it was handed), this rank


def recording(backend):
    """The backend, keeping this rank's buffers before the runner shares them under MPI."""

    def run(lowered, inputs, scalars, world):
        out = backend(lowered, inputs, scalars, world)
        OWN[backend.__name__] = (out, inputs)
        return out

    return run


recording_spmd = recording(run_spmd)


def recording_gpu(lowered, inputs, scalars, world):
    from gpu_backend.backend import run_gpu

    return recording(run_gpu)(lowered, inputs, scalars, world)


@pytest.mark.parametrize("backend", ["spmd", "gpu"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_results_are_fresh_and_dense_in_their_layout(name, backend):
    inputs = strided_inputs(name)
    before = {k: x.copy() for k, x in inputs.items()}
    r = refir.run(refir.load(CORPUS / f"{name}.rir"), inputs, backend=f"{__name__}:recording_{backend}")
    own, handed = OWN.pop(f"run_{backend}")
    assert problems(name, own, handed, inputs) == []
    assert problems(name, r.shards, handed, inputs) == []  # in one process the runner hands them on as they are
    for out, got in r.outputs.items():
        want = inputs[SOURCE.get(out, out)]
        assert np.array_equal(got, want) and got.flags.c_contiguous
        assert not any(np.shares_memory(got, x) for x in inputs.values())
    for buffers in r.shards.values():  # writing to a result leaves the caller's inputs alone
        for buf in buffers.values():
            buf[...] = 0
    assert all(np.array_equal(inputs[k], before[k]) for k in inputs)


@pytest.mark.parametrize("name", PROGRAMS)
def test_global_outputs_are_fresh_row_major_arrays(name):
    inputs = strided_inputs(name)
    r = refir.run(refir.load(CORPUS / f"{name}.rir"), inputs, backend="global")
    for out, got in r.outputs.items():
        want = inputs[SOURCE.get(out, out)]
        assert np.array_equal(got, want)
        assert got.strides == np.zeros(want.shape, want.dtype).strides  # row-major
        assert not any(np.shares_memory(got, x) for x in inputs.values())
        assert not any(np.shares_memory(got, o) for k, o in r.outputs.items() if k != out)


def test_a_returned_parameter_is_lowered_to_a_copy_of_its_own():
    low = lower(refir.verify(refir.load(CORPUS / "return_parameter_and_copies.rir")))
    assert [(s.out, type(s.op).__name__, s.tensor_args()) for s in low.steps] == [
        ("y", "Copy", ["x"]), ("z", "Copy", ["x"]), ("x~1", "Copy", ["x"])]
    assert low.source("x") == "x~1" and low.source("y") == "y"
    assert low.segments[0].outputs == ("y", "z", "x~1")
    listing = format_lowered(low)
    assert ("    x~1: f16[2, N@DIDx, 3] on m = copy(x)\n"
            "        local [2, ceil(N/2), 3] strides [3*ceil(N/2), 3, 1]") in listing
    assert listing.endswith("  return y, x~1 as x, z")


def test_an_error_in_the_copy_of_a_returned_parameter_names_the_return():
    def local(step, device, args):
        raise ValueError("boom")

    text = "mesh m = [0]\nfunc main(x: f32[2]) {\n  return x\n}\n"
    low = lower(refir.verify(refir.parse(text, "p.rir")))
    with pytest.raises(RunError) as info:
        execute(low, {"x": {0: np.zeros(2, np.float32)}}, {}, local, InProcess(1))
    assert str(info.value) == ("while running return x on rank 0 (p.rir:3:3):\n"
                               "  in lowered step x~1 = copy: ValueError: boom")


@pytest.fixture(scope="module")
def under_mpi():
    """One mpiexec launch for every program on spmd and gpu; its lines by case."""
    done = run_mpi(4, ["-m", "mpi4py", "tests/test_fresh_results.py"], timeout=200, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith(("ok ", "FAIL "))]
    return {line.split(" ")[1].rstrip(":"): line for line in lines}


@pytest.mark.parametrize("backend", ["spmd", "gpu"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_results_are_fresh_and_dense_under_mpi(under_mpi, name, backend):
    assert under_mpi.get(f"{name}/{backend}") == f"ok {name}/{backend}", under_mpi.get(f"{name}/{backend}", "no line")


def main() -> int:
    """Under mpiexec: each rank checks its own buffers; rank 0 reports every rank's findings."""
    world = mpi_world()
    failed = 0
    for name in PROGRAMS:
        for backend in ("spmd", "gpu"):
            inputs = strided_inputs(name)
            refir.run(refir.load(CORPUS / f"{name}.rir"), inputs, backend=f"__main__:recording_{backend}")
            own, handed = OWN.pop(f"run_{backend}")
            mine = [f"rank {world.rank}: {p}" for p in problems(name, own, handed, inputs)]
            found = [p for part in world.comm.allgather(mine) for p in part]
            failed += bool(found)
            if world.is_root:
                sys.stdout.write(f"FAIL {name}/{backend}: {'; '.join(found)}\n" if found else f"ok {name}/{backend}\n")
                sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
