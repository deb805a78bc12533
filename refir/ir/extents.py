"""Extent expressions: `E/h`, `4*D`, `E*S/4` (docs/spec.md §3, type_c9).

An extent is an integer, a symbol's name, or an `ExtentExpr`: a product of an
integer coefficient and symbols, divided by at most one integer or symbol. Each
expression has one canonical form (symbols sorted, the integer divisor reduced
against the coefficient, a symbol divisor cancelled against the product), so
`==` on extents is equality of spellings that denote the same product, and the
printer writes that form only. An expression that is an integer or one symbol
is that integer or symbol, never an ExtentExpr.

Values: an expression is evaluated under bindings exactly, and a divisor that
does not divide its product is an error (`NotDivisible`), never a rounding.
Proofs: `Monomial` is a rational monomial (a Fraction times symbols with integer
powers), so the verifier compares element counts symbolically: `h * (E/h)` is `E`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from math import gcd, prod

from refir.errors import InputError

TYPE_C9 = "type_c9"  # an expression's divisor divides its product under the bindings


@dataclass(frozen=True)
class ExtentExpr:
    """`coef * syms[0] * syms[1] * ... / den`, in canonical form (see `extent_expr`)."""

    coef: int
    syms: tuple[str, ...]  # sorted, a symbol repeated for each power
    den: int | str = 1

    def __str__(self) -> str:
        factors = [str(self.coef)] * (self.coef != 1 or not self.syms) + list(self.syms)
        return "*".join(factors) + (f"/{self.den}" if self.den != 1 else "")

    def symbols(self) -> tuple[str, ...]:
        """Its symbols, each once, in the order the text writes them."""
        return tuple(dict.fromkeys((*self.syms, *((self.den,) if isinstance(self.den, str) else ()))))


Extent = int | str | ExtentExpr


class NotAnExtent(ValueError):
    """An expression that is no extent whatever the bindings (`6/4`, `E/0`)."""


def extent_expr(coef: int, syms: Iterable[str], den: int | str = 1) -> Extent:
    """The canonical extent of `coef * syms / den`: an integer, a symbol, or an ExtentExpr."""
    names = sorted(syms)
    if isinstance(den, str) and den in names:  # h*D/h is D
        names.remove(den)
        den = 1
    if isinstance(den, int):
        if den <= 0:
            raise NotAnExtent(f"a divisor of {den} divides nothing")
        if not names and coef % den:
            raise NotAnExtent(f"{coef}/{den} is no integer")
        g = gcd(coef, den)  # exact: 6*E/4 divides where 3*E/2 does, and is the same number
        coef, den = coef // g, den // g
    if coef == 0:
        return 0
    if not names and isinstance(den, int):
        return coef
    if den == 1 and coef == 1 and len(names) == 1:
        return names[0]
    return ExtentExpr(coef, tuple(names), den)


def symbols_of(extent: Extent) -> tuple[str, ...]:
    """The symbols an extent uses, each once."""
    if isinstance(extent, ExtentExpr):
        return extent.symbols()
    return (extent,) if isinstance(extent, str) else ()


def shape_symbols(shape: Iterable[Extent]) -> tuple[str, ...]:
    """The distinct symbols of a shape, in order: a reshape's scalar operands."""
    return tuple(dict.fromkeys(s for e in shape for s in symbols_of(e)))


class NotDivisible(InputError):
    """An expression whose divisor does not divide its product under the bindings
    (an InputError: found from the bindings alone, alike on every rank)."""


def evaluate(extent: Extent, bindings: Mapping[str, int]) -> int:
    """The extent's value; a KeyError names a symbol not bound, NotDivisible an
    inexact quotient (with the symbols' values, for the caller's error)."""
    if isinstance(extent, int):
        return extent
    if isinstance(extent, str):
        return bindings[extent]
    top = extent.coef * prod(bindings[s] for s in extent.syms)
    den = extent.den if isinstance(extent.den, int) else bindings[extent.den]
    if den == 0 or top % den:
        bound = ", ".join(f"{s}={bindings[s]}" for s in sorted(extent.symbols()))
        why = f"{extent.den}={den} divides nothing" if den == 0 else f"{den} does not divide {top}"
        raise NotDivisible(f"with {bound}, {extent} is no extent: {why} [{TYPE_C9}]")
    return top // den


@dataclass(frozen=True)
class Monomial:
    """A rational coefficient times symbols with integer (maybe negative) powers:
    the element count of a run of extents, as the verifier compares them."""

    coef: Fraction
    powers: tuple[tuple[str, int], ...]  # sorted by symbol, no zero powers

    @staticmethod
    def of(extents: Iterable[Extent]) -> Monomial:
        coef, powers = Fraction(1), dict[str, int]()
        for e in extents:
            if isinstance(e, int):
                coef *= e
            elif isinstance(e, str):
                powers[e] = powers.get(e, 0) + 1
            else:
                coef *= e.coef
                for s in e.syms:
                    powers[s] = powers.get(s, 0) + 1
                if isinstance(e.den, int):
                    coef /= e.den
                else:
                    powers[e.den] = powers.get(e.den, 0) - 1
        return Monomial._made(coef, powers)

    @staticmethod
    def _made(coef: Fraction, powers: Mapping[str, int]) -> Monomial:
        if coef == 0:
            return Monomial(Fraction(0), ())
        return Monomial(coef, tuple(sorted((s, p) for s, p in powers.items() if p)))

    def __truediv__(self, other: Monomial) -> Monomial:
        powers = dict(self.powers)
        for s, p in other.powers:
            powers[s] = powers.get(s, 0) - p
        return Monomial._made(self.coef / other.coef, powers)

    def is_whole(self) -> bool:
        """An integer times non-negative powers: a product of extents, no quotient."""
        return self.coef.denominator == 1 and all(p > 0 for _, p in self.powers)

    def divides(self, other: Monomial) -> bool:
        """Whether `other / self` is a whole monomial (self non-zero)."""
        return self.coef != 0 and (other / self).is_whole()

    def as_extent(self) -> Extent | None:
        """The extent this monomial is, where one is: an integer, a symbol or an
        ExtentExpr (a whole product over at most one integer or one symbol)."""
        if self.coef < 0:
            return None
        top = [s for s, p in self.powers if p > 0 for _ in range(p)]
        under = [s for s, p in self.powers if p < 0 for _ in range(-p)]
        if self.coef.denominator != 1 and under or len(under) > 1:
            return None
        return extent_expr(self.coef.numerator, top, under[0] if under else self.coef.denominator)

    def __str__(self) -> str:
        top = [s for s, p in self.powers if p > 0 for _ in range(p)]
        under = [s for s, p in self.powers if p < 0 for _ in range(-p)]
        n, d = self.coef.numerator, self.coef.denominator
        text = "*".join([str(n)] * (n != 1 or not top) + top)
        below = [str(d)] * (d != 1) + under
        return text + (f"/{'*'.join(below)}" if len(below) == 1 else f"/({'*'.join(below)})" if below else "")


__all__ = ["TYPE_C9", "Extent", "ExtentExpr", "Monomial", "NotAnExtent", "NotDivisible", "evaluate",
           "extent_expr", "shape_symbols", "symbols_of"]
