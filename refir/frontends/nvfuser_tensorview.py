"""Reading one printed TensorView: `T4_g_float[ iS0{4}, ideviceIdx.x1{( ceilDiv(i0, 2) )} ]
(DeviceMesh{0 1}), float` -> a TVRef with its IterDomains, extents, mesh and dtype.
The statements around it are refir/frontends/nvfuser_parse.py's."""

from __future__ import annotations

import re

from refir.errors import Loc, ParseError
from refir.frontends.nvfuser_dump import NV_DTYPES, Domain, Extent, TVRef, scheduled_type
from refir.frontends.nvfuser_tokens import Tok, TokenCursor
from refir.ir.extents import ExtentExpr, NotAnExtent, extent_expr
from refir.text.parser import parse_extent

TV_NAME = re.compile(r"^(T\d+)(?:_([glsc]))?(?:_+([A-Za-z][A-Za-z0-9_]*))?$")
DOMAIN_NAME = re.compile(r"^([irb])(S|deviceIdx\.[xyz]|[A-Za-z.]+?)(\d+)$")  # kind, parallel type, number


class TensorViewReader(TokenCursor):
    """Reads a TensorView where the cursor stands; the dump's parser extends it."""

    def at_tv(self) -> bool:
        return self.tok.kind == "name" and bool(TV_NAME.match(self.tok.text)) and self.peek().text == "["

    def tv(self) -> TVRef:
        t = self.next()
        m = TV_NAME.match(t.text)
        assert m is not None
        dtype = None
        if m.group(3):
            dtype = NV_DTYPES.get(m.group(3)) or NV_DTYPES.get("__" + m.group(3))
            if dtype is None:
                raise ParseError(t.loc, f"unknown dtype {m.group(3)!r} in the TensorView name {t.text!r}")
        self.expect("[")
        domains = self.domains(("]",))
        self.expect("]", "']' closing the domains of " + t.text)
        self.skip_positions()  # before or after the mesh note
        mesh = self.mesh_note()
        self.skip_positions()
        if self.tok.text == "," and self.peek().text in NV_DTYPES and self.peek(2).text not in ("[", "("):
            self.next()
            dtype = self.dtype(self.next())
        return TVRef(m.group(1), self.flat_since(t.pos), tuple(domains), mesh, dtype, t.loc)

    def skip_positions(self) -> None:
        """`ca_pos( 3 )`, `produce_pos( 3 )`: where a scheduled TensorView is computed
        and produced in its consumer's loops; no change of meaning."""
        while self.tok.text in ("ca_pos", "produce_pos") and self.peek().text == "(":
            name = self.next().text
            self.next()
            if self.tok.kind != "num":
                raise self.fail(f"expected the loop position of {name}")
            self.next()
            self.expect(")", "')' closing the position")

    def dtype(self, t: Tok) -> str:
        if t.text not in NV_DTYPES:
            raise self.fail("expected a dtype", t)
        return NV_DTYPES[t.text]

    def domains(self, stops: tuple[str, ...]) -> list[Domain]:
        out: list[Domain] = []
        while self.tok.text not in stops and self.tok.text != "DeviceMesh" and self.tok.kind != "eof":
            out.append(self.domain())
            if not self.accept(","):
                break
        return out

    def domain(self) -> Domain:
        t = self.tok
        m = DOMAIN_NAME.match(t.text) if t.kind == "name" else None
        if m is None:
            raise self.fail("expected an IterDomain such as iS0{4}")
        self.next()
        self.expect("{", "'{' and the extent of " + t.text)
        kind = m.group(1)
        if scheduled_type(m.group(2)):  # its extent, a scheduler's ceilDivs of merges, is never read
            extent: Extent = self.opaque_extent()
        else:
            extent = self.extent()
        if extent == 1 and self.tok.text == "ex":  # an expanded broadcast, `bS3{1 ex 8}`: an axis of 8
            self.next()
            extent = self.extent()
            kind = "i" if kind == "b" else kind
        self.expect("}", "'}' closing the extent of " + t.text)
        rf = False
        if self.tok.text == "rf":
            rf = True
            self.next()
        return Domain(t.text + ("rf" if rf else ""), kind, m.group(2), int(m.group(3)), extent, rf, t.loc)

    def opaque_extent(self) -> str:
        """A scheduled domain's extent, as text, up to the '}' that closes it."""
        start = self.i
        while self.tok.kind != "eof" and self.tok.text not in ("}", "]", ";"):
            self.next()
        return " ".join(tok.text for tok in self.toks[start:self.i])

    def extent(self) -> Extent:
        """`4`, `i0`, `( ceilDiv(i0, 2) )`, or a product over at most one divisor,
        `( i1 / 4 )`, `( ( i0 * i1 ) / h )`: refir's extent expression (docs/spec.md §3),
        kept as its canonical text over nvFuser's names (`i1/4`); any other is refused."""
        t = self.tok
        if t.kind == "num" and t.text.isdigit():
            self.next()
            return int(t.text)
        if t.text == "(":
            self.next()
            inner = self.extent()
            if self.tok.text in ("*", "/"):
                inner = self.quotient(inner)
            self.expect(")", "')' closing the extent")
            return inner
        if t.text == "ceilDiv" and self.peek().text == "(":
            self.i += 2
            a = self.extent()
            self.expect(",")
            b = self.extent()
            self.expect(")", "')' closing ceilDiv")
            return ("ceilDiv", a, b)
        if t.kind == "name" and re.fullmatch(r"[A-Za-z_]\w*", t.text):
            self.next()
            if self.tok.text in ("+", "-", "%"):
                raise self.fail("refir has no extent expressions besides ceilDiv(extent, devices) and "
                                "products over one divisor")
            return t.text
        raise self.fail("expected an extent (a number, a symbol, or ceilDiv(extent, devices))")

    def quotient(self, first: Extent) -> str:
        """The rest of `( a * b ... / d )` after its first factor, as refir's canonical
        text (refir.ir.extents): factors multiply, one divisor comes last."""
        factors, den = [first], None
        while self.tok.text in ("*", "/") and den is None:
            if self.next().text == "*":
                factors.append(self.extent())
            else:
                den = self.extent()
        if self.tok.text in ("*", "/"):
            raise self.fail("refir's extent expressions have one divisor, written last")
        coef, names = 1, []
        for f in factors:
            if isinstance(f, int):
                coef *= f
            elif isinstance(f, str) and f.isidentifier():
                names.append(f)
            elif isinstance(f, str) and isinstance(e := parse_extent(f), ExtentExpr) and e.den == 1:
                coef, names = coef * e.coef, names + list(e.syms)  # a product inside a product
            else:
                raise self.fail("refir has no extent expressions besides products over one divisor")
        if isinstance(den, tuple) or isinstance(den, str) and not den.isidentifier():
            raise self.fail("refir's divisor of an extent is an integer or a symbol")
        try:
            made = extent_expr(coef, names, 1 if den is None else den)
        except NotAnExtent as e:
            raise self.fail(f"no extent: {e}") from None
        return str(made) if isinstance(made, ExtentExpr) else made

    def mesh_note(self) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """`(DeviceMesh{0 1})`, `(DeviceMesh{0, 1, })`, `(DeviceMesh{{0 1}{2 3}})`;
        a closing parenthesis lost in a paste is tolerated."""
        paren = self.tok.text == "(" and self.peek().text == "DeviceMesh"
        if not paren and self.tok.text != "DeviceMesh":
            return None
        if paren:
            self.next()
        self.next()
        nested = self.nested_ints()
        if paren:
            self.accept(")")
        return _mesh_shape(nested, self.toks[self.i - 1].loc)

    def nested_ints(self) -> list:
        self.expect("{", "'{' opening a DeviceMesh")
        items: list = []
        while not self.accept("}"):
            if self.tok.text == "{":
                items.append(self.nested_ints())
            elif self.tok.kind == "num" and self.tok.text.isdigit():
                items.append(int(self.next().text))
            elif not self.accept(","):
                raise self.fail("expected a device id in DeviceMesh")
        return items


def _mesh_shape(nested: list, loc: Loc) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if not nested:
        raise ParseError(loc, "an empty DeviceMesh holds no device")
    if all(isinstance(x, int) for x in nested):
        return (len(nested),), tuple(nested)
    shape, flat = None, []
    for row in nested:
        if not isinstance(row, list):
            raise ParseError(loc, "a DeviceMesh mixes device ids and rows")
        s, f = _mesh_shape(row, loc)
        if shape is not None and s != shape:
            raise ParseError(loc, "the rows of a DeviceMesh differ in length")
        shape = s
        flat += f
    assert shape is not None
    return (len(nested), *shape), tuple(flat)
