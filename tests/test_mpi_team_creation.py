"""Creating a communicator blocks until every member calls it, and nothing
ends that wait; so members agree first that all will (refir.world.mpi_job,
_all_will_create), and a rank that hears of another's failure while they
agree says no before it stops. These three-rank jobs plant the races a loaded
machine makes (once seen in CI as a conformance mutant's stall), in order, by
messages of their own: rank 2 fails while rank 0 waits for rank 1, which comes
only once rank 0 has left. Without the agreement rank 1 would enter the
creation alone and the job would run to mpiexec's limit; once ranks 0 and 1
agreed, rank 0 makes it with rank 1 though it hears of rank 2 meanwhile."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import run_mpi

CHILD = """
import sys, time
from mpi4py import MPI
from refir.errors import RunError
from refir.world.mpi_job import COMMS, barrier
from refir.world.rank_failures import watched

case, rank, world = sys.argv[1], MPI.COMM_WORLD.rank, MPI.COMM_WORLD
LEFT, GO = 77, 78  # the test's own messages, on COMM_WORLD (refir's travel on duplicates of it)
team = COMMS.team((0, 1)) if rank < 2 else None
barrier(COMMS.world())  # every rank starts the run together


def make(comm):  # a blocking creation (as NCCL's init): a barrier first, then MPI's blocking one
    if comm.rank == 0:
        world.send("agreed", dest=2, tag=GO)  # ranks 0 and 1 agreed: now rank 2 fails
    else:
        time.sleep(2.0)  # while rank 0 waits in the barrier, deaf to rank 2's failure
    barrier(comm)
    comm.Barrier()
    return "made"


try:
    with watched():
        if rank == 2:
            if case == "agreed":
                world.recv(source=0, tag=GO)
            raise RunError("planted failure")
        if rank == 1 and case != "agreed":
            world.recv(source=0, tag=LEFT)  # rank 0 heard of rank 2's failure and left first
        if case == "team":
            COMMS.team((1, 0))
        else:
            COMMS.other("probe", (0, 1), make, lambda _: None)
        print(f"rank {rank}: made it", flush=True)
except Exception as exc:
    print(f"rank {rank}: {type(exc).__name__}: {exc}", flush=True)
    if rank == 0 and case != "agreed":
        world.send("left", dest=1, tag=LEFT)
"""
LIMIT_S = 60  # far above what any case takes (a few seconds): a job that runs to it has hung

EXPECT = {
    # rank 0 hears rank 2's failure before rank 1 comes, and says no; rank 1 hears that no
    "team": ["rank 0: OtherRankError: rank 2 stopped with RunError: planted failure",
             "rank 1: OtherRankError: rank 0 stopped before creating a communicator of ranks [1, 0]"],
    "other": ["rank 0: OtherRankError: rank 2 stopped with RunError: planted failure",
              "rank 1: OtherRankError: rank 0 stopped before creating a communicator of ranks [0, 1]"],
    # once both agreed, rank 0 makes it with rank 1 although it hears of rank 2 meanwhile
    "agreed": ["rank 0: made it", "rank 1: made it"],
}


@pytest.fixture(scope="module")
def jobs():
    def launch(case):
        start = time.monotonic()
        done = run_mpi(3, ["-c", CHILD, case], timeout=LIMIT_S, env={"REFIR_MPI_TIMEOUT": str(LIMIT_S)})
        return done, time.monotonic() - start
    with ThreadPoolExecutor(max_workers=len(EXPECT)) as pool:
        return dict(zip(EXPECT, pool.map(launch, EXPECT)))


@pytest.mark.parametrize("case", EXPECT)
def test_a_failure_while_members_agree_never_leaves_one_in_the_creation(jobs, case):
    done, seconds = jobs[case]
    said = sorted(line for line in done.stdout.splitlines() if line.startswith("rank "))
    assert said == sorted([*EXPECT[case], "rank 2: RunError: planted failure"]), done.stdout + done.stderr
    assert done.returncode == 0 and seconds < LIMIT_S / 2, (seconds, done.stderr)
