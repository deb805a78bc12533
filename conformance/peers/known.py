"""Known discrepancies, each with its entry in docs/peers.md: conventions (both
sides right by their own rules) and peer bugs (the peer wrong, reproducer and
versions there). A discrepancy matched by neither is new: the sweep fails."""

from __future__ import annotations

from collections.abc import Callable

from conformance.peers.spec import PeerCase

# (name, does it explain these problems of this case)
Known = tuple[str, Callable[[PeerCase, list[str]], bool]]


def _amax_empty_shard(case: PeerCase, problems: list[str]) -> bool:
    return case.op == "max" and any("amax(): Expected reduction dim" in p for p in problems)


CONVENTIONS: list[Known] = []
PEER_BUGS: list[Known] = [("dtensor-amax-empty-shard", _amax_empty_shard)]
