"""The differential conformance suite (docs/conformance.md).

    cases     corpus files, bindings, input data -> Case
    generate  random valid programs from a stream of draws (strategies: hypothesis)
    check     one case on one backend: whole and segment by segment -> Problems
    bounds    the numerics model: the error bound of every value
    compare   the checks: values, strides, fresh, replicas
    mutants   deliberate spmd bugs; teeth runs them into the mutant table
    explore   generated cases and their shrinking; failures writes them down
    cli       `python -m refir conform`; report prints and writes the results
"""
