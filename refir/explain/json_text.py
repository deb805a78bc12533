"""JSON text for check, lower and explain --json, fast at the scale of thousands
of devices: Python's json module formats an indented document in Python (the C
encoder only writes compact text), 137 s for the 43 MB of a 65,536-device
allgather. Here the outer levels are indented, one key or item a line, and every
entry of a large map or list (a device's block, a team) and every list of
numbers (a mesh's ids) is one compact line written by the C encoder."""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from typing import IO, Any


def _compact_encoder() -> Callable[[Any], str]:
    """The C encoder made once (json.dumps makes one a call: most of the cost of a
    small entry), else the json module's own compact encode."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return json.JSONEncoder(separators=(", ", ": ")).encode
    encode = make(None, None, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True)
    return lambda x: "".join(encode(x, 0))


_COMPACT = _compact_encoder()
_KEY = json.encoder.encode_basestring_ascii  # a key: a quoted string
INLINE = 100  # a container of few entries whose compact text is at most this long stays on one line
FEW = 16


def json_text(doc: Any) -> str:
    """`doc` as JSON text, indented one space a level; loads back to `doc`."""
    out: list[str] = []
    _write(doc, 0, out)
    return "".join(out)


class _Chunks(list):
    """A list of text pieces that writes itself to `stream` every CHUNK pieces,
    so that a document of 25 MB is never held whole as text too."""

    CHUNK = 1 << 14

    def __init__(self, stream: IO[str]) -> None:
        super().__init__()
        self.stream = stream

    def append(self, piece: str) -> None:
        super().append(piece)
        if len(self) >= self.CHUNK:
            self.flush()

    def flush(self) -> None:
        self.stream.write("".join(self))
        self.clear()


def write_json(doc: Any, stream: IO[str]) -> None:
    """json_text(doc) and a newline, written to `stream` piece by piece."""
    out = _Chunks(stream)
    _write(doc, 0, out)
    out.append("\n")
    out.flush()


def _write(x: Any, depth: int, out: list[str]) -> None:
    if not isinstance(x, dict | list | tuple) or not x:
        out.append(_COMPACT(x))
        return
    if isinstance(x, list | tuple) and not any(isinstance(v, dict | list | tuple) for v in x):
        out.append(_COMPACT(x))  # a list of numbers (a team, a mesh's ids): one line, however long
        return
    if len(x) <= FEW:  # a device's block, a move, a team: one line where it fits
        compact = _COMPACT(x)
        if len(compact) <= INLINE:
            out.append(compact)
            return
    inner = "\n" + " " * (depth + 1)
    is_map = isinstance(x, dict)
    out.append("{" if is_map else "[")
    for i, (key, value) in enumerate(x.items() if is_map else enumerate(x)):
        out.append(("," if i else "") + inner)
        if is_map:
            out.append(_KEY(str(key)) + ": ")
        _write(value, depth + 1, out)
    out.append("\n" + " " * depth + ("}" if is_map else "]"))
