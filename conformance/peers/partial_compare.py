"""A resharding with a Partial target, or an avg source, compared (docs/peers.md,
"Partial targets").

A Partial's local values are its terms, and the two sides make terms by their own
conventions: from Replicate, DTensor puts x / n (sum) or x (max, min) on each
rank, refir the value on the team's first device and the identity elsewhere. So
each side's result is folded over each target Partial team (in float64, rounded
once to the dtype: the reduction's exact value) and compared with the meaning at
the target with those mesh dims replicated. Its local blocks are compared rank
by rank too where both sides hold the same terms: the source is partial and each
target Partial is the source's on that mesh dim (a no-op on both sides). Then
DTensor is handed refir's own terms of the source (refir.running.partial_inputs:
the terms refir's spmd gives the input, kept by the run), not the drawn
contributions, which refir's avg cannot take (its partial input is the value).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from conformance.peers.block_compare import differences
from conformance.peers.spec import Block, Blocks, PeerCase, expected, group_inputs, meaning
from refir.frontends.dtensor import Partial, Placement, Replicate, redistribute_program, to_refir

FOLDS = {"sum": np.sum, "max": np.max, "min": np.min, "avg": np.mean}


def partial_target(case: PeerCase) -> bool:
    return case.kind == "reshard" and any(isinstance(p, Partial) for p in case.dst)


def uses_terms(case: PeerCase) -> bool:
    """The source is partial and both sides start from refir's terms of its value
    (a Partial target, or an avg source); else from the drawn contributions."""
    partial = [p for p in case.src if isinstance(p, Partial)]
    return case.kind == "reshard" and bool(partial) and (partial_target(case) or partial[0].op == "avg")


def same_terms(case: PeerCase) -> bool:
    """Whether the result's local blocks are comparable rank by rank: every target
    Partial is the source's own on that mesh dim."""
    return uses_terms(case) and all(s == d for s, d in zip(case.src, case.dst) if isinstance(d, Partial))


def replicated(ps: tuple[Placement, ...]) -> tuple[Placement, ...]:
    return tuple(Replicate() if isinstance(p, Partial) else p for p in ps)


def value(case: PeerCase, g: int) -> np.ndarray:
    """Group g's global value of the source (the drawn contributions folded)."""
    return meaning(case, group_inputs(case, g))


def terms(case: PeerCase, g: int) -> dict[int, np.ndarray]:
    """refir's terms of group g's source, rank by rank: what its spmd run holds of the input."""
    import refir

    mesh = case.mesh(case.groups()[g])
    run = refir.run(redistribute_program(mesh, case.shape, case.src, case.src, case.dtype),
                    {"x": value(case, g)}, backend="spmd", keep="all")
    return {r: run.kept["x"][r] for r in case.groups()[g]}


def reduced(case: PeerCase, blocks: Blocks) -> Blocks:
    """Each rank's block folded over its team of each target Partial mesh dim."""
    out: Blocks = {}
    for group in case.groups():
        mesh = case.mesh(group)
        t = to_refir(case.shape, mesh, case.dst, case.dtype)
        fold = FOLDS[t.partial_kind]
        for r in group:
            team = [blocks[q].values for q in mesh.team(r, t.partial) if q in blocks]
            if len({v.shape for v in team}) != 1 or r not in blocks:
                continue  # a rank without a block, or a team of blocks of other shapes: differences names it
            folded = fold(np.stack([v.astype(np.float64) for v in team]), axis=0).astype(blocks[r].values.dtype)
            out[r] = Block(blocks[r].offset, folded)
    return out


def compare(case: PeerCase, got: Blocks | None, ours: Blocks | None, peer_err: str, ref_err: str,
            name: str) -> tuple[list[str], list[str], list[str]]:
    """(where the peer differs from the meaning, where refir does, where they differ)."""
    want = expected(replace(case, dst=replicated(case.dst)))
    peer_wrong = [peer_err] if got is None else [f"folded: {p}" for p in differences(reduced(case, got), want,
                                                                                     name, "meaning")]
    refir_wrong = [ref_err] if ours is None else [f"folded: {p}" for p in differences(reduced(case, ours), want,
                                                                                      "refir", "meaning")]
    if got is None or ours is None:
        return peer_wrong, refir_wrong, []
    if same_terms(case):
        between = [f"terms: {p}" for p in differences(got, ours, name, "refir")]
    else:
        between = [f"folded: {p}" for p in differences(reduced(case, got), reduced(case, ours), name, "refir")]
    return peer_wrong, refir_wrong, between
