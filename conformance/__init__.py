"""The differential conformance suite (docs/conformance.md).

    cases       corpus files, bindings, input data -> Case
    data        input data kinds (edge values among them), as strided views
    classes     error classes: common wrong implementations, and the data that exposes each
    generate    random valid programs from a stream of draws (strategies: hypothesis)
    shrink      draws from a seed, replayed draws, and a shrinker over them
    explore     generated cases and their shrinking; failures writes them down
    check       one case on one backend: whole and segment by segment -> Problems
    bounds      the numerics model: the error bound of every value
    compare     the comparator: the checks (CHECKS) and a backend's buffers against the reference
    coverage    `conform --coverage`: what the default run reaches, and what not
    mutants/    deliberate backend bugs, a module per family; teeth runs them into the mutant table
    mpi_batch   the small batches under mpiexec (the default run's, the MPI mutants')
    cli         `python -m refir conform`; report prints and writes the results
    examples/   example backends for --backend module:callable (a wrong one)
    peers/      the cases run through another sharding system (DTensor, JAX)
    corpus/     the bundled .rir programs
"""
