"""Frontends: programs that reach refir from where their authors write them: the Python builder,
DTensor placements and `redistribute`, and nvFuser's printed fusion IR (`import-nvfuser`)."""
