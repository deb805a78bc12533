"""Reading nvFuser's printed fusion IR: text -> the statements of a Dump
(refir/frontends/nvfuser_dump.py).

The dumps come from logs and bug reports: `Inputs:` / `Outputs:` lists,
`%kernel_math { ... }` and `%kernel { ... }` blocks, host-IR `Communication`
lines, prose around them, statements collapsed onto one line, brackets padded or
not. The scanner skips whatever is not IR; once a TensorView is followed by `=`,
its definition is parsed strictly and anything unexpected is a ParseError at its
line and column. The TensorViews themselves are read by
refir/frontends/nvfuser_tensorview.py; mapping the statements onto refir is
refir/frontends/nvfuser.py.
"""

from __future__ import annotations

import math

from refir.errors import ParseError
from refir.frontends.nvfuser_dump import NV_DTYPES, Call, Dump, Scalar, Statement, TVRef
from refir.frontends.nvfuser_tensorview import DOMAIN_NAME, TV_NAME, TensorViewReader
from refir.frontends.nvfuser_tokens import Tok

# Host-IR statements that allocate or wait: no values of their own.
HOST_BOOKKEEPING = ("ALLOCATE", "KIR::ALLOCATE", "ALLOCATE_TENSOR")
INFIX = {"+": "add", "-": "sub", "*": "mul", "/": "div", "•": "bullet",
         "<": "lt", ">": "gt", "<=": "le", ">=": "ge", "==": "eq", "!=": "ne"}


class DumpParser(TensorViewReader):
    """Scans a dump for its lists, splits and statements (see the module doc)."""

    # ---- the scan --------------------------------------------------------------------

    def dump(self) -> Dump:
        d = Dump()
        section = ""
        last: TVRef | None = None  # the TensorView printed last outside a statement: a transforms' header
        while self.tok.kind != "eof":
            t = self.tok
            if t.text in ("Inputs", "Outputs") and self.peek().text == ":":
                section = t.text
                if t.text == "Inputs":
                    d.segments += 1
                self.i += 2
            elif t.text in ("%", "{", "}", "---", "----") or t.text.startswith("kernel"):
                section = "" if t.text in ("%", "{") else section
                self.next()
            elif (t.text == "Outer" and self.peek().text == "split" and self.peek(2).text == ":"
                  and DOMAIN_NAME.match(self.peek(3).text)):  # not prose that names the form
                self.i += 3
                self.split_line(d, outer_split=True)
            elif t.text == "Split" and self.peek().text == ":" and DOMAIN_NAME.match(self.peek(2).text):
                self.i += 2
                self.split_line(d, outer_split=False)
            elif (t.text == "logical" and self.peek().text == "domain" and self.peek(2).text == ":"
                  and self.peek(3).text == "(" and last is not None):  # printTransforms, under its TensorView
                self.i += 4
                try:
                    d.logical[last.name] = tuple(self.domains((")",)))
                    self.expect(")", "')' closing the logical domain")
                except ParseError as e:  # raised where the TensorView needs it (nvfuser_forms.logical_views)
                    d.logical_errors[last.name] = e
                last = None
            elif t.text == "Communication" and self.peek().kind in ("num", "punct") and self._comm_ahead():
                d.statements.append(self.communication(max(d.segments, 1)))
                section = ""
            elif self.at_tv():
                start = t.pos
                ref = self.tv()
                d.mentions.append(ref)
                last = ref
                if self.tok.text == "=" and self.peek().text.upper() in HOST_BOOKKEEPING:
                    self.i += 2
                    self.skip_group()
                elif self.tok.text == "=" and self.peek().text != "=":
                    self.next()
                    expr = self.lost_operator(self.expression())
                    if isinstance(expr, Call):
                        for a in expr.args:
                            if isinstance(a, TVRef):
                                d.mentions.append(a)
                    elif expr.name:
                        d.mentions.append(expr)
                    d.statements.append(Statement(ref, expr, self.flat_since(start), max(d.segments, 1)))
                    self.accept(";")
                    section = ""
                    last = None
                elif section == "Inputs":
                    d.inputs.append(ref)
                elif section == "Outputs":
                    d.outputs.append(ref)
            else:
                self.next()
        return d

    def split_line(self, d: Dump, outer_split: bool) -> None:
        """`Outer split: iS0{i0} by factor 2 -> ideviceIdx.x2{2}, iS3{( ceilDiv(i0, 2) )}` after
        its `Outer split:`, or an inner split's `Split: iS1{24} by factor 6 -> iS5{4}, iS6{6}`
        after its `Split:`. A scheduler's split of a merged domain (an extent refir has no
        expression for) is skipped: only a device's split says where an axis is sharded. An
        inner split is kept only as a plain split (the heads of nvfuser_forms' head splits)."""
        at = self.i
        try:
            whole = self.domain()
            while self.tok.text not in ("-", "eof") and self.tok.kind != "eof":
                self.next()
            if not (self.accept("-") and self.accept(">")):
                return
            outer = self.domain()
            self.expect(",")
            inner = self.domain()
        except ParseError as e:
            self.i = at
            while self.tok.kind != "eof" and self.tok.text != ">":  # to its domains: a device's is refused
                self.next()
            self.accept(">")
            m = DOMAIN_NAME.match(self.tok.text) if self.tok.kind == "name" else None
            if m is not None and m.group(2).startswith("deviceIdx.") and outer_split:
                raise e  # at the extent refir cannot read
            return
        if not outer.device and not inner.device:
            d.plain_splits.setdefault(outer.number, (whole, inner))
        if not outer_split:
            return
        d.splits[inner.number] = whole.extent
        d.split_from[inner.number] = (outer.number, whole.number)
        if outer.device:
            d.device_splits.setdefault(whole.number, (outer, inner))

    def lost_operator(self, expr: TVRef | Call) -> TVRef | Call:
        """A TensorView right after a statement's expression that ends the statement
        (`T3 = T1 T2;`) is an operand whose infix operator the paste lost (a C++
        comment's leading `*` taken for its margin, markdown's for emphasis): read
        as `lost(T1, T2)`, which the importer maps as its `lost` option says or
        refuses; never as T3 = T1."""
        if not self.at_tv():
            return expr
        at, token = self.i, self.tok
        second = self.tv()
        if self.tok.text != ";":
            self.i = at
            return expr
        if not isinstance(expr, TVRef):
            raise ParseError(token.loc, f"{token.text} follows the expression with no operator between them")
        return Call("lost", (expr, second), {}, token.loc)

    def _comm_ahead(self) -> bool:
        k = 1 if self.peek().text == "(" else 2
        return self.peek(k).text == "("

    # ---- expressions -----------------------------------------------------------------

    def expression(self) -> TVRef | Call:
        left = self.operand()
        while True:
            two = self.tok.text + self.peek().text  # a comparison of two characters: >= <= == !=
            if two in INFIX and self._starts_operand(self.peek(2)):
                op = self.next()
                self.next()
                left = Call(INFIX[two], (left, self.operand()), {}, op.loc)
            elif self.tok.text in INFIX and self._starts_operand(self.peek()):
                op = self.next()
                left = Call(INFIX[op.text], (left, self.operand()), {}, op.loc)
            else:
                break
        if isinstance(left, Scalar):
            raise ParseError(left.loc, "a TensorView cannot be defined as a bare number")
        return left

    def _starts_operand(self, t: Tok) -> bool:
        return (t.kind == "num" or (t.kind == "name" and bool(TV_NAME.match(t.text)))
                or t.text in NV_DTYPES or t.text == "(")

    def operand(self) -> TVRef | Call | Scalar:
        t = self.tok
        if self.at_tv():
            return self.tv()
        if t.text == "[":  # a TensorView pasted without its name
            self.next()
            domains = self.domains(("]",))
            mesh = self.mesh_note()
            self.accept("]")
            return TVRef("", "[" + ", ".join(d.text for d in domains) + "]", tuple(domains), mesh, None, t.loc)
        if t.kind == "num":
            self.next()
            return Scalar(float(t.text) if any(c in t.text for c in ".eE") else int(t.text), t.loc)
        if t.text == "inf" or (t.text == "-" and self.peek().text == "inf"):  # where(c, x, double(-inf))
            self.i += 1 + (t.text == "-")
            return Scalar(-math.inf if t.text == "-" else math.inf, t.loc)
        if t.text == "-" and self.peek().kind == "num":
            self.next()
            s = self.operand()
            assert isinstance(s, Scalar)
            return Scalar(-s.value, t.loc)
        if t.text == "-" and self.peek().kind == "name" and TV_NAME.match(self.peek().text):  # printMath's neg: -T3
            self.next()
            return Call("neg", (self.operand(),), {}, t.loc)  # type: ignore[arg-type]
        if t.text in NV_DTYPES and self.peek().text == "(":  # a typed scalar: float(0)
            self.i += 2
            s = self.operand()
            self.expect(")")
            if not isinstance(s, Scalar):
                raise ParseError(t.loc, f"{t.text}(...) holds a number here")
            floating = NV_DTYPES[t.text] in ("f16", "bf16", "f32", "f64")
            return Scalar(float(s.value) if floating else int(s.value), s.loc)
        if t.text == "(" and self.peek().text in NV_DTYPES and self.peek(2).text == ")":  # (float) x
            dt = self.peek().text
            self.i += 3
            x = self.operand()
            return Call(f"cast:{NV_DTYPES[dt]}", (x,), {}, t.loc)  # type: ignore[arg-type]
        if t.kind == "name" and self.peek().text == "(":
            return self.call()
        raise self.fail("expected a TensorView, a number or an op")

    def call(self) -> Call:
        name = self.next()
        self.expect("(")
        args: list = []
        keywords: dict[str, str] = {}
        while not self.accept(")"):
            if self.tok.kind == "eof":
                raise self.fail(f"expected ')' closing {name.text}(")
            if self.tok.kind == "name" and self.peek().text in (",", ")") and not self.at_tv():
                keywords[f"#{len(args) + len(keywords)}"] = self.next().text  # iota(i0, 0, 1, int64_t)
            elif self._starts_operand(self.tok) or self.tok.text in ("[", "-") or (
                    self.tok.kind == "name" and self.peek().text == "(" and self.tok.text not in NV_DTYPES):
                a = self.operand()
                args.append(a)
            elif self.tok.text == "{":  # slice's ranges, pad's widths: kept as text (nvfuser_window reads them)
                keywords["{"] = self.value_text()
            else:
                key, value = self.keyword()
                keywords[key] = value
            if not self.accept(","):
                self.expect(")", f"',' or ')' in {name.text}(...)")
                break
        return Call(name.text, tuple(args), keywords, name.loc)

    def keyword(self) -> tuple[str, str]:
        """`op = add`, `initial value = float(0)`, `flags = {true, false}`."""
        words = []
        while self.tok.kind == "name":
            words.append(self.next().text)
        if not words or not self.accept("="):
            raise self.fail("expected an operand or 'key = value'")
        return " ".join(words), self.value_text()

    # ---- host IR ---------------------------------------------------------------------

    def communication(self, segment: int) -> Statement:
        """`Communication 3 (type=Allgather, team=(0 1), input=T0_g[...], output=T1_g[...])`."""
        head = self.next()
        start = head.pos
        if self.tok.kind == "num":
            self.next()
        self.expect("(")
        keywords: dict[str, str] = {}
        tvs: dict[str, TVRef] = {}
        while not self.accept(")"):
            words = []
            while self.tok.kind == "name" and not self.at_tv():
                words.append(self.next().text)
            self.expect("=", "'key=value' in a Communication")
            key = "_".join(words).lower()
            if self.at_tv():
                tvs[key] = self.tv()
            else:
                value = self.value_text()
                keywords[key] = value
            if not self.accept(","):
                self.expect(")", "',' or ')' in a Communication")
                break
        src = tvs.get("input") or tvs.get("in") or tvs.get("input_tv")
        dst = tvs.get("output") or tvs.get("out") or tvs.get("output_tv")
        if src is None or dst is None or "type" not in keywords:
            raise ParseError(head.loc, "a Communication needs type=, input= and output= to be imported")
        call = Call("communication:" + keywords["type"], (src,), keywords, head.loc)
        return Statement(dst, call, self.flat_since(start), segment)


def parse_dump(text: str, file: str = "<dump>") -> Dump:
    """The statements, lists and splits of a printed fusion (prose and all)."""
    return DumpParser(text, file).dump()
