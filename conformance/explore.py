"""Generated cases: programs drawn from a seed, and the shrinking of a failure."""

from __future__ import annotations

from conformance.cases import Case
from conformance.check import Outcome, check_case
from conformance.generate import Generated, generate
from conformance.shrink import Choices, RandomDraw, ReplayDraw, shrink


def drawn(seed: int, index: int) -> list[Case]:
    """The cases (one per binding) of generated program `index` of `seed`: the
    same on every rank and in every run."""
    draw = RandomDraw(seed, index)
    return cases_of(generate(draw), f"gen{seed}-{index}", tuple(draw.record))


def replayed(choices: Choices, label: str) -> list[Case]:
    draw = ReplayDraw(choices)
    return cases_of(generate(draw), label, tuple(draw.record))


def cases_of(g: Generated, label: str, choices: Choices) -> list[Case]:
    return [Case("generated", label, g.program, b, g.data, choices=choices) for b in g.bindings]


def minimize(outcome: Outcome, tries: int = 150) -> Outcome:
    """The simplest generated case found on which the backend still fails the
    same check (the first one it failed)."""
    check, backend, label = outcome.checks[0], outcome.backend, outcome.case.label
    found: dict[Choices, Outcome] = {outcome.case.choices: outcome}

    def fails(choices: Choices) -> Choices | None:
        for case in replayed(choices, label):
            (o,) = check_case(case, [backend])
            if check in o.checks:
                found[case.choices] = o
                return case.choices
        return None

    return found[shrink(outcome.case.choices, fails, spans, tries)]


def spans(choices: Choices) -> tuple[tuple[int, int], ...]:
    return generate(ReplayDraw(choices)).spans
