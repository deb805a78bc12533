"""Reading nvFuser's printed fusion IR: text -> TensorView statements.

The dumps come from logs and bug reports: `Inputs:` / `Outputs:` lists,
`%kernel_math { ... }` and `%kernel { ... }` blocks, host-IR `Communication`
lines, prose around them, statements collapsed onto one line, brackets padded or
not. The scanner skips whatever is not IR; once a TensorView is followed by `=`,
its definition is parsed strictly and anything unexpected is a ParseError at its
line and column. Mapping the statements onto refir is refir/frontends/nvfuser.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from refir.errors import Loc, ParseError

_TOKEN = re.compile(
    r"(?P<ws>[ \t\r\f]+)|(?P<nl>\n)"
    r"|(?P<num>\d+\.\d*(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)*)"
    r"|(?P<punct>.)"
)
TV_NAME = re.compile(r"^(T\d+)(?:_([glsc]))?(?:_+([A-Za-z][A-Za-z0-9]*))?$")
DOMAIN_NAME = re.compile(r"^([irb])(S|deviceIdx\.[xyz]|[A-Za-z.]+?)(\d+)$")  # kind, parallel type, number
# nvFuser's printed dtypes (after a TensorView, or in its name) -> refir dtypes.
NV_DTYPES = {
    "float": "f32", "double": "f64", "half": "f16", "__half": "f16", "bfloat": "bf16", "__bfloat": "bf16",
    "bfloat16": "bf16", "__nv_bfloat16": "bf16", "int": "i32", "int32_t": "i32", "int64_t": "i64",
    "int64": "i64", "int32": "i32", "long": "i64", "bool": "bool", "char": "i8", "int8_t": "i8",
    "int16_t": "i16", "uint8_t": "u8",
}


@dataclass(frozen=True)
class Tok:
    kind: str  # num, name, punct, eof
    text: str
    loc: Loc
    pos: int  # offset in the text


Extent = int | str | tuple  # a number, a symbol, or ("ceilDiv", a, b)


@dataclass(frozen=True)
class Domain:
    """One IterDomain as printed, e.g. `ideviceIdx.x12{4}` or `rS7{5}rf`."""

    text: str
    kind: str  # i (iteration), r (reduction), b (broadcast)
    ptype: str  # S (serial), deviceIdx.x/y/z, or another parallel type
    number: int
    extent: Extent
    rf: bool
    loc: Loc

    @property
    def device(self) -> str | None:
        """DIDx/DIDy/DIDz for a device-parallel domain."""
        return "DID" + self.ptype[-1] if self.ptype.startswith("deviceIdx.") else None


@dataclass(frozen=True)
class TVRef:
    """A TensorView as printed: `T4_g[ ... ] (DeviceMesh{0 1}), float`.
    `name` is empty for an operand printed without its name (`[ ... ]`)."""

    name: str
    spelling: str
    domains: tuple[Domain, ...]
    mesh: tuple[tuple[int, ...], tuple[int, ...]] | None  # (shape, devices)
    dtype: str | None
    loc: Loc


@dataclass(frozen=True)
class Scalar:
    value: int | float
    loc: Loc


@dataclass(frozen=True)
class Call:
    """`op(args, key = value, ...)`, an infix `a + b`, or a cast."""

    op: str
    args: tuple[TVRef | Scalar, ...]
    keywords: dict[str, str] = field(hash=False)
    loc: Loc


@dataclass(frozen=True)
class Statement:
    out: TVRef
    expr: TVRef | Call
    text: str  # the statement as printed, on one line
    segment: int


@dataclass
class Dump:
    statements: list[Statement] = field(default_factory=list)
    inputs: list[TVRef] = field(default_factory=list)  # from `Inputs:` lists
    outputs: list[TVRef] = field(default_factory=list)  # from `Outputs:` lists
    mentions: list[TVRef] = field(default_factory=list)  # every TensorView printed
    segments: int = 0
    # `Outer split: iS0{6} by factor 2 -> ideviceIdx.x4{2}, iS5{3}` (printTransforms):
    # the number of the inner domain -> the extent of the split logical domain.
    splits: dict[int, Extent] = field(default_factory=dict)


def tokenize(text: str, file: str) -> list[Tok]:
    lines = text.split("\n")
    out: list[Tok] = []
    pos, line, start = 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        assert m is not None  # the last alternative matches any character
        kind = m.lastgroup or ""
        if kind == "nl":
            line, start = line + 1, m.end()
        elif kind != "ws":
            out.append(Tok(kind, m.group(), Loc(file, line, pos - start + 1, lines[line - 1]), pos))
        pos = m.end()
    last = len(lines)
    out.append(Tok("eof", "", Loc(file, last, len(lines[-1]) + 1, lines[-1]), len(text)))
    return out


_DEPTH = {"(": 1, "{": 1, "[": 1, ")": -1, "}": -1, "]": -1}
# Host-IR statements that allocate or wait: no values of their own.
HOST_BOOKKEEPING = ("ALLOCATE", "KIR::ALLOCATE", "ALLOCATE_TENSOR")
INFIX = {"+": "add", "-": "sub", "*": "mul", "/": "div", "•": "bullet"}


class DumpParser:
    def __init__(self, text: str, file: str) -> None:
        self.text = text
        self.toks = tokenize(text, file)
        self.i = 0

    # ---- helpers ---------------------------------------------------------------------

    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Tok:
        t = self.tok
        self.i = min(self.i + 1, len(self.toks) - 1)
        return t

    def accept(self, text: str) -> bool:
        if self.tok.text == text:
            self.next()
            return True
        return False

    def expect(self, text: str, what: str = "") -> Tok:
        if self.tok.text != text:
            raise self.fail(f"expected {what or repr(text)}")
        return self.next()

    def fail(self, message: str, tok: Tok | None = None) -> ParseError:
        t = tok or self.tok
        shown = repr(t.text) if t.text else "the end of the text"
        return ParseError(t.loc, f"{message}, found {shown}")

    def at_tv(self) -> bool:
        return self.tok.kind == "name" and bool(TV_NAME.match(self.tok.text)) and self.peek().text == "["

    # ---- the scan --------------------------------------------------------------------

    def dump(self) -> Dump:
        d = Dump()
        section = ""
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
            elif t.text == "Outer" and self.peek().text == "split" and self.peek(2).text == ":":
                self.i += 3
                whole = self.domain()
                while self.tok.text not in ("-", "eof") and self.tok.kind != "eof":
                    self.next()
                if self.accept("-") and self.accept(">"):
                    self.domain()
                    self.expect(",")
                    inner = self.domain()
                    d.splits[inner.number] = whole.extent
            elif t.text == "Communication" and self.peek().kind in ("num", "punct") and self._comm_ahead():
                d.statements.append(self.communication(max(d.segments, 1)))
                section = ""
            elif self.at_tv():
                start = t.pos
                ref = self.tv()
                d.mentions.append(ref)
                if self.tok.text == "=" and self.peek().text.upper() in HOST_BOOKKEEPING:
                    self.i += 2
                    self.skip_group()
                elif self.tok.text == "=" and self.peek().text != "=":
                    self.next()
                    expr = self.expression()
                    if isinstance(expr, Call):
                        for a in expr.args:
                            if isinstance(a, TVRef):
                                d.mentions.append(a)
                    elif expr.name:
                        d.mentions.append(expr)
                    d.statements.append(Statement(ref, expr, self._flat(start), max(d.segments, 1)))
                    self.accept(";")
                    section = ""
                elif section == "Inputs":
                    d.inputs.append(ref)
                elif section == "Outputs":
                    d.outputs.append(ref)
            else:
                self.next()
        return d

    def skip_group(self) -> None:
        """Skip a parenthesized group, e.g. the arguments of ALLOCATE(...)."""
        depth = 0
        while self.tok.kind != "eof":
            depth += _DEPTH.get(self.next().text, 0)
            if depth <= 0:
                return

    def _comm_ahead(self) -> bool:
        k = 1 if self.peek().text == "(" else 2
        return self.peek(k).text == "("

    def _flat(self, start: int) -> str:
        end = self.toks[self.i - 1].pos + len(self.toks[self.i - 1].text)
        return " ".join(self.text[start:end].split())

    # ---- TensorViews -----------------------------------------------------------------

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
        mesh = self.mesh_note()
        if self.tok.text == "," and self.peek().text in NV_DTYPES and self.peek(2).text not in ("[", "("):
            self.next()
            dtype = self.dtype(self.next())
        end = self.toks[self.i - 1]
        spelling = " ".join(self.text[t.pos:end.pos + len(end.text)].split())
        return TVRef(m.group(1), spelling, tuple(domains), mesh, dtype, t.loc)

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
        extent = self.extent()
        self.expect("}", "'}' closing the extent of " + t.text)
        rf = False
        if self.tok.text == "rf":
            rf = True
            self.next()
        return Domain(t.text + ("rf" if rf else ""), m.group(1), m.group(2), int(m.group(3)), extent, rf, t.loc)

    def extent(self) -> Extent:
        """`4`, `i0`, `( ceilDiv(i0, 2) )`; any other expression is refused."""
        t = self.tok
        if t.kind == "num" and t.text.isdigit():
            self.next()
            return int(t.text)
        if t.text == "(":
            self.next()
            inner = self.extent()
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
            if self.tok.text in ("+", "-", "*", "/", "%"):
                raise self.fail("refir has no extent expressions besides ceilDiv(extent, devices)")
            return t.text
        raise self.fail("expected an extent (a number, a symbol, or ceilDiv(extent, devices))")

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

    # ---- expressions -----------------------------------------------------------------

    def expression(self) -> TVRef | Call:
        left = self.operand()
        while self.tok.text in INFIX and self._starts_operand(self.peek()):
            op = self.next()
            right = self.operand()
            left = Call(INFIX[op.text], (left, right), {}, op.loc)
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
        if t.text == "-" and self.peek().kind == "num":
            self.next()
            s = self.operand()
            assert isinstance(s, Scalar)
            return Scalar(-s.value, t.loc)
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
            if self._starts_operand(self.tok) or self.tok.text in ("[", "-") or (
                    self.tok.kind == "name" and self.peek().text == "(" and self.tok.text not in NV_DTYPES):
                a = self.operand()
                args.append(a)
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
        start, depth = self.tok.pos, 0
        while self.tok.kind != "eof" and not (depth == 0 and self.tok.text in (",", ")")):
            depth += _DEPTH.get(self.tok.text, 0)
            self.next()
        end = self.toks[self.i - 1]
        return " ".join(words), " ".join(self.text[start:end.pos + len(end.text)].split())

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
                value = self.keyword_value()
                keywords[key] = value
            if not self.accept(","):
                self.expect(")", "',' or ')' in a Communication")
                break
        src = tvs.get("input") or tvs.get("in") or tvs.get("input_tv")
        dst = tvs.get("output") or tvs.get("out") or tvs.get("output_tv")
        if src is None or dst is None or "type" not in keywords:
            raise ParseError(head.loc, "a Communication needs type=, input= and output= to be imported")
        call = Call("communication:" + keywords["type"], (src,), keywords, head.loc)
        return Statement(dst, call, self._flat(start), segment)

    def keyword_value(self) -> str:
        start, depth = self.tok.pos, 0
        while self.tok.kind != "eof" and not (depth == 0 and self.tok.text in (",", ")")):
            depth += _DEPTH.get(self.tok.text, 0)
            self.next()
        end = self.toks[self.i - 1]
        return " ".join(self.text[start:end.pos + len(end.text)].split())


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


def parse_dump(text: str, file: str = "<dump>") -> Dump:
    return DumpParser(text, file).dump()
