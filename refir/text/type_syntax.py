"""The text format's types: `f32[N@DIDx, E/4, 12@DIDx:3] on m layout[1, 0] partial[sum@DIDy]`,
their axes, extents (expressions included), nests and split factors; the Parser's
part that reads them (refir.text.parser holds the tokens and the rest)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from refir.checks.limits import MAX_DIGITS, check_static
from refir.errors import ParseError, VerifyError
from refir.ir.extents import Extent, ExtentExpr, NotAnExtent, extent_expr
from refir.ir.types import BROADCAST, DIDS, DTYPES, PARTIAL_KINDS, Axis, Mesh, TensorType

if TYPE_CHECKING:  # a type only: the parser imports this module
    from refir.text.parser import Token

_MAX_DIGITS = MAX_DIGITS


class TypeSyntax:
    """Parser methods for types; the Parser gives tok, next, at, accept, expect,
    name, integer, describe, listing, meshes and tokens."""

    def type(self) -> TensorType:
        dt = self.name("a dtype")
        if dt.text not in DTYPES:
            raise ParseError(dt.loc, f"unknown dtype {dt.text!r} (known: {', '.join(DTYPES)})")
        axes = self.listing(self.axis)
        if self.accept("on"):
            mname = self.name("a mesh name")
            if mname.text not in self.meshes:  # type_c1
                raise VerifyError(mname.loc, "type_c1", f"no mesh named {mname.text!r} is declared")
            mesh = self.meshes[mname.text]
        elif len(self.meshes) == 1:
            mesh = next(iter(self.meshes.values()))
        else:  # type_c1
            why = "no mesh is declared" if not self.meshes else "the program declares several meshes"
            raise VerifyError(dt.loc, "type_c1", f"this type needs 'on MESH': {why}")
        layout, partial, kind = None, (), ""
        while self.at("layout") or self.at("partial"):
            word = self.next()
            if word.text == "layout" and layout is None:
                layout = tuple(self.listing(self.integer))
            elif word.text == "partial" and not kind:
                partial, kind = self.partial(mesh)
            else:
                raise ParseError(word.loc, f"a type says {word.text!r} once")
        check_static([a.extent for a in axes], str(dt.loc))
        return TensorType(dt.text, tuple(axes), mesh, layout, partial, kind)

    def partial(self, mesh: Mesh) -> tuple[tuple[str, ...], str]:
        """`[KIND@DIDx,DIDy]`: the mesh axes, in mesh order (DIDz, DIDy, DIDx), whose
        devices hold terms of a pending KIND reduction (docs/spec.md §3.3, partial_c1)."""
        self.expect("[")
        kind = self.name("a partial kind (sum, prod, max, min, avg)")
        if kind.text not in PARTIAL_KINDS:  # partial_c1
            raise VerifyError(kind.loc, "partial_c1", f"unknown partial kind {kind.text!r} "
                              f"(known: {', '.join(PARTIAL_KINDS)})")
        self.expect("@")
        dids: list[str] = []
        while True:
            did = self.name("DIDx, DIDy or DIDz")
            if did.text not in DIDS:
                raise ParseError(did.loc, f"expected DIDx, DIDy or DIDz, found {did.text!r}")
            if did.text in dids:  # partial_c1
                raise VerifyError(did.loc, "partial_c1", f"{did.text} is named twice in partial[...]")
            dids.append(did.text)
            if not self.accept(","):
                break
        self.expect("]")
        known = [d for d in dids if mesh.has(d)]
        return tuple(sorted(known, key=mesh.axis_of)) + tuple(d for d in dids if d not in known), kind.text

    def axis(self) -> Axis:
        t = self.tok
        if t.kind == "name" and t.text == "b":
            self.pos += 1
            return BROADCAST
        extent, _ = self.extent()
        shard: str | tuple[str, ...] | None = None
        split: tuple[int, ...] = ()
        if self.accept("@"):
            if self.at("("):
                shard, split = self.nest()
            else:
                shard, factor = self.did(), self.split_factor()
                split = (factor,)
        return Axis(extent, shard, split=split)

    def split_factor(self) -> int:
        """`:3` after a mesh axis: its split factor (§3.4), an integer >= 2; none: 1."""
        if not self.accept(":"):
            return 1
        at = self.tok.loc
        factor = self.integer()
        if factor < 2:  # type_c8
            raise VerifyError(at, "type_c8", f"split factor {factor}: an interleaved mesh axis has a split factor "
                              "of 2 or more (a factor of 1 is the contiguous block: write the mesh axis alone)")
        return factor

    def extent(self) -> tuple[Extent, list[Token]]:
        """`INT`, `NAME`, or an expression (§3, type_c9): factors joined by `*`, then
        at most one `/` and a divisor (`E/h`, `4*D`, `S*E/4`), written in any order
        and kept canonical. Also the symbols' tokens, where the text writes them."""
        start, first = self.tok, self.pos
        factors = [self.factor()]
        while self.accept("*"):
            factors.append(self.factor())
        den: int | str = 1
        if self.accept("/"):
            den = self.factor()
            if self.at("*") or self.at("/"):
                raise ParseError(self.tok.loc, "an extent has one divisor, written last: E*S/h")
        names = [t for t in self.tokens[first:self.pos] if t.kind == "name"]
        if len(factors) == 1 and den == 1:
            return factors[0], names
        if any(isinstance(f, int) and f < 0 for f in factors):  # type_c9 (alone: type_c6, the verifier's)
            raise VerifyError(start.loc, "type_c9", f"the extent {_spelled(factors, den)} is no extent: "
                              "a negative factor")
        try:
            coef = 1
            for f in factors:
                coef *= f if isinstance(f, int) else 1
            made = extent_expr(coef, [f for f in factors if isinstance(f, str)], den)
        except NotAnExtent as e:  # type_c9
            raise VerifyError(start.loc, "type_c9", f"the extent {_spelled(factors, den)} is no extent: {e}") \
                from None
        if len(str(made.coef if isinstance(made, ExtentExpr) else made)) > _MAX_DIGITS:
            raise ParseError(start.loc, f"the extent {_spelled(factors, den)} has a coefficient of more than "
                             f"{_MAX_DIGITS} digits; extents fit in 64 bits")
        return made, names

    def factor(self) -> int | str:
        """One factor of an extent: an integer or a symbol (a negative one is the
        verifier's type_c6, or no extent in an expression: type_c9)."""
        if self.tok.kind == "num":
            return self.integer()
        return self.name("an extent (integer or symbol)").text

    def did(self) -> str:
        did = self.name("DIDx, DIDy or DIDz")
        if did.text not in DIDS:
            raise ParseError(did.loc, f"expected DIDx, DIDy or DIDz, found {did.text!r}")
        return did.text

    def nest(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """`(DIDy, DIDx)`: an axis cut over several mesh axes, outermost first (§3.2),
        each maybe with a split factor (`(DIDy:2, DIDx)`, §3.4)."""
        start = self.expect("(")
        dids, split = [self.did()], [self.split_factor()]
        while self.accept(","):
            dids.append(self.did())
            split.append(self.split_factor())
        self.expect(")")
        if len(dids) < 2 or len(set(dids)) < len(dids):  # type_c7
            twice = next((d for d in dids if dids.count(d) > 1), None)
            why = f"names {twice} twice" if twice else f"names one mesh axis: write @{dids[0]}"
            raise VerifyError(start.loc, "type_c7", f"the nest ({', '.join(dids)}) {why}")
        return tuple(dids), tuple(split)


def _spelled(factors: list[int | str], den: int | str) -> str:
    return "*".join(map(str, factors)) + (f"/{den}" if den != 1 else "")
