"""The text format: a tokenizer and a recursive-descent parser.

    mesh m = [0, 1]
    func main(x: f32[N@DIDx, 4] on m) {
      y: f32[N@DIDx, 4] on m layout[1, 0] = relu(x)
      return y
    }
    # expect: y = np.maximum(x, 0)

Syntax problems are ParseErrors; a handful of meaning problems the parser is
first to see (an unknown op or mesh, a malformed mesh) are VerifyErrors with the
label of the constraint they break. Both point at the text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from refir.checks.limits import DEVICES, MAX_DIGITS
from refir.checks.type_checks import check_mesh
from refir.errors import Loc, ParseError, VerifyError
from refir.ir.extents import Extent
from refir.ir.program import Eqn, Expect, Func, Lit, Param, Program, Sym, Var
from refir.ir.types import Mesh
from refir.text.op_syntax import ExtentItem, build_op
from refir.text.type_syntax import TypeSyntax

_TOKEN = re.compile(
    r"(?P<ws>[ \t\r]+)|(?P<nl>\n)|(?P<comment>#[^\n]*)"
    r"|(?P<num>-?(inf\b|(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?))"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)|(?P<punct>[\[\](){},:=@*/])"
)
# Only the head is matched by a pattern: the expression is the rest of the line,
# stripped (a lazy `(.+?)\s*$` backtracks quadratically on long lines).
_INTEGER = re.compile(r"-?\d+")
_EXPECT = re.compile(r"#\s*expect:\s*([A-Za-z_][A-Za-z_0-9]*)\s*=")
_MAX_DIGITS = MAX_DIGITS
_MAX_LITERAL_DIGITS = 1000  # integer literals wrap into their tensor's dtype, but are not unbounded


@dataclass(frozen=True)
class Token:
    kind: str  # num, name, punct, eof
    text: str
    loc: Loc


def tokenize(text: str, file: str) -> tuple[list[Token], list[Expect]]:
    lines = text.split("\n")
    tokens: list[Token] = []
    expects: list[Expect] = []
    pos, line, line_start = 0, 1, 0
    source = lines[0] if lines else ""
    match, end_at = _TOKEN.match, len(text)
    while pos < end_at:
        m = match(text, pos)
        if m is None:
            raise ParseError(Loc(file, line, pos - line_start + 1, source), f"unexpected character {text[pos]!r}")
        kind = m.lastgroup or ""
        if kind == "nl":
            line, line_start = line + 1, m.end()
            source = lines[line - 1]
        elif kind == "comment":
            e = _EXPECT.match(m.group())
            if e and m.group()[e.end():].strip():
                expects.append(Expect(e.group(1), m.group()[e.end():].strip(),
                                      Loc(file, line, pos - line_start + 1, source)))
        elif kind != "ws":  # a place only for what the parser sees (a mesh of 65,536 ids)
            tokens.append(Token(kind, m.group(), Loc(file, line, pos - line_start + 1, source)))
        pos = m.end()
    # The end of the file is shown just past the last line that has text.
    last = max((i for i, t in enumerate(lines) if t.strip()), default=0)
    end = Loc(file, last + 1, len(lines[last]) + 1, lines[last])
    tokens.append(Token("eof", "", end))
    return tokens, expects


class Parser(TypeSyntax):
    def __init__(self, text: str, file: str) -> None:
        self.file = file
        self.tokens, self.expects = tokenize(text, file)
        self.pos = 0
        self.meshes: dict[str, Mesh] = {}
        self.values: set[str] = set()
        self.symbols: set[str] = set()

    # ---- token helpers -------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def next(self) -> Token:
        t = self.tok
        self.pos += 1
        return t

    def at(self, text: str) -> bool:
        return self.tok.kind in ("punct", "name") and self.tok.text == text

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.pos += 1
            return True
        return False

    def expect(self, text: str) -> Token:
        if not self.at(text):
            raise ParseError(self.tok.loc, f"expected {text!r}, found {self.describe()}")
        return self.next()

    def name(self, what: str = "a name") -> Token:
        if self.tok.kind != "name":
            raise ParseError(self.tok.loc, f"expected {what}, found {self.describe()}")
        return self.next()

    def integer(self) -> int:
        t = self.tok
        if t.kind != "num" or not _INTEGER.fullmatch(t.text):
            raise ParseError(t.loc, f"expected an integer, found {self.describe()}")
        self.pos += 1
        return _int(t)

    def describe(self) -> str:
        return "end of file" if self.tok.kind == "eof" else repr(self.tok.text)

    def listing(self, item: Callable[[], object]) -> list:
        """`[item, item, ...]`"""
        self.expect("[")
        out = []
        while not self.at("]"):
            out.append(item())
            if not self.accept(","):
                break
        self.expect("]")
        return out

    # ---- grammar ---------------------------------------------------------------------

    def program(self) -> Program:
        funcs: list[Func] = []
        while self.tok.kind != "eof":
            if self.at("mesh"):
                self.mesh()
            elif self.at("func"):
                funcs.append(self.func())
            else:
                raise ParseError(self.tok.loc, f"expected 'mesh' or 'func', found {self.describe()}")
        if not funcs:
            raise ParseError(self.tok.loc, "a program needs at least one 'func'")
        return Program(tuple(self.meshes.values()), tuple(funcs), tuple(self.expects), self.file)

    def mesh(self) -> None:
        self.expect("mesh")
        name = self.name("a mesh name")
        self.expect("=")
        start = self.tok.loc
        nested = self.nested_ints(start)
        if name.text in self.meshes:  # mesh_c3
            raise VerifyError(name.loc, "mesh_c3", f"mesh {name.text!r} is declared twice")
        self.meshes[name.text] = make_mesh(name.text, nested, start)

    def nested_ints(self, start: Loc, depth: int = 0, most: int | None = None) -> object:
        most = DEVICES.value if most is None else most  # read once a mesh: it may have 65,536 ids
        if self.at("["):
            if depth == 3:  # mesh_c1, refused before recursing any deeper
                raise VerifyError(start, "mesh_c1", "a mesh must be a non-empty 1- to 3-D array")
            return self.listing(lambda: self.nested_ints(start, depth + 1, most))
        device = self.tok
        value = self.integer()
        if value >= most:  # devices_c1, at the id that asks for too large a world
            DEVICES.check(value + 1, f"{device.loc}: device id {value} needs a world of")
        return value

    def func(self) -> Func:
        start = self.expect("func").loc
        name = self.name("a function name").text
        self.values, self.symbols = set(), set()
        self.expect("(")
        params: list[Param] = []
        while not self.at(")"):
            pname = self.name("a parameter name")
            self.expect(":")
            ptype = self.type()
            params.append(Param(pname.text, ptype, pname.loc))
            self.values.add(pname.text)
            self.symbols |= ptype.symbols()
            if not self.accept(","):
                break
        self.expect(")")
        self.expect("{")
        eqns: list[Eqn] = []
        while not self.at("return"):
            eqns.append(self.eqn())
        ret = self.expect("return").loc
        results = [self.result([])]
        while self.accept(","):
            results.append(self.result(results))
        self.expect("}")
        return Func(name, tuple(params), tuple(eqns), tuple(results), start, ret)

    def result(self, before: list[str]) -> str:
        """A result name; one returned before is refused where it stands (func_c4)."""
        t = self.name("a result name")
        if t.text in before:  # func_c4
            raise VerifyError(t.loc, "func_c4", f"{t.text!r} is returned twice (result {before.index(t.text)} "
                              f"and result {len(before)})")
        return t.text

    def eqn(self) -> Eqn:
        out = self.name("an equation result or 'return'")
        declared = self.type() if self.accept(":") else None
        self.expect("=")
        opname = self.name("an op name")
        self.expect("(")
        positional: list[object] = []
        keywords: dict[str, object] = {}
        while not self.at(")"):
            if self.tok.kind == "name" and self.tokens[self.pos + 1].text == "=":
                key = self.next().text
                self.next()
                keywords[key] = self.value()
            else:
                positional.append(self.value())
            if not self.accept(","):
                break
        self.expect(")")
        op, args = build_op(opname.text, opname.loc, positional, keywords)
        self.values.add(out.text)
        return Eqn(out.text, declared, op, args, out.loc)

    def list_item(self) -> int | Sym | ExtentItem:
        """An integer, a symbol as an extent (`reshape(x, [S, h, 8])`), or an extent
        expression (`[S, 4, E/4]`); the op's syntax says which it takes (op_c2)."""
        if self.tok.kind == "num" and self.tokens[self.pos + 1].text not in ("*", "/"):
            return self.integer()  # -1 too (reshape's inferred extent)
        if self.tok.kind != "num" and self.tok.kind != "name":
            raise ParseError(self.tok.loc, f"expected an integer or a symbol, found {self.describe()}")
        extent, names = self.extent()
        if isinstance(extent, int):
            return extent
        if isinstance(extent, str):
            tok = next(t for t in names if t.text == extent)
            return Sym(tok.text, tok.loc)
        return ExtentItem(extent, tuple(Sym(t.text, t.loc) for t in names))

    def value(self) -> object:
        t = self.tok
        if self.at("["):
            return self.listing(self.list_item)
        if t.kind == "num":
            self.pos += 1
            if t.text.lstrip("-") == "inf":  # the one non-finite literal: where(mask, x, -inf)
                return Lit(float(t.text))
            if not re.search(r"[.eE]", t.text):
                return Lit(_int(t, _MAX_LITERAL_DIGITS))
            value = float(t.text)
            if not math.isfinite(value):
                raise ParseError(t.loc, f"the float literal {t.text} is out of range (it would round to {value})")
            return Lit(value)
        tok = self.name("an operand")
        if tok.text in self.symbols and tok.text not in self.values:
            return Sym(tok.text, tok.loc)
        return Var(tok.text, tok.loc)


def _int(t: Token, max_digits: int = _MAX_DIGITS) -> int:
    digits = len(t.text.lstrip("-"))
    if digits > max_digits:
        what = "an integer literal has at most 1000" if max_digits == _MAX_LITERAL_DIGITS else \
            "extents, device ids, dims and layouts fit in 64 bits"
        raise ParseError(t.loc, f"the integer {t.text[:24]}... has {digits} digits; {what}")
    return int(t.text)


def make_mesh(name: str, nested: object, loc: Loc) -> Mesh:
    arr = nested
    shape: list[int] = []
    while isinstance(arr, list):
        shape.append(len(arr))
        arr = arr[0] if arr else None
    flat: list[int] = []

    def walk(x: object, depth: int) -> None:
        if depth == len(shape):
            if not isinstance(x, int):
                raise VerifyError(loc, "mesh_c1", f"mesh {name!r} is not a rectangular array")
            flat.append(x)
            return
        if not isinstance(x, list) or len(x) != shape[depth]:
            raise VerifyError(loc, "mesh_c1", f"mesh {name!r} is not a rectangular array")
        for y in x:
            walk(y, depth + 1)

    if not 1 <= len(shape) <= 3 or 0 in shape:  # mesh_c1
        raise VerifyError(loc, "mesh_c1", f"mesh {name!r} must be a non-empty 1- to 3-D array")
    walk(nested, 0)
    mesh = Mesh(name, tuple(shape), tuple(flat))
    check_mesh(mesh, loc)
    return mesh


def parse_extent(text: str, where: str = "<extent>") -> Extent:
    """One extent as the text writes it (`8`, `E`, `E/4`, `4*D`), read by the
    tokenizer and the parser's own rule: what the builder accepts as a string."""
    parser = Parser(text, where)
    extent, _ = parser.extent()
    if parser.tok.kind != "eof":
        raise ParseError(parser.tok.loc, f"expected the end of the extent, found {parser.describe()}")
    return extent


def parse(text: str, file: str = "<text>") -> Program:
    return Parser(text.removeprefix("\ufeff"), file).program()  # a byte-order mark is no character of the program
