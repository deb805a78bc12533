"""Replays under MPI, decided by every rank together (tests/test_mpi_replay.py starts it).

    mpiexec -n 2 python tests/mpi_replay.py

Each rank runs the fake device's run (tests/fake_device.py: a recorded
"kernel", a shape header through MPI, a sum over the ranks noted as a
collective) with gpu_backend/launches/replay.py's decision: a rank replays only where
every rank can replay a trace of the same recorded run. A rank that replays
alone would skip the header the others wait for: with REFIR_MPI_TIMEOUT=10
that ends the job with an error, never a hang. Every scenario asserts on
every rank; rank 0 prints one line per scenario passed."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from fake_device import PROGRAM, FakeDevice, data, run, use_fake  # noqa: E402

import refir  # noqa: E402
from gpu_backend.launches import graph as graphs  # noqa: E402
from gpu_backend.launches import launch, replay, replay_trace  # noqa: E402
from refir.errors import RunError  # noqa: E402
from refir.lowering.lower import lower  # noqa: E402
from refir.world.mpi_job import COMMS  # noqa: E402
from refir.world.ranks import World, abort_on_error  # noqa: E402


class Launch:
    """A fake graph: the captured calls, made again at each launch."""

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def launch(self) -> None:
        for fn, args in self.calls:
            fn(*args)


def capture(fails: bool, made: list) -> object:
    """graph.capture's stand-in: a Launch of the calls, or None (refused) where `fails`."""

    def made_of(calls: list, gemm_ex: object, other: object = None) -> Launch | None:
        if fails:
            return None
        made.append(Launch(calls))
        return made[-1]

    return made_of


def main() -> None:
    comm = COMMS.world()
    rank, size = comm.rank, comm.size
    world = World(size, (rank,), comm)
    patch = pytest.MonkeyPatch()
    dev = FakeDevice()
    use_fake(patch, dev)
    dev.wire = comm.Dup()  # stands for NCCL's communicator of the team
    lowered = lower(refir.verify(refir.load(PROGRAM)))

    def inputs(seed: int, r: int = rank) -> dict:
        return data(10 * seed + r, d=r)

    def want(seed: int) -> np.ndarray:  # the sum over the ranks of each rank's product
        return sum(inputs(seed, r)["x"][r] @ inputs(seed, r)["w"][r] for r in range(size))

    def step(seed: int, variant: bool = False, program: object = lowered) -> tuple[np.ndarray, dict]:
        """One run; `variant`: with another key (a scalar more), the same work."""
        before = dict(replay.counts)
        scalars = {"M": 4, "K": 8, "N": 3, **({"variant": 1} if variant else {})}
        got = run(dev, program, inputs(seed), world, scalars)["out"][rank]
        assert np.array_equal(got, want(seed)), (seed, got, want(seed))
        return got, {k: replay.counts[k] - before[k] for k in replay.counts}

    def done(what: str) -> None:
        comm.Barrier()
        if rank == 0:
            print(what, flush=True)

    _, moved = step(1)
    assert moved["recorded"] == 1 and moved["replayed"] == 0, moved
    got, moved = step(2)
    assert moved["replayed"] == 1 and moved["recorded"] == 0, moved
    patch.setattr(replay, "ENABLED", False)  # the full path, on every rank
    full, moved = step(2)
    patch.setattr(replay, "ENABLED", True)
    assert moved["replayed"] == 0 and got.tobytes() == full.tobytes() and got.strides == full.strides
    done("both replay: the full path's bits")

    hog = dev.pool.take(4 * 32) if rank == 1 else None  # an input block of rank 1's trace, in use
    _, moved = step(3)
    assert moved["replayed"] == 0 and moved["recorded"] == 1, moved
    assert moved["refused" if rank == 1 else "declined"] == 1, moved
    if hog is not None:
        dev.pool.give(*hog)
    _, moved = step(4)
    assert moved["replayed"] == 1, moved
    done("one rank cannot replay: both run in full, then replay again")

    patch.setattr(launch, "FAST", rank == 0)  # rank 1 has no key at all: it still takes part in the round
    _, moved = step(5)
    assert moved["replayed"] == 0 and moved["declined" if rank == 0 else "refused"] == (1 if rank == 0 else 0)
    patch.setattr(launch, "FAST", True)
    _, moved = step(6)  # rank 0 recorded that run alone: its trace and rank 1's are of different runs
    assert moved["replayed"] == 0 and moved["recorded"] == 1 and moved["declined"] == 1, moved
    _, moved = step(6)
    assert moved["replayed"] == 1, moved
    done("a rank without a key: both run in full, and record together again")

    _, moved = step(7, variant=True)  # another key on both ranks: recorded in a later run
    assert moved["recorded"] == 1, moved
    got, moved = step(8, variant=rank == 1)  # each rank holds a trace, but of different runs
    assert moved["replayed"] == 0 and moved["recorded"] == 1, moved
    _, moved = step(9, variant=rank == 1)
    assert moved["replayed"] == 1, moved
    done("traces of different runs are not replayed together")

    dev.wire = comm.Dup()  # the team's communicator made anew (refir.close(), then a run)
    _, moved = step(10)
    assert moved["replayed"] == 0 and moved["recorded"] == 1, moved
    _, moved = step(11)
    assert moved["replayed"] == 1, moved
    done("a communicator made anew: both run in full, then replay again")

    for knob, module in (("ENABLED", replay), ("ENABLED", graphs), ("WITH_NCCL", graphs)):
        was = getattr(module, knob)
        patch.setattr(module, knob, was if rank == 0 else not was)  # set unlike on the two ranks
        with pytest.raises(RunError, match="must be set alike on every rank"):
            step(12)
        patch.setattr(module, knob, was)
    _, moved = step(13)  # alike again: the rounds still line up
    assert moved["replayed"] == 1, moved
    done("knobs set unlike on the ranks: every rank stops with a RunError, none hangs")

    for fail_on, with_nccl in ((None, False), (1, False), (None, True), (1, True)):
        made: list[Launch] = []
        patch.setattr(replay_trace, "capture_graph", capture(rank == fail_on, made))
        patch.setattr(graphs, "WITH_NCCL", with_nccl)
        program = lower(refir.verify(refir.load(PROGRAM)))  # a trace of its own
        moved = [step(20 + k, program=program)[1] for k in range(4)]  # records; replays and tries graphs; graphs
        total = {k: sum(m[k] for m in moved) for k in moved[0]}
        assert total["recorded"] == 1 and total["replayed"] == 3, total
        graphed = fail_on is None or (not with_nccl and rank != fail_on)  # with NCCL inside: every rank or none
        assert total["graphs kept"] == graphed and total["graphed"] == 2 * graphed, total
        if with_nccl and made:  # one graph, the collective captured in it
            assert sum(fn == dev.allreduce for fn, _ in made[0].calls) == 1
    patch.setattr(replay_trace, "capture_graph", graphs.capture)
    done("graphs between collectives or around them: right on every rank, NCCL inside only where all capture")


if __name__ == "__main__":
    sys.exit(abort_on_error(main))
