"""The tokens of a printed nvFuser fusion, and a cursor over them that the
readers of refir/frontends/nvfuser_tensorview.py and nvfuser_parse.py share:
look ahead, take a token, fail at one (a ParseError at its line and column)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from refir.errors import Loc, ParseError

_TOKEN = re.compile(
    r"(?P<ws>[ \t\r\f]+)|(?P<nl>\n)"
    r"|(?P<num>\d+\.\d*(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)*)"
    r"|(?P<punct>.)"
)
_DEPTH = {"(": 1, "{": 1, "[": 1, ")": -1, "}": -1, "]": -1}


@dataclass(frozen=True)
class Tok:
    kind: str  # num, name, punct, eof
    text: str
    loc: Loc
    pos: int  # offset in the text


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


class TokenCursor:
    """The text's tokens and the place of the next one; never moves past the end."""

    def __init__(self, text: str, file: str) -> None:
        self.text = text
        self.toks = tokenize(text, file)
        self.i = 0

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

    def skip_group(self) -> None:
        """Skip a parenthesized group, e.g. the arguments of ALLOCATE(...)."""
        depth = 0
        while self.tok.kind != "eof":
            depth += _DEPTH.get(self.next().text, 0)
            if depth <= 0:
                return

    def value_text(self) -> str:
        """Take the tokens up to a ',' or ')' outside brackets (a keyword's
        value, `{true, false}` whole) and give their text on one line."""
        start, depth = self.tok.pos, 0
        while self.tok.kind != "eof" and not (depth == 0 and self.tok.text in (",", ")")):
            depth += _DEPTH.get(self.tok.text, 0)
            self.next()
        return self.flat_since(start)

    def flat_since(self, start: int) -> str:
        """The text from offset `start` to the end of the last token taken, on one line."""
        end = self.toks[self.i - 1]
        return " ".join(self.text[start:end.pos + len(end.text)].split())
