"""The world of ranks: all in this process or one per MPI process (ranks), what every rank of an
MPI job shares (mpi_job), inputs out to the ranks and results back (exchange, result_headers)."""
