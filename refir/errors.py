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

    def show(self) -> str:
        """The location, the source line and a caret under the column."""
        if not self.text:
            return str(self)
        return f"{self}\n    {self.text}\n    {' ' * (self.col - 1)}^"


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
        where = loc.show() if loc.line else str(loc)
        super().__init__(f"{where}\nverify error [{label}]: {message}")


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
