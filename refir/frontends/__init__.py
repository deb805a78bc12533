"""Frontends: programs that reach refir from where their authors have them
(nvFuser's printed fusion IR; DTensor placements live in refir/dtensor.py)."""
