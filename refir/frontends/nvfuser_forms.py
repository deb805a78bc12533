"""Printout forms of real nvFuser logs that need more than one statement to read
(the importer's other modules read one statement at a time):

- a log that prints the same program once per device (a multi-process run logs
  every rank's): imported once, with a note; copies that differ are an error;
- a loop split printed with static extents and no `Outer split:` line
  (`ideviceIdx.x7{2}, iS8{3}`, as nvFuser prints a reduce_scatter's result): it
  reads the same as a logical device axis of extent 2 followed by one of 3, so
  where the plain reading does not fit a statement, the dump is read again with
  the split reading for that statement's TensorViews (`read_splits`), and noted;
- host IR's `X = ShardByStream(Y)` of an output `Y` that only a later statement
  writes through `X` (a stream's view of the output): read as `Y = X`.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
from typing import Any

from refir.errors import ParseError
from refir.frontends.nvfuser_dump import Call, Dump, Statement, TVRef


def one_copy(d: Dump, notes: list[str]) -> None:
    """Keep one copy of a program the log prints once per device (see the module doc)."""
    outs = [s.out.name for s in d.statements]
    if not outs or outs.count(outs[0]) == 1:
        return
    starts = [i for i, n in enumerate(outs) if n == outs[0]]
    copies = [d.statements[a:b] for a, b in zip(starts, [*starts[1:], len(outs)])]
    first = copies[0]
    if len({s.out.name for s in first}) != len(first) or any(c[0].text != first[0].text for c in copies):
        return  # not copies of one program (a host IR view redefined, say): the statements are read as they are
    for k, other in enumerate(copies[1:], 2):
        for a, b in zip(first, other):
            if a.text != b.text:
                raise ParseError(b.out.loc, f"the log prints the program {len(copies)} times (once per device?), "
                                 f"and copy {k} differs from the first here: {_short(b.text)!r} against "
                                 f"{_short(a.text)!r} (line {a.out.loc.line})")
        if len(other) != len(first):
            at = other[-1] if len(other) < len(first) else other[len(first)]
            raise ParseError(at.out.loc, f"the log prints the program {len(copies)} times (once per device?), "
                             f"and copy {k} has {len(other)} statements, the first {len(first)}")
    d.statements = first
    d.inputs = list({r.name: r for r in d.inputs}.values())
    d.outputs = list({r.name: r for r in d.outputs}.values())
    notes.append(f"the log prints the same program {len(copies)} times (once per device, as every rank of a "
                 f"multi-process run logs it): imported once, from line {first[0].out.loc.line}")


def stream_views(d: Dump, notes: list[str]) -> None:
    """`X = ShardByStream(Y)` of a Y no statement defines, where a later statement
    defines X too: X is a view of the output Y; read as `Y = X` after X's definition."""
    defined: dict[str, int] = {}
    for s in d.statements:
        defined[s.out.name] = defined.get(s.out.name, 0) + 1
    out: list[Statement] = []
    pending: dict[str, Statement] = {}
    for s in d.statements:
        call = s.expr
        if (isinstance(call, Call) and call.op == "ShardByStream" and call.args and isinstance(call.args[0], TVRef)
                and call.args[0].name not in defined and defined.get(s.out.name, 0) > 1):
            y = call.args[0]
            pending[s.out.name] = Statement(y, s.out, f"{y.name} = {s.out.name} (from: {_short(s.text)})", s.segment)
            notes.append(f"{s.out.loc}: {s.out.name} = ShardByStream({y.name}) is a stream's view of the output "
                         f"{y.name}, which a later statement writes through {s.out.name}: read as "
                         f"{y.name} = {s.out.name}")
            continue
        out.append(s)
        if s.out.name in pending:
            out.append(pending.pop(s.out.name))
    d.statements = out


def stream_note(d: Dump, notes: list[str]) -> None:
    if any(dom.ptype == "streamIdx" for r in d.mentions for dom in r.domains):
        notes.append("stream-parallel domains (istreamIdx) split an axis over streams: when work runs, not what "
                     "it computes; each is read as the axis it splits")


def read_splits(attempt: Callable[[frozenset[str]], Any]) -> Any:
    """`attempt(static)` imports the dump reading the TensorViews in `static` with
    their static loop splits as one axis. Where a statement does not fit, the
    fewest of its TensorViews that get it to fit when read so join `static` (a
    TensorView tied to them, by a set, may then fail in turn, and joins as
    well); when none do, the first error stands."""
    static: frozenset[str] = frozenset()
    try:
        return attempt(static)
    except ParseError as e:
        first = failed = e
    for _ in range(64):
        names = [n for n in dict.fromkeys(getattr(failed, "tensorviews", [])) if n not in static]
        for size in range(1, len(names) + 1):
            for more in combinations(names, size):
                try:
                    return _noted(attempt(static | set(more)), static | set(more))
                except ParseError as e:
                    if getattr(e, "statement_index", -1) != getattr(failed, "statement_index", -1):
                        static, failed = static | set(more), e
                        break
            else:
                continue
            break
        else:
            raise first
    raise first


def _noted(imported: Any, static: frozenset[str]) -> Any:
    note = (f"{', '.join(sorted(static, key=lambda n: (len(n), n)))}: a device (or stream) domain of static "
            "extent and the static domain numbered after it are read as one split axis (`ideviceIdx.x7{2}, "
            "iS8{3}`: an axis of 6 sharded on DIDx), as the statements need")
    imported.notes.insert(0, note)
    head, _, rest = imported.text.partition("\n")
    imported.text = f"{head}\n# note: {note}\n{rest}"
    return imported


def _short(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."
