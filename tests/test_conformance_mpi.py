"""The conformance suite under `mpiexec -n 4`: one rank per process, every rank
drawing the same cases; one launch for the suite, one for the mutant table."""

from helpers import run_mpi

MPI_ENV = {"REFIR_MPI_TIMEOUT": "60"}  # a backend stuck on one rank fails the run, not CI


def test_corpus_and_200_generated_programs_agree_under_mpirun(tmp_path):
    done = run_mpi(4, ["-m", "refir", "conform", "--cases", "200", "--save", str(tmp_path)], timeout=420,
                   env=MPI_ENV)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    out = done.stdout
    assert "on 4 MPI ranks" in out
    assert "pipeline_dag needs 6 ranks, the world has 4" in out  # skipped with a note
    assert out.count("all backends agree") == 1  # rank 0 alone prints


def test_every_mutant_is_killed_under_mpirun():
    done = run_mpi(4, ["-m", "refir", "conform", "--until-killed", "--cases", "0"], timeout=300, env=MPI_ENV)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "SURVIVED" not in done.stdout and done.stdout.count("mutants,") == 1
