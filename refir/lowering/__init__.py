"""Lowering: the per-device program of local ops and explicit communications, cut into
segments (lower), reshardings to and from interleaved types (interleaved), the moves of an
all_to_all or reduce_scatter whose blocks are runs (run_exchange), the window ops (window), and
the one helper that forms every communication's device teams (teams)."""
