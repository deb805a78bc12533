"""One exception hierarchy for every layer and every backend.

Parse and verify errors point at the text (`file:line:col` plus the line and a
caret); run errors name the equation being executed and the rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Loc:
    """A position in a source text; `text` is the whole line, for the caret."""

    file: str
    line: int
    col: int
    text: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def show(self, width: int = 100) -> str:
        """The location, the source line (a window of it, when long) and a caret under the column.
        Characters a terminal would act on are shown escaped (the caret stays under its column)."""
        if not self.text:
            return str(self)
        start = max(0, min(self.col - 1 - width // 2, len(self.text) - width))
        shown = self.text[start:start + width]
        if start:
            shown, start = "..." + shown, start - 3
        if start + 3 + width < len(self.text):
            shown += "..."
        before = printable(shown[:max(0, self.col - 1 - start)])
        return f"{self}\n    {printable(shown)}\n    {' ' * len(before)}^"


def printable(text: str) -> str:
    """`text` safe for a terminal: newlines kept, tabs as spaces, every other
    non-printable character escaped (\\x1b, \\u200b), so that a garbage file's
    bytes never reach the terminal raw."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == "\n" else " " if c == "\t" else
                   c.encode("unicode_escape").decode("ascii") for c in text)


NOWHERE = Loc("<built>", 0, 0)


class RefirError(Exception):
    """Base of every error refir raises on purpose."""


class ParseError(RefirError):
    def __init__(self, loc: Loc, message: str) -> None:
        self.loc = loc
        self.message = message
        super().__init__(f"{loc.show()}\nparse error: {message}")


class VerifyError(RefirError):
    """A broken spec constraint; `label` is its name in docs/spec.md."""

    def __init__(self, loc: Loc, label: str, message: str) -> None:
        self.loc = loc
        self.label = label
        self.message = message
        # A program built in Python has no text to point at (refir's builder places
        # what it can at the caller's line): then the message stands alone.
        where = loc.show() + "\n" if loc.line else "" if loc == NOWHERE else f"{loc}\n"
        super().__init__(f"{where}verify error [{label}]: {message}")


class RunError(RefirError):
    """Bad input at run time, or a failure while executing an equation."""


class MismatchError(RefirError):
    """Two executions of one program disagree."""


class InputError(RunError):
    """Bad input found before anything runs (a missing input, a wrong shape or
    dtype, a symbol that does not divide, a device outside the world). Every MPI
    rank finds the same one, so every rank can exit without aborting the others."""


class OtherRankError(RunError):
    """Under MPI: another rank stopped with an error, so this one stops too
    (the message is that rank's)."""
