"""The MPI transport: one rank per process, through mpi4py (placeholder)."""
