"""The builder's checks of its calls: axis specs, where a call stands in the
caller's Python (an error in a built program names the caller's `file:line`, not
`<built>:0:0`), and the parser's limits (a type the builder accepts prints as text
the parser reads back)."""

from __future__ import annotations

import functools
import linecache
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from refir.checks.limits import check_static
from refir.errors import NOWHERE, InputError, Loc, ParseError, VerifyError
from refir.ir.types import BROADCAST, Axis, Extent, TensorType

OWN = {__file__}  # the builder's modules: their frames are skipped (refir/frontends/builder.py adds itself)
_PACKAGE = str(Path(__file__).parent) + os.sep  # refir's own modules
F = TypeVar("F", bound=Callable[..., object])

AxisSpec = int | str  # 4, "N", "N@DIDx", "E/4@DIDx", "8@DIDy", "8@(DIDy,DIDx)", "b"
_DID = r"DID[xyz](?::\d+)?"  # a mesh axis, maybe with a split factor (spec §3.4)
_AXIS = re.compile(rf"^([\w*/]+)(?:@({_DID}|\({_DID}(?:,{_DID})+\)))?$")


def axis(spec: AxisSpec | Axis) -> Axis:
    """`4`, `"N"`, `"N@DIDx"`, `"E/4@DIDx"` (an expression), `"N@(DIDy,DIDx)"` (a nest),
    `"N@DIDx:2"`, `"N@(DIDy:2,DIDx)"` (split factors, §3.4) or `"b"` as an Axis."""
    if isinstance(spec, Axis):
        return spec
    if isinstance(spec, int):
        return Axis(spec)
    if spec == "b":
        return BROADCAST
    m = _AXIS.match(spec.replace(" ", ""))
    if m is None:
        raise InputError(f"bad axis {spec!r}: write 4, 'N', 'N@DIDx', 'N@(DIDy,DIDx)', 'N@DIDx:2' or 'b'")
    extent = builder_extent(m.group(1))
    if not m.group(2):
        return Axis(extent)
    entries = [e.split(":") for e in m.group(2).strip("()").split(",")]
    dids = tuple(e[0] for e in entries)
    split = tuple(int(e[1]) if len(e) > 1 else 1 for e in entries)
    if any(f < 2 for e, f in zip(entries, split) if len(e) > 1):  # type_c8, as the parser says it
        raise InputError(f"bad axis {spec!r}: a split factor is 2 or more (type_c8); write the mesh axis alone for 1")
    return Axis(extent, dids if m.group(2).startswith("(") else dids[0], split=split)


def builder_extent(spec: Extent) -> Extent:
    """An extent the builder is given: an integer, a symbol, an ExtentExpr, or the
    text of one (`"E/4"`, `"4*D"`), read as the parser reads it (type_c9)."""
    if not isinstance(spec, str) or spec.isidentifier():
        return spec
    from refir.text.parser import parse_extent  # the text layer, imported where a string asks for it

    try:
        return parse_extent(spec)
    except (ParseError, VerifyError) as e:
        raise InputError(f"bad extent {spec!r}: {e.message}; write 4, 'N', 'E/4' or '4*D'") from None


def caller() -> Loc:
    """The line of the first frame outside the builder: the user's call. NOWHERE
    when refir itself called the builder (refir.frontends.dtensor, for `redistribute`): then
    the message speaks for itself, and refir's own lines would mislead."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in OWN:
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None or frame.f_code.co_filename.startswith(_PACKAGE):
        return NOWHERE
    file, line = frame.f_code.co_filename, frame.f_lineno
    text = linecache.getline(file, line).rstrip("\n")
    return Loc(file, line, len(text) - len(text.lstrip()) + 1 if text.strip() else 0, text)


def located(method: F) -> F:
    """Errors of a builder method without a place get the caller's line."""

    @functools.wraps(method)
    def wrapper(*args: object, **kw: object) -> object:
        try:
            return method(*args, **kw)
        except VerifyError as exc:
            here = caller()
            if exc.loc.line or not here.line:
                raise
            raise VerifyError(here, exc.label, exc.message) from None
        except InputError as exc:
            here = caller()
            if getattr(exc, "located", False) or not here.line or str(exc).startswith(f"{here}:"):
                raise
            new = InputError(f"{here}: {exc}")
            new.located = True  # type: ignore[attr-defined]
            raise new from None

    return wrapper  # type: ignore[return-value]


def check_limits(t: TensorType, subject: str) -> None:
    """The parser's limits on a type's static extents (refir/checks/limits.py)."""
    check_static([a.extent for a in t.axes], subject)


def flatten(x: object) -> list[int]:
    if isinstance(x, (list, tuple)):
        return [d for item in x for d in flatten(item)]
    return [int(x)]  # type: ignore[call-overload]


def prod(xs: list[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out
