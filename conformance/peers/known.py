"""Known discrepancies, each with its entry in docs/peers.md: conventions (both
sides right by their own rules) and peer bugs (the peer wrong, reproducer and
versions there). A discrepancy matched by neither is new: the sweep fails.

PLACEMENTS names where an op's result lands when DTensor's placement differs
from refir's on a mesh dim: both right by their own rules (the values are
compared at the drawn target and at DTensor's own placements), recorded per case."""

from __future__ import annotations

from collections.abc import Callable

from conformance.peers.spec import PeerCase
from refir.frontends.dtensor import Partial, Placement, Replicate, Shard, StridedShard

# (name, does it explain these problems of this case)
Known = tuple[str, Callable[[PeerCase, list[str]], bool]]


def _amax_empty_shard(case: PeerCase, problems: list[str]) -> bool:
    return case.op == "max" and any("amax(): Expected reduction dim" in p for p in problems)


def _expand_sharded_unit_dim(case: PeerCase, problems: list[str]) -> bool:
    axis = case.params[0] if case.op == "expand" else -1
    return Shard(axis) in case.src and any("failed for aten.expand.default" in p for p in problems)


def _matmul_fold_refused(case: PeerCase, problems: list[str]) -> bool:
    """A 3-D by a 2-D matmul: DTensor folds x's batch into its rows by a view that refuses
    to drop a sharded size-1 dim or to flatten an unevenly sharded one."""
    return (case.op == "bmatmul" and case.params[0] == 0
            and any("failed for aten.view.default" in p for p in problems))


CONVENTIONS: list[Known] = []
PEER_BUGS: list[Known] = [("dtensor-amax-empty-shard", _amax_empty_shard),
                          ("dtensor-expand-sharded-unit-dim", _expand_sharded_unit_dim),
                          ("dtensor-matmul-fold-refused", _matmul_fold_refused)]


def _kind(p: Placement) -> str:
    if isinstance(p, StridedShard):
        return "I"
    return "S" if isinstance(p, Shard) else "P" if isinstance(p, Partial) else "R" if isinstance(p, Replicate) else "?"


# (DTensor's placement on a mesh dim, refir's) -> the convention's name (docs/peers.md, "Placements")
PLACEMENTS = {("R", "S"): "dtensor-replicates", ("S", "R"): "refir-replicates",
              ("P", "R"): "dtensor-leaves-partial", ("P", "S"): "dtensor-leaves-partial",
              ("S", "S"): "shards-another-dim", ("I", "R"): "dtensor-interleaves", ("I", "S"): "dtensor-interleaves"}


def placement_differences(peer: tuple[Placement, ...], ours: tuple[Placement, ...]) -> list[str]:
    """The conventions that explain where the two results differ, mesh dim by mesh dim;
    `new:<dtensor>/<refir>` for a pair no convention names."""
    names = [PLACEMENTS.get((_kind(p), _kind(q)), f"new:{p}/{q}") for p, q in zip(peer, ours) if p != q]
    return sorted(set(names))
