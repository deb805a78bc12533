"""A piece of the wrong size never stalls an MPI job: the sender refuses a
block its type does not give (every peer sizes what it receives from the
types), a point-to-point receiver refuses a message of another length, and a
rank that fails inside a run ends its peers' waits at once
(refir.world.rank_failures), so that a mutant whose wrong cuts fail some ranks
only is caught under mpiexec in seconds, not at REFIR_MPI_TIMEOUT. Each case
is one `mpiexec -n 4` launch; they run side by side, once for the file."""

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import ROOT, run_mpi

CORPUS = ROOT / "conformance" / "corpus"
TIMEOUT_S = 120  # far above what any case takes: a job that waits for it has stalled
PROMPT_S = 60  # every case ends well within this, the MPI start-up of four ranks on a loaded machine included
PLANTED = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}  # tests/planted_mpi.py

CASES = {
    "block": (["run", str(CORPUS / "nested_2d_uneven.rir"), "--backend", "planted_mpi:wrong_block"], {}),
    "longer": (["run", str(CORPUS / "uneven_send_recv.rir"), "--backend", "planted_mpi:wrong_message"],
               {"PLANTED_BYTES": "4"}),
    "shorter": (["run", str(CORPUS / "uneven_send_recv.rir"), "--backend", "planted_mpi:wrong_message"],
                {"PLANTED_BYTES": "-4"}),
    "mutant": (["conform", "--mutant", "block_offset_from_own_size", str(CORPUS / "nested_2d_uneven.rir")], {}),
}


def launch(args, env):
    start = time.monotonic()
    done = run_mpi(4, ["-m", "refir", *args], timeout=TIMEOUT_S + 60, cwd=ROOT,
                   env={**PLANTED, "REFIR_MPI_TIMEOUT": str(TIMEOUT_S), **env})
    return done, time.monotonic() - start


@pytest.fixture(scope="module")
def jobs():
    with ThreadPoolExecutor(max_workers=len(CASES)) as pool:
        return dict(zip(CASES, pool.map(lambda case: launch(*CASES[case]), CASES)))


def the_error(done):
    """The one `rank N: error:` line (the rank that saw it speaks; its peers stay quiet)."""
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    found = re.findall(r"^rank \d+: error: .*$", done.stderr, re.MULTILINE)
    assert len(found) == 1, done.stderr
    assert "gave up waiting" not in done.stderr, done.stderr
    return found[0], done.stderr


def test_a_sender_refuses_a_block_its_type_does_not_give(jobs):
    done, seconds = jobs["block"]
    line, text = the_error(done)
    assert line.startswith("rank 1: error: while running a: f32[5@DIDy, 3] on g = set(x) on rank 1 (")
    assert line.endswith("nested_2d_uneven.rir:10:3):")
    assert ("rank 1: allgather refuses a block of shape (2, 3) (24 bytes): f32[5@(DIDy,DIDx), 3] on g gives "
            "this rank (1, 3) (12 bytes), which its peers expect [shard_c1]") in text
    assert seconds < PROMPT_S


@pytest.mark.parametrize("case,why", [
    ("longer", "failed in MPI: Message truncated (a message longer than the types give)"),
    ("shorter", "brought 28 bytes, where the types give 32"),
])
def test_a_receiver_refuses_a_message_of_another_length(jobs, case, why):
    done, seconds = jobs[case]
    line, text = the_error(done)
    assert line.startswith("rank 2: error: while running y: f32[N@DIDx, 4] on q layout[1, 0] = set(x) on rank 2")
    assert f"in lowered step y = send_recv: rank 2: send_recv's block from rank 0 {why}\n" in text
    assert seconds < PROMPT_S


def test_a_mutant_that_fails_some_ranks_only_is_caught_in_seconds(jobs):
    """block_offset_from_own_size cuts a nest's blocks 2, 2, 1, 0 for 2, 1, 1, 1:
    ranks 0, 1 and 3 fail a local step's shard_c1 check while rank 2 goes on to
    the all_to_all with rank 0; their notices end its wait, and the table goes on."""
    done, seconds = jobs["mutant"]
    assert done.returncode == 0, done.stderr
    assert re.search(r"^block_offset_from_own_size\s+values\s", done.stdout, re.MULTILINE), done.stdout
    assert "1 mutants, 1 killed" in done.stdout and "gave up waiting" not in done.stdout + done.stderr
    assert seconds < PROMPT_S
