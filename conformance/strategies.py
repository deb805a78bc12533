"""Hypothesis strategies over the program generator (conformance/generate.py).

    from hypothesis import given
    from conformance.check import check_backend, reference_of
    from conformance.strategies import cases

    @given(cases())
    def test_my_backend(case):
        assert check_backend(case, "mypkg.backend:run", reference_of(case)) == []

Hypothesis makes every decision of the generator, so a failure shrinks to a
small program; print it with `refir.print_program(case.program)`.
"""

from __future__ import annotations

import hypothesis.strategies as st

from conformance.cases import Case
from conformance.generate import Generated, generate


class HypothesisDraw:
    def __init__(self, draw: st.DrawFn) -> None:
        self._draw = draw

    def below(self, n: int) -> int:
        return self._draw(st.integers(0, n - 1))


@st.composite
def programs(draw: st.DrawFn) -> Generated:
    """A valid program, its bindings, and how its inputs are drawn and laid out."""
    return generate(HypothesisDraw(draw))


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """One generated program at one of its bindings, ready for check_backend."""
    g = draw(programs())
    bindings = draw(st.sampled_from(g.bindings))
    return Case("generated", "hypothesis", g.program, bindings, g.data)
