"""Known differences between a peer and refir: conventions (both right by their
own rules) and peer bugs, each named and explained in docs/peers.md. A
discrepancy matched by neither is new: the sweep fails."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from conformance.peers.spec import PeerCase, expected
from refir.frontends.dtensor import Partial, Placement, StridedShard

# (name, does it explain these problems of this case); problems are what the peer and refir got
# wrong against the meaning
Known = tuple[str, Callable[[PeerCase, list[str]], bool]]


def _amax_empty_shard(case: PeerCase, problems: list[str]) -> bool:
    return case.op == "max" and any("amax(): Expected reduction dim" in p for p in problems)


def _dtensor_holds(case: PeerCase, placements: tuple[Placement, ...]) -> bool:
    """Whether DTensor's own distribute_tensor at these placements gives every rank
    the meaning's block (refir's rule): DTensor and refir read the placements alike."""
    from conformance.peers import dtensor_peer
    from conformance.peers.sweep import differences

    try:
        got = dtensor_peer.distributed(case, placements)
    except Exception:  # noqa: BLE001 - a placement DTensor cannot distribute is no known difference
        return False
    return not differences(got, expected(replace(case, dst=placements)), "dtensor", "meaning")


def _strided_redistribute(raises: bool) -> Callable[[PeerCase, list[str]], bool]:
    """A resharding to or from _StridedShard where refir gives the meaning and DTensor,
    which holds both placements as refir does (distribute_tensor), raises in its
    redistribute or returns other blocks (docs/peers.md, dtensor-strided-redistribute)."""

    def matches(case: PeerCase, problems: list[str]) -> bool:
        if case.kind != "reshard" or not any(isinstance(p, StridedShard) for p in case.src + case.dst):
            return False
        if not problems or any("refir" in p for p in problems):  # refir wrong: never a peer's known bug
            return False
        if any(p.startswith("dtensor raises") for p in problems) != raises:
            return False
        sides = [case.dst] + ([] if any(isinstance(p, Partial) for p in case.src) else [case.src])
        return all(_dtensor_holds(case, ps) for ps in sides)

    return matches


CONVENTIONS: list[Known] = []
PEER_BUGS: list[Known] = [("dtensor-amax-empty-shard", _amax_empty_shard),
                          ("dtensor-strided-redistribute-raises", _strided_redistribute(True)),
                          ("dtensor-strided-redistribute-wrong-blocks", _strided_redistribute(False))]
