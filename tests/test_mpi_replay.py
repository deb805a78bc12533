"""Replays under MPI (gpu_backend/launches/replay.py): every rank decides together.

Under the simulator, tests/mpi_replay.py runs the decision on the fake
device under `mpiexec -n 2`: both ranks replay (the full path's bits), one
rank cannot (both run in full, no hang), a rank without a key, traces of
different runs, a communicator made anew.

On GPUs this file is also the driver (`mpiexec -n N python -m mpi4py
tests/test_mpi_replay.py`, one GPU per rank; with one GPU, N=1 and
REFIR_MPI_ALONE=1, which makes the one rank take the MPI path, NCCL
included): every shared example, project example and corpus program that
fits the world (or, on the mesh [0, 1], fits it when put on the world's
devices), and the seed-2 pattern, run five times on fresh inputs; each
run's buffers must equal those of a run with replays off, bit for bit and
stride for stride, and the pattern's runs must be replayed with their NCCL
calls. Rank 0 prints one line per program."""

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from helpers import EXAMPLES, OWN_EXAMPLES, ROOT, SEED2, run_mpi  # noqa: E402

SCENARIOS = ["both replay: the full path's bits",
             "one rank cannot replay: both run in full, then replay again",
             "a rank without a key: both run in full, and record together again",
             "traces of different runs are not replayed together",
             "a communicator made anew: both run in full, then replay again",
             "knobs set unlike on the ranks: every rank stops with a RunError, none hangs",
             "graphs between collectives or around them: right on every rank, NCCL inside only where all capture"]


def test_replays_under_mpi_are_decided_by_every_rank_together():
    start = time.monotonic()
    done = run_mpi(2, ["tests/mpi_replay.py"], timeout=90, env={"REFIR_MPI_TIMEOUT": "10"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == SCENARIOS, done.stdout + done.stderr
    assert time.monotonic() - start < 60  # no wait ran out: every rank decided alike each time


def _gpu() -> bool:
    from gpu_backend.device import SIMULATED

    return not SIMULATED


@pytest.mark.skipif(not _gpu(), reason="replays need the pool and driver launches of a GPU")
def test_replayed_runs_under_mpi_equal_the_full_path():
    done = run_mpi(1, ["-m", "mpi4py", "tests/test_mpi_replay.py"], timeout=400,
                   env={"REFIR_MPI_ALONE": "1", "NUMBA_ENABLE_CUDASIM": "0",
                        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ok seed2" in done.stdout, done.stdout


def problems(program, checked, bound: dict[str, int] | None = None, draws: int = 5) -> tuple[list[str], int]:
    """What differs between replayed runs and runs with replays off; and how many runs were replayed."""
    import refir
    from gpu_backend.launches import replay
    from refir.running.inputs import default_bindings, draw_inputs

    found, before = [], replay.counts["replayed"]
    bindings = default_bindings(checked, bound)
    for draw in range(draws):  # compiles; records; replays, then makes and tries the graph; the graph
        inputs = draw_inputs(checked, bindings, seed=draw)
        got = refir.run(program, inputs, backend="gpu")
        replay.ENABLED = False  # on every rank at once: all take the full path
        try:
            want = refir.run(program, inputs, backend="gpu")
        finally:
            replay.ENABLED = True
        for name, blocks in want.shards.items():
            for d, buf in blocks.items():
                mine = got.shards[name].get(d)
                if mine is None or mine.strides != buf.strides or mine.tobytes() != buf.tobytes():
                    found.append(f"draw {draw}: {name} on device {d} differs")
    return found, replay.counts["replayed"] - before


def fitted(text: str, devices: str, size: int) -> tuple:
    """The program, and checked, if it fits a world of `size`; a program on
    the mesh [0, 1] that does not is tried on the world's devices instead
    (with one rank, its collectives on teams of one: NCCL calls all the same)."""
    import refir
    from refir.errors import RefirError
    from refir.running.bindings import devices_needed

    for source in (text, text.replace("[0, 1]", devices)):
        try:
            program = refir.load(source)
            checked = refir.verify(program)
        except RefirError:
            continue
        if devices_needed(checked) <= size:
            return program, checked
    return None, None


def main() -> int:
    from gpu_backend.launches import replay
    from refir.errors import RefirError
    from refir.running.inputs import bind_lines
    from refir.running.prepare import lowered_of, verified
    from refir.world.ranks import mpi_world

    world = mpi_world()
    size = world.size if world is not None else 1
    corpus = sorted((ROOT / "conformance" / "corpus").glob("*.rir"))
    seed2 = SEED2.replace("[0, 1]", "[" + ", ".join(map(str, range(size))) + "]")
    failed = 0
    devices = "[" + ", ".join(map(str, range(size))) + "]"
    for name, text in [("seed2", seed2)] + [(p.stem, p.read_text()) for p in EXAMPLES + OWN_EXAMPLES + corpus]:
        program, checked = fitted(text, devices, size)
        if program is None:
            continue
        try:
            listed = bind_lines(text)  # the first # bind: line (an example's reshapes need its extents)
            found, replayed = problems(program, checked, listed[0] if listed else None)
        except RefirError as exc:
            found, replayed = [f"{type(exc).__name__}: {exc}"], 0
        lowered = lowered_of(verified(program, None))
        collectives = max((t.collectives for t in replay._traces.values() if t.lowered is lowered), default=0)
        if name == "seed2" and (replayed < 3 or collectives == 0):  # the process's first run finds no pool yet
            found.append(f"replayed {replayed} of 5 runs, {collectives} collective calls recorded "
                         f"(last recording not kept: {replay.last_taint})")
        failed += bool(found)
        line = (f"ok {name}: {replayed} of 5 replayed, {collectives} collective calls in its trace"
                if not found else f"FAIL {name}: {'; '.join(found)}")
        if world is None or world.is_root:
            print(line, flush=True)
    if world is None or world.is_root:
        print(f"counts {replay.counts}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
