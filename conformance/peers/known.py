"""Known discrepancies, each with its entry in docs/peers.md: conventions (both
sides right by their own rules) and peer bugs (the peer wrong, reproducer and
versions there). A discrepancy matched by neither is new: the sweep fails.

PLACEMENTS names where an op's result lands when DTensor's placement differs
from refir's on a mesh dim: both right by their own rules (the values are
compared at the drawn target and at DTensor's own placements), recorded per case."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from math import prod

import numpy as np

from conformance.peers.spec import PeerCase, expected
from refir.frontends.dtensor import Partial, Placement, Replicate, Shard, StridedShard

# (name, does it explain these problems of this case); problems are what the peer and refir got
# wrong against the meaning
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


_UNEVEN = re.compile(r"Cannot unflatten unevenly sharded tensor: output dimension \d+ \(size (\d+)\) is not evenly "
                     r"divisible by mesh dimension (\d+) \(size (\d+)\)")
_REMOVES = re.compile(r"would remove or reshape sharded dimension (\d+),")


def _refir_right_reshape(case: PeerCase, problems: list[str]) -> tuple[str, tuple[int, ...]] | None:
    """A reshape DTensor raises on (its one problem) and refir computed: the message, x's shape."""
    if case.op != "reshape" or len(problems) != 1 or not problems[0].startswith("dtensor raises"):
        return None
    return problems[0], case.operands()[0][1]


def _reshape_uneven_refused(case: PeerCase, problems: list[str]) -> bool:
    """A reshape that splits an axis sharded unevenly: DTensor's view rule refuses to unflatten
    it where the split's outer size is not a multiple of the mesh dim (docs/peers.md)."""
    found = _refir_right_reshape(case, problems)
    m = found and _UNEVEN.search(found[0])
    if not m:
        return False
    size, mesh_dim, ranks = (int(g) for g in m.groups())
    return size % ranks != 0 and isinstance(case.src[mesh_dim], Shard)


def _reshape_sharded_unit_dim(case: PeerCase, problems: list[str]) -> bool:
    """A reshape of x sharded on a dim of extent 0 or 1 (which the view drops or folds):
    DTensor's view rule refuses it, "would remove or reshape sharded dimension" (docs/peers.md)."""
    found = _refir_right_reshape(case, problems)
    m = found and _REMOVES.search(found[0])
    if not m:
        return False
    dim = int(m.group(1))
    return found[1][dim] <= 1 and Shard(dim) in case.src


def _dtensor_holds(case: PeerCase, placements: tuple[Placement, ...]) -> bool:
    """Whether DTensor's own distribute_tensor at these placements gives every rank
    the meaning's block (refir's rule): DTensor and refir read the placements alike."""
    from conformance.peers import dtensor_peer
    from conformance.peers.block_compare import differences

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


def _partition_int_sum(case: PeerCase, problems: list[str]) -> bool:
    """Replicate -> Partial(sum) of an integer tensor: DTensor's terms x / n
    are cast back to the dtype, truncated, so DTensor's fold is k trunc(x / k) (k: the ranks of
    the new sum Partials), exactly; refir right (docs/peers.md, dtensor-partition-int-sum)."""
    from conformance.peers import dtensor_peer
    from conformance.peers.block_compare import differences
    from conformance.peers.partial_compare import partial_target, reduced, replicated

    if not (partial_target(case) and case.dtype in ("i32", "i64") and problems):
        return False
    if any(isinstance(d, Partial) and s != Replicate() for s, d in zip(case.src, case.dst)) or \
            Partial("sum") not in case.dst:
        return False  # every target Partial made from Replicate (a source's Partial elsewhere is reduced first)
    if not all(p.startswith("folded: ") and "dtensor" in p.split(": ", 3)[2] for p in problems):
        return False  # refir wrong, or DTensor raising
    k = prod(n for n, p in zip(case.view_shape, case.dst) if isinstance(p, Partial))
    want = {r: replace(b, values=(np.trunc(b.values / k) * k).astype(b.values.dtype))
            for r, b in expected(replace(case, dst=replicated(case.dst))).items()}
    return not differences(reduced(case, dtensor_peer.run(case).blocks), want, "dtensor", "k trunc(x / k)")


CONVENTIONS: list[Known] = []
PEER_BUGS: list[Known] = [("dtensor-amax-empty-shard", _amax_empty_shard),
                          ("dtensor-expand-sharded-unit-dim", _expand_sharded_unit_dim),
                          ("dtensor-matmul-fold-refused", _matmul_fold_refused),
                          ("dtensor-strided-redistribute-raises", _strided_redistribute(True)),
                          ("dtensor-strided-redistribute-wrong-blocks", _strided_redistribute(False)),
                          ("dtensor-partition-int-sum", _partition_int_sum),
                          ("dtensor-reshape-uneven-refused", _reshape_uneven_refused),
                          ("dtensor-reshape-sharded-unit-dim", _reshape_sharded_unit_dim)]




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
