"""The peer sweep: draw cases, run each on the peer and on refir's spmd, compare
rank by rank, and for each discrepancy shrink, triage and write a reproducer.

Triage compares both sides with the meaning (numpy's value, cut by DTensor's
and refir's block rule): a side that differs from it is wrong; a difference
listed in CONVENTIONS (docs/peers.md) is a convention, not a bug.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from conformance.check import describe, quiet
from conformance.generate import Chooser
from conformance.peers.block_compare import differences
from conformance.peers.partial_compare import compare, partial_target
from conformance.peers.spec import Blocks, PeerCase, block_of, draw_case, expected, meaning
from conformance.shrink import Choices, RandomDraw, ReplayDraw, shrink
from refir.errors import RefirError
from refir.frontends.dtensor import Partial, StridedShard, to_refir


@dataclass
class Outcome:
    case: PeerCase
    status: str  # agree or differ
    problems: list[str] = field(default_factory=list)
    triage: str = ""  # refir, peer, both, convention:<name> or peer-bug:<name> (known: conformance/peers/known.py)
    shrunk: PeerCase | None = None
    reproducer: str = ""  # the script written for it
    alone: str = ""  # whether the script fails on its own: fails, passes, or why not run
    placement: str = ""  # an op's result placed otherwise by the peer than by refir (known.PLACEMENTS)


@dataclass
class Timing:
    peer: float = 0.0
    refir: float = 0.0


def check(peer: object, case: PeerCase, timing: Timing | None = None) -> Outcome:
    from conformance.peers import refir_side

    timing = timing or Timing()
    want = expected(case)
    peer_err = ref_err = ""
    t0 = time.perf_counter()
    try:
        got = peer.run(case)
    except Exception as exc:  # the peer's own error is a finding, not a crash of the sweep
        got = None
        peer_err = f"{peer.NAME} raises {describe(exc)}"
    t1 = time.perf_counter()
    try:
        ours: Blocks | None = refir_side.run(case)
    except Exception as exc:  # a refir error on a valid case is a refir bug, reported as such
        ours, ref_err = None, f"refir raises {describe(exc)}"
    t2 = time.perf_counter()
    timing.peer += t1 - t0
    timing.refir += t2 - t1
    if partial_target(case):  # terms by each side's convention: folded (partial_compare)
        peer_wrong, refir_wrong, problems = compare(case, got and got.blocks, ours, peer_err, ref_err, peer.NAME)
        problems += peer_wrong + refir_wrong
        if not problems:
            return Outcome(case, "agree")
        return Outcome(case, "differ", list(dict.fromkeys(problems)), triage(case, peer_wrong, refir_wrong))
    k = case.ulps
    peer_wrong = [peer_err] if got is None else differences(got.blocks, want, peer.NAME, "meaning", k)
    if got is not None and got.own_blocks is not None:
        peer_wrong += own_problems(case, got, peer.NAME)
    refir_wrong = [ref_err] if ours is None else differences(ours, want, "refir", "meaning", k)
    problems = ([] if got is None or ours is None else differences(got.blocks, ours, peer.NAME, "refir", k))
    problems += peer_wrong + refir_wrong
    where = placed(case, got)
    if not problems:
        return Outcome(case, "agree", placement=where)
    return Outcome(case, "differ", list(dict.fromkeys(problems)), triage(case, peer_wrong, refir_wrong),
                   placement=where)


def placed(case: PeerCase, got: object) -> str:
    """'dtensor [R], refir [S0]: dtensor-replicates' where the op's result lands apart, else ''."""
    from conformance.peers import refir_side
    from conformance.peers.known import placement_differences
    from conformance.peers.spec import _pl

    ours = refir_side.own_placements(case) if got is not None and got.own is not None else None
    if ours is None or ours == got.own:
        return ""
    return f"dtensor {_pl(got.own)}, refir {_pl(ours)}: {', '.join(placement_differences(got.own, ours))}"


def own_problems(case: PeerCase, got: object, name: str) -> list[str]:
    """The op's result at the placements the peer chose: its blocks by refir's rule."""
    try:
        groups = case.groups()
        want: Blocks = {}
        for g, group in enumerate(groups):
            from conformance.peers.spec import group_inputs

            t = to_refir(case.shape, case.mesh(group), got.own, case.out_dtype)
            value = meaning(case, group_inputs(case, g))
            want.update({r: block_of(t, value, r) for r in group})
    except RefirError:
        return []  # placements refir cannot write (a dim sharded twice): only the target is compared
    if any(isinstance(p, StridedShard) for p in got.own):  # DTensor's offset of a strided block is no one place
        want = {r: replace(b, offset=got.own_blocks[r].offset) if r in got.own_blocks else b for r, b in want.items()}
    return [f"at its own placements {list(map(str, got.own))}: {p}"
            for p in differences(got.own_blocks, want, name, "meaning", case.ulps)]


def triage(case: PeerCase, peer_wrong: list[str], refir_wrong: list[str]) -> str:
    from conformance.peers.known import CONVENTIONS, PEER_BUGS

    for label, table in (("convention", CONVENTIONS), ("peer-bug", PEER_BUGS)):
        for name, matches in table:
            if matches(case, peer_wrong + refir_wrong):
                return f"{label}:{name}"
    return "both" if peer_wrong and refir_wrong else "refir" if refir_wrong else "peer"


def drawn(peer: object, seed: int, index: int) -> PeerCase:
    d = RandomDraw(seed, index)
    case = draw_case(Chooser(d), peer)
    return replace(case, choices=tuple(d.record))


def replayed(peer: object, choices: Choices) -> PeerCase:
    d = ReplayDraw(choices)
    case = draw_case(Chooser(d), peer)
    return replace(case, choices=tuple(d.record))


def minimize(peer: object, outcome: Outcome, tries: int = 60) -> PeerCase:
    """The simplest case found that the same side still gets wrong in the same way."""
    kind = outcome.triage
    first = _what(outcome.problems[0])

    def fails(choices: Choices) -> Choices | None:
        case = replayed(peer, choices)
        o = check(peer, case)
        return case.choices if o.status == "differ" and o.triage == kind and _what(o.problems[0]) == first else None

    return replayed(peer, shrink(outcome.case.choices, fails, lambda c: (), tries))


def _what(problem: str) -> str:
    """A problem's kind: offset, block shape, values, raises..."""
    words = problem.split(": ", 1)[-1].split()
    return " ".join(words[:2]) if words else ""


def write_reproducer(peer: object, case: PeerCase, directory: Path, stem: str) -> tuple[str, str]:
    """The standalone script, and whether it fails on its own (it must)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stem}.py"
    path.write_text(peer.script(case))
    try:
        done = subprocess.run([sys.executable, str(path)], capture_output=True, timeout=120, text=True)
    except subprocess.TimeoutExpired:
        return str(path), "timed out"
    return str(path), "fails" if done.returncode else "passes (the discrepancy did not reproduce)"


def sweep(peer: object, cases: int, seed: int, save: Path, progress: object | None = None,
          shrink_tries: int = 60) -> tuple[list[Outcome], Timing]:
    timing = Timing()
    outcomes = []
    seen: set[str] = set()  # known entries met: each is shrunk and written once
    with quiet():
        for index in range(cases):
            case = drawn(peer, seed, index)
            if progress is not None:
                progress.step(case.label())
            o = check(peer, case, timing)
            known = o.triage.startswith(("convention:", "peer-bug:"))
            if o.status == "differ" and known and o.triage in seen:
                o.alone = f"known ({o.triage}): shrunk and written at its first case"
            elif o.status == "differ":
                seen.add(o.triage)
                o.shrunk = minimize(peer, o, shrink_tries)
                o.reproducer, o.alone = write_reproducer(peer, o.shrunk, save, f"{peer.NAME}_{seed}_{index}")
            outcomes.append(o)
    return outcomes, timing


def is_partial(case: PeerCase) -> bool:
    return any(isinstance(p, Partial) for p in case.src)
