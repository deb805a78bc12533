"""Deliberate backend bugs, injected at run time: the mutant table's mutants.

    registry       the Mutant type, MUTANTS, the `mutant` decorator
    patching       what several families patch with (MPI rules, teams, row-major reads)
    communication  teams, mesh axes, a sender's buffer and a result's layout
    local          a device's own steps: symbols, impls, slices, permutes, copies
    uneven         uneven sharding (spec §3.1): padding, offsets, empty blocks
    nested         an axis over several mesh axes (spec §3.2): a nest cut in the other order
    data           wrong implementations only the corpus's edge data shows
    hidden         bugs a plain run on small 1-D meshes misses (2-D teams, casts, the GPU tree, MPI)
    kernels        the gpu kernel paths only some layouts take (word copies, split reductions, batches)
    mpi_sentinel   an MPI allgather bug only the receive-buffer sentinel shows
    numeric        the arithmetic the global reference itself shares (the expect lines judge it)
    partial        a partial value consumed as if it were reduced (spec §3.3)
    interleaved    interleaved blocks (spec §3.4): a split factor off by one

Each family imports the registry only and registers its mutants on import;
importing this package imports every family, in the order of the table.
"""

from conformance.mutants.registry import MUTANTS, Mutant, mutant

# Each family appends its mutants to MUTANTS as it is imported: this order is the table's.
# isort: off
from conformance.mutants import communication, local, uneven  # noqa: E402, F401
from conformance.mutants import data, hidden, join, kernels, masks, mpi_sentinel, numeric, reshape, window  # noqa: E402, F401
from conformance.mutants import interleaved, nested, partial  # noqa: E402, F401
# isort: on

__all__ = ["MUTANTS", "Mutant", "mutant"]
