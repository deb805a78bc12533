"""Issue 12: the bug classes the default run used to miss, its coverage table,
and what it says it did not test."""

import re

import numpy as np
import pytest

from conformance.cases import CORPUS, cases_of
from conformance.coverage import Coverage, allowed_local, not_reached
from conformance.mpi_batch import why_not
from conformance.mutants import MUTANTS
from conformance.teeth import hunt
from gpu_backend.device import THREADS
from refir.cli import main
from refir.ir import ops


def _mutant(name: str):
    (m,) = [m for m in MUTANTS if m.name == name]
    return m


def _killed_by(name: str, program: str, backends=("spmd", "gpu")):
    (kill,) = hunt(cases_of(CORPUS / f"{program}.rir", "corpus"), mutants=[_mutant(name)], backends=backends)
    return kill


@pytest.mark.parametrize("program", ["mesh2d_every_axis", "mesh3d_every_axis"])
def test_part_by_mesh_position_is_killed_on_permuted_2d_and_3d_meshes(program):
    kill = _killed_by("team_part_by_mesh_position", program)
    assert kill.killed and kill.checks["values"] >= 1 and kill.first.startswith(program)


def test_part_by_mesh_position_is_harmless_on_a_1d_mesh():
    # The mutant is the real bug class: on a 1-D mesh team and mesh positions agree.
    kill = _killed_by("team_part_by_mesh_position", "reduce_scatter_static")
    assert not kill.killed and not kill.checks


def test_saturating_integer_casts_are_killed_by_the_cast_pairs():
    kill = _killed_by("integer_cast_saturates", "cast_integer_pairs")
    assert kill.killed and "cast_integer_pairs" in kill.first


def test_cast_pairs_hold_values_out_of_every_target_range():
    (case,) = cases_of(CORPUS / "cast_integer_pairs.rir")
    x = case.inputs()
    assert x["xi64"].min() < np.iinfo(np.int32).min and x["xi64"].max() > np.iinfo(np.int32).max
    assert x["xi16"].min() < -128 and x["xi8"].min() < 0  # i8 -> u8 wraps negatives
    assert len(case.checked.func.results) == 20  # every ordered pair of the five integer dtypes


def test_gpu_tree_missing_its_last_level_is_killed_past_one_block():
    kill = _killed_by("gpu_tree_skips_last_level", "reduce_tree_sizes")
    assert kill.killed and kill.mutant.backend == "gpu" and "reduce_tree_sizes" in kill.first
    # ... and reduced extents below a block never reach the tree.
    assert not _killed_by("gpu_tree_skips_last_level", "integer_reductions").killed


@pytest.mark.parametrize("name, program, spared", [
    ("gpu_words_shift_dropped", "window_word_rows", "window_local"),
    ("gpu_where_words_misaligned", "masks_long_rows", "masks_compare_where"),
    ("gpu_reduce_inner_run_only", "reduce_split_dims", "reduce_tree_sizes"),
    ("gpu_transpose_batch_axis_dropped", "permute_five_axes", "scatter_after_permute_sweep"),
])
def test_each_gpu_kernel_path_mutant_is_killed_by_the_program_chosen_for_its_path(name, program, spared):
    kill = _killed_by(name, program)
    assert kill.killed and kill.mutant.backend == "gpu" and kill.first.startswith(program), (kill.first, kill.not_run)
    # ... and a program with the op the mutant needs, that never takes the path, runs clean under it.
    kill = _killed_by(name, spared)
    assert not kill.checks and not kill.not_run


def test_reduce_tree_sizes_cross_the_simulated_and_the_real_block():
    (case,) = cases_of(CORPUS / "reduce_tree_sizes.rir")
    extents = {p.name: p.type.axes[-1].extent for p in case.checked.func.params}
    assert THREADS in (8, 256)  # the block: 8 threads under the simulator, 256 on a GPU
    assert extents == {"p": 33, "q": 100, "r": 65, "s": 257, "t": 513}  # one past 32 and 256, several blocks


def test_a_mutant_of_a_missing_backend_is_reported_not_run():
    (kill,) = hunt(cases_of(CORPUS / "reduce_tree_sizes.rir"), mutants=[_mutant("gpu_tree_skips_last_level")],
                   backends=("spmd",))
    assert kill.not_run == "the gpu backend is not available" and not kill.checks


@pytest.mark.skipif(bool(why_not()), reason="no mpiexec")
def test_mpi_only_mutants_are_killed_by_the_default_runs_mpi_batch():
    names = ["mpi_broadcast_root_world_rank", "mpi_packs_row_major"]
    kills = hunt(cases_of(CORPUS / "single_device_mesh.rir"), mutants=[_mutant(n) for n in names])
    for k in kills:
        assert k.killed, (k.mutant.name, k.not_run, dict(k.checks))
        assert k.first.startswith("under mpiexec -n 4: ")
    assert "broadcast_replicated_mesh" in kills[0].first


def test_coverage_is_measured_from_the_lowered_programs():
    cov = Coverage().measure(cases_of(CORPUS / "mesh3d_every_axis.rir"))
    assert cov.programs == 1
    for kind in (ops.Allgather, ops.AllToAll, ops.ReduceScatter, ops.Allreduce):
        for axis in ("DIDx", "DIDy", "DIDz"):
            assert cov.mesh[(kind, (3, axis))] is True  # reached, with device ids out of order
    assert ("sum", "i32") in cov.local and ("sum", "f32") not in cov.local
    assert (ops.AllToAll, "i32") in cov.comm_dtype
    missing = not_reached(cov, 0, 0)
    assert "cast to i8 on i64: 0 generated programs (seed 0) did not draw it; " \
           "no corpus or example program has it" in missing
    assert "gather on 1-D root: 0 generated programs (seed 0) did not draw it; " \
           "no corpus or example program has it" in missing
    assert not any(m.startswith("allgather on 3-D") for m in missing)


def test_cells_the_spec_forbids_are_not_cells():
    assert allowed_local("exp", "f32") and not allowed_local("exp", "i32")
    assert allowed_local("bxor", "u8") and not allowed_local("bxor", "f64")
    assert allowed_local("cast to u8", "bf16") and allowed_local("matmul", "i8")


def test_conform_coverage_prints_every_table(capsys):
    assert main(["conform", "--coverage", "--cases", "3"]) == 0
    out = capsys.readouterr().out
    for title in ("local ops x operand dtype", "communications x mesh axis", "communications x dtype",
                  "ops x result layout"):
        assert title in out
    mesh_table = out.split("communications x mesh axis")[1].split("communications x dtype")[0]
    rows = {line.split()[0]: line for line in mesh_table.splitlines() if line.strip()}
    # The corpus reaches every collective along every axis of a permuted 2-D and 3-D mesh.
    for comm in ("allgather", "all_to_all", "allreduce", "reduce_scatter"):
        assert rows[comm].split()[1:7] == ["✓p"] * 6, rows[comm]
    assert re.search(r"^\d+ allowed cells not reached:$", out, re.M)


def test_the_default_run_says_what_it_did_not_test(capsys):
    assert main(["conform", "--no-corpus", "--cases", "1", "--backend", "spmd"]) == 0
    out = capsys.readouterr().out
    assert "not tested by this run:" in out
    assert re.search(r"the MPI batch: --no-corpus left it out\): run `\S*mpiexec -n 4 \S*python\S* -m refir`", out), out
    assert "the gpu backend (--backend left it out)" in out
