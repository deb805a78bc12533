"""Programs from files or text: `refir.load`, and the bounded, UTF-8-checked read of a program file."""

from __future__ import annotations

import sys
from pathlib import Path

from refir.checks.limits import PROGRAM_BYTES
from refir.errors import InputError, Loc, ParseError
from refir.ir.program import Program
from refir.text.parser import parse


def load(source: str | Path) -> Program:
    """Parse a program from a file path (a Path, or one line that ends in `.rir`
    or names a file) or from program text. The command line always passes a
    Path; `-` is standard input."""
    if isinstance(source, Path) or ("\n" not in source and (source.endswith(".rir") or _is_file(source)
                                                             or _is_dir(source))):
        return parse(read_source(Path(source)), "<stdin>" if str(source) == "-" else str(source))
    try:
        return parse(source)
    except ParseError as exc:
        if "\n" in source.strip() or " " in source.strip():
            raise
        raise ParseError(exc.loc, f"{exc.message} (read as program text: there is no file {source!r})") from exc


def _is_file(name: str) -> bool:
    try:
        return Path(name).is_file()
    except (OSError, ValueError):  # too long, or a NUL: program text, not a name
        return False


def _is_dir(name: str) -> bool:
    try:
        return bool(name.strip()) and Path(name).is_dir()
    except (OSError, ValueError):
        return False


def read_source(path: Path) -> str:
    """The text of a program file (`-`: standard input): a regular file within
    REFIR_MAX_PROGRAM_BYTES, UTF-8. Anything else is an InputError or a ParseError."""
    limit = PROGRAM_BYTES.value
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            if not path.is_file():
                why = ("No such file or directory" if not path.exists() else
                       "it is a folder (give a file in it)" if path.is_dir() else "not a regular file")
                raise InputError(f"cannot read {path}: {why}")
            with path.open("rb") as f:
                data = f.read(limit + 1)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > limit:
        raise InputError(f"{path} is larger than refir's limit of {limit} bytes (raise it with {PROGRAM_BYTES.env}=N)")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte-order mark, as some editors write: skipped
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[:exc.start]
        line = before.count(b"\n") + 1
        col = exc.start - (before.rfind(b"\n") + 1) + 1
        text = data.split(b"\n")[line - 1].decode("utf-8", errors="replace")
        raise ParseError(Loc(str(path), line, col, text),
                         f"byte 0x{data[exc.start]:02x} is not UTF-8 (program text is UTF-8)") from None
