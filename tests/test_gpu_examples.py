"""Every shared example on the gpu backend: its `# expect:` lines hold, every
result buffer is laid out as its type declares, and the buffers equal spmd's
bit for bit (the inputs are integer-valued, so float sums agree exactly too).
In one process, and under mpiexec with one rank per process: there, this file
is the driver (`python -m mpi4py tests/test_gpu_examples.py`), one launch for
every example, printing one line per example from rank 0."""

import os
import sys

import numpy as np
import pytest

import refir
from refir.checks.expect_lines import check_expects
from refir.errors import RefirError
from refir.ir.types import has_layout
from refir.running.bindings import devices_needed
from refir.running.inputs import default_bindings, draw_inputs
from refir.world.ranks import mpi_world

sys.path.insert(0, os.path.dirname(__file__))
from helpers import EXAMPLES, ROOT, needs_shared, run_mpi  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"), needs_shared]


def problems(path) -> list[str]:
    """What is wrong with the example on gpu (empty when nothing is)."""
    program = refir.load(path)
    checked = refir.verify(program)
    inputs = draw_inputs(checked, default_bindings(checked), seed=1)
    gpu = refir.run(program, inputs, backend="gpu")
    spmd = refir.run(program, inputs, backend="spmd")
    world = mpi_world()
    # under MPI rank 0 holds the results (and every buffer), the others their own buffers
    found = check_expects(program, inputs, gpu.outputs) if world is None or world.is_root else []
    for name, blocks in gpu.shards.items():
        order = checked.types[name].order
        for d, buf in blocks.items():
            want = spmd.shards[name][d]
            if not has_layout(buf, order):
                found.append(f"{name} on device {d} has strides {buf.strides}, not dense in order {order}")
            if buf.shape != want.shape or buf.tobytes() != want.tobytes():
                found.append(f"{name} on device {d} differs from spmd")
    return found


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_in_one_process(path):
    assert problems(path) == []


BAD_INPUTS = {
    "missing input": ("layouts", lambda x: {"x": x["x"]}, None),
    "wrong dtype": ("layouts", lambda x: {**x, "y": x["y"].astype("f8")}, None),
    "wrong extent": ("layouts", lambda x: {**x, "x": x["x"][:, :4]}, None),
    "symbols disagree": ("global_extent", lambda x: {"x": np.zeros((6, 5, 4), np.float32)}, None),
    "world too small": ("collectives", lambda x: x, 2),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_raises_what_spmd_raises(case):  # (an extent that does not divide is no error: spec §3.1)
    name, spoil, world = BAD_INPUTS[case]
    program = refir.load(next(p for p in EXAMPLES if p.stem == name))
    checked = refir.verify(program)
    inputs = spoil(draw_inputs(checked, default_bindings(checked), seed=0))
    raised = []
    for backend in ("spmd", "gpu"):
        with pytest.raises(RefirError) as info:
            refir.run(program, inputs, backend=backend, world=world)
        raised.append(type(info.value))
    assert raised[0] is raised[1]


@pytest.fixture(scope="module")
def under_mpi():
    """One mpiexec launch for every example; its lines by example name."""
    ranks = max(devices_needed(refir.verify(refir.load(p))) for p in EXAMPLES)
    done = run_mpi(ranks, ["-m", "mpi4py", "tests/test_gpu_examples.py"], timeout=200,
                   env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith(("ok ", "FAIL "))]
    return {line.split(" ", 1)[1].split(":")[0]: line for line in lines}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_under_mpi(under_mpi, path):
    assert under_mpi.get(path.stem) == f"ok {path.stem}", under_mpi.get(path.stem, "no line")


def test_a_second_run_under_mpi_makes_no_communicator(under_mpi):
    assert under_mpi.get("reuse", "no line").startswith("ok reuse"), under_mpi.get("reuse", "no line")


def reuse_line(path) -> str:
    """Run an example that has run before: no communicator (MPI's or NCCL's) is made."""
    from refir.world.mpi_job import COMMS

    before = dict(COMMS.created)
    found = problems(path)
    made = {k: n - before.get(k, 0) for k, n in COMMS.created.items() if n != before.get(k, 0)}
    if found or made:
        return f"FAIL reuse: {path.stem} again made {made} {'; '.join(found)}"
    return f"ok reuse: {path.stem} again made none (made so far: {dict(sorted(COMMS.created.items()))})"


def main() -> int:
    """Under mpiexec: every example that fits the world; rank 0 reports."""
    world = mpi_world()
    size = world.size if world else 1
    failed = 0
    for path in EXAMPLES:
        needed = devices_needed(refir.verify(refir.load(path)))
        if needed > size:
            line = f"skip {path.stem}: needs {needed} ranks"
        else:
            try:
                found = problems(path)
            except RefirError as exc:
                found = [f"{type(exc).__name__}: {exc}"]
            failed += bool(found)
            line = f"ok {path.stem}" if not found else f"FAIL {path.stem}: {'; '.join(found)}"
        if world is None or world.is_root:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
    if world is not None:
        line = reuse_line(next(p for p in EXAMPLES if devices_needed(refir.verify(refir.load(p))) <= size))
        failed += line.startswith("FAIL")
        if world.is_root:
            sys.stdout.write(line + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
