"""A backend of the user's, for tests/test_default_mpi.py: refir's spmd backend
with one built-in mutant in place around every call ($PLANTED_MUTANT, by
default the MPI allgather that writes its own block on its first call only), so that `conform
--backend planted_mpi:backend` runs a planted bug wherever the backend runs,
in the MPI batch's ranks too."""

from __future__ import annotations

import os
import time

from conformance.mutants import MUTANTS
from interp.backend import run_spmd
from refir.lowering.lower import Lowered
from refir.world.backend_types import Shards
from refir.world.ranks import World, launched_by_mpi


def backend(lowered: Lowered, inputs: Shards, bindings: dict[str, int], world: World) -> Shards:
    name = os.environ.get("PLANTED_MUTANT", "mpi_allgather_own_block_kept")
    (planted,) = [m for m in MUTANTS if m.name == name]
    with planted.inject():
        return run_spmd(lowered, inputs, bindings, world)


def stalls(lowered: Lowered, inputs: Shards, bindings: dict[str, int], world: World) -> Shards:
    """spmd, but under MPI every rank sleeps past the batch's limit first (a hung job)."""
    if launched_by_mpi():
        time.sleep(float(os.environ.get("PLANTED_STALL_S", "120")))
    return run_spmd(lowered, inputs, bindings, world)


def dies(lowered: Lowered, inputs: Shards, bindings: dict[str, int], world: World) -> Shards:
    """spmd, but under MPI rank 0's process ends at once (a crashed job)."""
    if launched_by_mpi() and world.rank == 0:
        os._exit(3)
    return run_spmd(lowered, inputs, bindings, world)
