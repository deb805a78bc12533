"""What refir checks of a program: the verifier (type inference and the spec's labelled
constraints), resource limits and the run's memory footprint, and `# expect:` lines
(their restricted evaluator and the numerics bound they are checked within)."""
