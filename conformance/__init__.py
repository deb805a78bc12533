"""The differential conformance suite: programs run on every backend, compared."""
