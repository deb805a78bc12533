"""No MPI job ever hangs: a rank killed, stalled or failing at any stage of a
run (handing out inputs, creating a communicator, inside a collective,
gathering the results) ends the whole job within the timeout, with one clear
message. Faults are injected through refir.world.mpi_job.fault (REFIR_FAULT=RANK:STAGE:KIND);
each launch is one `python -m refir run` under `mpiexec -n 4`. A fault ends its
job, so each needs a launch of its own: they run four at a time (their ranks
mostly sleep, waiting), once for the whole file.

The time bounds hold on a loaded two-core machine too, where starting four
jobs of four ranks each can take many seconds: a stall's job runs with a 3 s
timeout, must take at least that and end far below LONG_S; a job that raises
or is killed runs with a timeout of LONG_S and must end before it (so no
rank waited for the timeout). A job that hung would run on to the launcher's
limit, twice LONG_S. No bound adds to a job's time."""

import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from helpers import ROOT, mpiexec, run_job, run_mpi

TIMEOUT_S = 3  # REFIR_MPI_TIMEOUT of a stall's job: every such job waits it out
# REFIR_MPI_TIMEOUT of the other jobs, and the bound every job ends within: far above a stall's
# TIMEOUT_S plus refir.world.mpi_job.STAGGER_S for each later rank (4.5 s) plus four ranks' start-up
LONG_S = 60
PROGRAM = """mesh m = [0, 1, 2, 3]
func main(x: f32[8@DIDx, 3]) {
  s = sum(x, dims=[0])
  return s
}
"""
STAGES = ["inputs", "comm", "collective", "gather"]
# (rank, stage): rank 2 everywhere; rank 0 where it plays a part of its own
FAULTS = [(2, stage) for stage in STAGES] + [(0, "gather"), (0, "inputs")]
# what the launcher prints once when a rank is killed
KILLED = "BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES"


def launch(path, fault):
    timeout = TIMEOUT_S if fault.endswith(":stall") else LONG_S
    env = {"REFIR_FAULT": fault, "REFIR_MPI_TIMEOUT": str(timeout)}
    start = time.monotonic()
    done = run_mpi(4, ["-m", "refir", "run", str(path)], timeout=2 * LONG_S, env=env, cwd=ROOT)
    return done, time.monotonic() - start


CASES = ([f"{r}:{s}:raise" for r, s in FAULTS] + [f"{r}:{s}:stall" for r, s in FAULTS]
         + [f"2:{s}:kill" for s in STAGES])


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """Every fault's launch: (CompletedProcess, seconds) by REFIR_FAULT value."""
    path = tmp_path_factory.mktemp("faults") / "fault.rir"
    path.write_text(PROGRAM)
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(CASES, pool.map(lambda fault: launch(path, fault), CASES)))


def errors(text):
    return re.findall(r"^rank \d+: error: .*$", text, re.MULTILINE)


@pytest.mark.parametrize("rank,stage", FAULTS)
def test_a_rank_that_raises_ends_the_job_with_its_message(jobs, rank, stage):
    done, seconds = jobs[f"{rank}:{stage}:raise"]
    assert done.returncode != 0 and "Traceback" not in done.stderr
    found = errors(done.stderr)
    assert len(found) == 1 and found[0].startswith(f"rank {rank}: error: "), done.stderr
    assert done.stderr.count(f"injected fault at {stage}") == 1  # (inside a run, with the equation it ran)
    assert seconds < LONG_S  # it ends at once: no rank waits for the timeout


@pytest.mark.parametrize("rank,stage", FAULTS)
def test_a_rank_that_stalls_ends_the_job_within_the_timeout(jobs, rank, stage):
    done, seconds = jobs[f"{rank}:{stage}:stall"]
    assert done.returncode != 0 and "Traceback" not in done.stderr
    found = errors(done.stderr)
    assert len(found) == 1, done.stderr  # the first rank to give up speaks; the launcher ends the rest
    gave_up = re.findall(rf"gave up waiting for .+ after {TIMEOUT_S} s \(another rank failed or stopped "
                         r"responding; REFIR_MPI_TIMEOUT sets the limit\)", done.stderr)
    assert len(gave_up) == 1, done.stderr  # (inside a run, with the equation it ran)
    assert not found[0].startswith(f"rank {rank}:")  # the stalled rank itself says nothing
    assert TIMEOUT_S <= seconds < LONG_S  # the timeout ended it, not the launcher's limit


@pytest.mark.parametrize("rank,stage", [(2, stage) for stage in STAGES])
def test_a_rank_that_is_killed_ends_the_job(jobs, rank, stage):
    done, seconds = jobs[f"{rank}:{stage}:kill"]
    assert done.returncode != 0
    assert (done.stdout + done.stderr).count(KILLED) == 1 and errors(done.stderr) == []
    assert seconds < LONG_S  # the launcher ends it at once: no rank waits for the timeout


def launch_split(tmp_path, args, root_dir, other_dir):
    """`mpiexec` with rank 0 working in `root_dir` and ranks 1-3 in `other_dir`:
    a relative path can exist on some ranks only."""
    cmd = [mpiexec(), "-n", "1", "-wdir", str(root_dir), sys.executable, *args, ":",
           "-n", "3", "-wdir", str(other_dir), sys.executable, *args]
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "MPIEXEC_TIMEOUT": str(2 * LONG_S),
           "REFIR_MPI_TIMEOUT": str(LONG_S), "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    done = run_job(cmd, capture_output=True, text=True, timeout=2 * LONG_S + 30, env=env)
    return done, time.monotonic() - start


@pytest.fixture
def on_some_ranks_only(tmp_path):
    """An --inputs file present for rank 0 only, and one present for ranks 1-3 only."""
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    (tmp_path / "p.rir").write_text(PROGRAM)
    np.savez(here / "in.npz", x=np.arange(24, dtype=np.float32).reshape(8, 3))
    return tmp_path, here, there


def test_inputs_on_rank_0_only_are_enough(on_some_ranks_only):
    tmp_path, here, there = on_some_ranks_only
    done, seconds = launch_split(tmp_path, ["-m", "refir", "run", str(tmp_path / "p.rir"), "--inputs", "in.npz"],
                                 here, there)
    assert done.returncode == 0, done.stderr
    assert "s: f32[3] on m = shape (3,)\n  [ 84.  92. 100.]" in done.stdout  # the other ranks never open it


def test_inputs_missing_on_rank_0_end_every_rank_with_one_message(on_some_ranks_only):
    tmp_path, here, there = on_some_ranks_only
    done, seconds = launch_split(tmp_path, ["-m", "refir", "run", str(tmp_path / "p.rir"), "--inputs", "in.npz"],
                                 there, here)
    assert done.returncode == 2 and done.stdout == "" and seconds < LONG_S  # no rank waits for the timeout
    assert done.stderr.count("error:") == 1, done.stderr
    assert done.stderr.startswith("error: cannot read inputs from in.npz")
