"""Draws from a seed, replayed draws, and a shrinker over them.

A generated case is its list of draws. Shrinking edits that list (drops runs
of draws, lowers single draws toward 0) and keeps an edit when the case it
replays to still fails the same way, as hypothesis does with its choice
sequences. It needs no hypothesis engine, so every MPI rank shrinks in step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Choices = tuple[int, ...]


class RandomDraw:
    """Draws from a seeded generator, recording them."""

    def __init__(self, *seed: int) -> None:
        self.rng = np.random.default_rng(list(seed))
        self.record: list[int] = []

    def below(self, n: int) -> int:
        v = int(self.rng.integers(n))
        self.record.append(v)
        return v


class ReplayDraw:
    """Replays recorded draws; past the end, or out of range, it takes the
    nearest valid value, so any edited list still makes a valid case."""

    def __init__(self, choices: Choices) -> None:
        self.choices = choices
        self.record: list[int] = []

    def below(self, n: int) -> int:
        i = len(self.record)
        v = min(max(self.choices[i], 0), n - 1) if i < len(self.choices) else 0
        self.record.append(v)
        return v


def _simpler(a: Choices, b: Choices) -> bool:
    return (len(a), a) < (len(b), b)


Spans = tuple[tuple[int, int], ...]


def shrink(choices: Choices, fails: Callable[[Choices], Choices | None], spans: Callable[[Choices], Spans],
           tries: int = 200) -> Choices:
    """The simplest draws found that still fail. `fails(c)` replays `c` and
    returns the draws actually used when the case fails as before, else None;
    `spans(c)` says which runs of draws make one item of a list (an equation,
    a mesh), the first thing to try deleting."""
    best, budget = choices, tries

    def attempt(candidate: Choices) -> bool:
        nonlocal best, budget
        if budget <= 0 or not _simpler(candidate, best):
            return False
        budget -= 1
        used = fails(candidate)
        if used is not None and _simpler(used, best):
            best = used
            return True
        return False

    improved = True
    while improved and budget > 0:
        improved = False
        for start, end in sorted(spans(best), key=lambda se: se[0] - se[1]):  # the longest first
            if end <= len(best) and attempt(best[:start] + best[end:]):
                improved = True
                break
        for size in (8, 4, 2, 1):
            i = 0
            while i < len(best):
                if not attempt(best[:i] + best[i + size:]):
                    i += 1
                else:
                    improved = True
        i = 0
        while i < len(best):  # an accepted edit may shorten `best`
            for v in sorted({0, best[i] // 2, best[i] - 1}):
                if 0 <= v < best[i] and attempt(best[:i] + (v,) + best[i + 1:]):
                    improved = True
                    break
            i += 1
    return best
