"""Lowering: the per-device program of local ops and explicit communications, cut into
segments (lower), and the one helper that forms every communication's device teams (teams)."""
