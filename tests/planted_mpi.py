"""A backend of the user's, for tests/test_default_mpi.py: refir's spmd backend
with one built-in mutant in place around every call ($PLANTED_MUTANT, by
default the MPI allgather that writes its own block on its first call only), so that `conform
--backend planted_mpi:backend` runs a planted bug wherever the backend runs,
in the MPI batch's ranks too."""

from __future__ import annotations

import os

from conformance import mpi_mutants  # noqa: F401  (registers the mutant)
from conformance.mutants import MUTANTS
from interp.backend import run_spmd
from refir.backends import Shards
from refir.lower import Lowered
from refir.world import World


def backend(lowered: Lowered, inputs: Shards, bindings: dict[str, int], world: World) -> Shards:
    name = os.environ.get("PLANTED_MUTANT", "mpi_allgather_own_block_kept")
    (planted,) = [m for m in MUTANTS if m.name == name]
    with planted.inject():
        return run_spmd(lowered, inputs, bindings, world)
