"""Run a batch of programs in one MPI launch (tests/test_mpi.py starts it).

    mpiexec -n W python tests/mpi_driver.py BATCH.pkl RESULT.pkl

BATCH.pkl is a list of jobs `{"name", "program" (text), "inputs" (global arrays)}`,
optionally `"root_inputs": True` (ranks other than 0 are given no inputs) and
`"everywhere": False` (results on rank 0 only, refir.run's default; the driver
otherwise asks for every buffer on every rank), `"close_before": True`
(refir.close() first), `"backend"` (a backend of this module's) and `"again"`
(a list of further global inputs for the very same program object, run after
it: their outputs, or error messages, land in the job's "again").
Each job runs on spmd, one rank per process. Rank 0 writes RESULT.pkl: per job,
the global outputs, every device's result buffer with its strides, both as the
runner returns it and as the rank that computed it held it, the input blocks
each rank's backend was handed, how many communicators the job created, and the
expect lines that failed. A job that raises a RefirError records the message and
the batch goes on (every rank meets the same error).
"""

import pickle
import sys

from interp.backend import run_spmd
from refir import close
from refir.checks.expect_lines import check_expects
from refir.errors import RefirError, RunError
from refir.running.runner import run
from refir.text.parser import parse
from refir.world.mpi_job import COMMS
from refir.world.ranks import mpi_world

HELD = {}  # result -> device -> (strides, array): this rank's own buffers
GIVEN = {}  # input -> device -> (shape, bytes of the memory behind the block)


def recording_spmd(lowered, inputs, scalars, world):
    """The spmd backend, keeping what this rank was given and computed before the runner gathers it."""
    GIVEN.clear()
    GIVEN.update({name: {d: (x.shape, (x.base if x.base is not None else x).nbytes) for d, x in bufs.items()}
                  for name, bufs in inputs.items()})
    out = run_spmd(lowered, inputs, scalars, world)
    HELD.clear()
    HELD.update({name: {d: (x.strides, x.copy(order="K")) for d, x in bufs.items()} for name, bufs in out.items()})
    return out


def refir_error_on_rank_2(lowered, inputs, scalars, world):
    """A backend that fails on rank 2 alone while the others wait for it in a collective."""
    if world.rank == 2:
        raise RunError("rank 2 gave up")
    world.comm.Barrier()
    return run_spmd(lowered, inputs, scalars, world)


def crash_on_rank_2(lowered, inputs, scalars, world):
    """Likewise, with an exception that is not refir's (a bug)."""
    if world.rank == 2:
        raise ZeroDivisionError("rank 2 divided by zero")
    world.comm.Barrier()
    return run_spmd(lowered, inputs, scalars, world)


def missing_on_rank_2(lowered, inputs, scalars, world):
    """A backend whose rank 2 returns None for its buffers."""
    out = run_spmd(lowered, inputs, scalars, world)
    return {name: {d: None if world.rank == 2 else x for d, x in bufs.items()} for name, bufs in out.items()}


def misshapen_on_rank_2(lowered, inputs, scalars, world):
    """A backend whose rank 2 returns a block one row short."""
    out = run_spmd(lowered, inputs, scalars, world)
    return {name: {d: x[:-1] if world.rank == 2 else x for d, x in bufs.items()} for name, bufs in out.items()}


def main(batch_path, result_path):
    world = mpi_world()
    assert world is not None, "run me under mpiexec with more than one rank"
    with open(batch_path, "rb") as f:
        jobs = pickle.load(f)
    results = {}
    for job in jobs:
        program = parse(job["program"], job["name"])
        inputs = job["inputs"] if world.is_root or not job.get("root_inputs") else {}
        if job.get("close_before"):
            close()
        before = dict(COMMS.created)
        try:
            r = run(program, inputs, backend=f"__main__:{job.get('backend', 'recording_spmd')}",
                    everywhere=job.get("everywhere", True))
        except RefirError as exc:
            results[job["name"]] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        created = {k: n - before.get(k, 0) for k, n in COMMS.created.items()}
        held = world.comm.gather((HELD.copy(), GIVEN.copy(), created, sorted(r.outputs)), root=0)
        results[job["name"]] = {
            "outputs": r.outputs,
            "shards": {name: {d: (x.strides, x) for d, x in bufs.items()} for name, bufs in r.shards.items()},
            "held": {rank: part[0] for rank, part in enumerate(held or [])},
            "given": {rank: part[1] for rank, part in enumerate(held or [])},
            "created": {rank: part[2] for rank, part in enumerate(held or [])},
            "outputs_on": {rank: part[3] for rank, part in enumerate(held or [])},
            "failures": check_expects(program, job["inputs"], r.outputs) if world.is_root else [],
            "again": [],
        }
        for more in job.get("again", []):  # what refir.run kept from the run before must not be served stale
            try:
                got = run(program, more, everywhere=False).outputs
            except RefirError as exc:
                got = f"{type(exc).__name__}: {exc}"
            results[job["name"]]["again"].append(got)
    ranks = world.comm.gather(world.hosted, root=0)
    if world.is_root:
        with open(result_path, "wb") as f:
            pickle.dump({"world": world.size, "hosted": ranks, "jobs": results}, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
