"""`refir.run` and what it goes through: the program prepared and cached, inputs drawn or read,
bound and checked, cut into each device's block, handed to a backend, and the results
assembled (in one process) or gathered (under MPI)."""
