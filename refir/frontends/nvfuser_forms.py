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
  writes through `X` (a stream's view of the output): read as `Y = X`;
- a scheduled kernel's TensorView (`iblockIdx.x14{...}, ithreadIdx.x15{128}`: its loop
  domain, merged and split for the kernel) printed with its transforms (`fusion->print()`,
  `print_transforms()`): read as its ` logical domain : (...)` line says, each logical
  domain that an `Outer split:` line splits over a device printed as that device domain
  and the inner one (the loop domain before scheduling) (`logical_views`);
- a TensorView whose axis is split into heads and its heads over a device (`Split: iS1{24}
  by factor 6 -> iS5{4}, iS6{6}`, `Outer split: iS5{4} by factor 2 -> ideviceIdx.x7{2},
  iS8{2}`: nvFuser propagates a view's head split back to the view's operand), its loop
  domain in any order: read by its logical domain too, the axis in blocks of whole heads
  (`logical_views`; the devices must divide the heads).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import combinations
from typing import Any

from refir.errors import ParseError
from refir.frontends.nvfuser_axes import extent_text
from refir.frontends.nvfuser_dump import Call, Domain, Dump, Statement, TVRef


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


def logical_views(d: Dump, notes: list[str]) -> None:
    """Every printing of a scheduled TensorView, or of one whose heads are split over a
    device, read as its logical domain with its device splits (see the module doc); its
    device domains must be the loop domain's, or the device split is one of the scheduler's
    own (refused)."""
    read: dict[str, tuple[Domain, ...]] = {}
    heads = {dev.number for h, (dev, _) in d.device_splits.items() if h in d.plain_splits}
    scheduled: set[str] = set()

    def view(r: TVRef) -> TVRef:
        split_heads = next((dom for dom in r.domains if dom.number in heads), None)
        if not r.name or (split_heads is None and not any(dom.scheduled for dom in r.domains)):
            return r
        if r.name in d.logical_errors and r.name not in d.logical:
            raise d.logical_errors[r.name]
        if r.name not in d.logical and split_heads is not None:
            raise ParseError(split_heads.loc, f"cannot map {r.name}: its {split_heads.text} splits the heads of a "
                             "split axis over the devices, and its ` logical domain : (...)` line, which says "
                             "which axis, is not printed (print it with its transforms: fusion->print(), "
                             "fd.fusion.print_transforms())")
        if r.name not in d.logical:
            return r  # refused where its axes are read (nvfuser_axes.logical_axes), asking for the transforms
        if r.name not in read:
            printed = {dom.number for dom in r.domains if dom.device}
            domains = tuple(x for dom in d.logical[r.name] for x in _device_split(dom, d, printed))
            if printed != {dom.number for dom in domains if dom.device}:
                shown = ", ".join(dom.text for dom in r.domains if dom.device) or "none"
                what = "the scheduled " if split_heads is None else ""
                raise ParseError(r.loc, f"cannot map {what}{r.name}: its loop domain's device domains "
                                 f"({shown}) are not the device splits of its logical domain's axes that the "
                                 "transforms print (`Outer split: ... -> ideviceIdx.x...`)")
            read[r.name] = domains
            if split_heads is None:
                scheduled.add(r.name)
        return replace(r, domains=read[r.name])

    for i, s in enumerate(d.statements):
        expr = s.expr
        if isinstance(expr, TVRef):
            expr = view(expr)
        else:
            expr = replace(expr, args=tuple(view(a) if isinstance(a, TVRef) else a for a in expr.args))
        d.statements[i] = replace(s, out=view(s.out), expr=expr)
    d.inputs, d.outputs, d.mentions = ([view(r) for r in refs] for refs in (d.inputs, d.outputs, d.mentions))
    if scheduled:
        notes.append(f"{_names(scheduled)}: printed as a scheduled kernel's loop domain (blockIdx, threadIdx...); "
                     "read as the logical domain the transforms print, each axis split over a device sharded on it")
    if set(read) - scheduled:
        notes.append(f"{_names(set(read) - scheduled)}: an axis split into heads whose heads are split over the "
                     "devices (the split of a view propagated to its operand); read as the logical domain the "
                     "transforms print, that axis sharded in blocks of whole heads")


def _names(names: set[str]) -> str:
    return ", ".join(sorted(names, key=lambda n: (len(n), n)))


def _device_split(dom: Domain, d: Dump, printed: set[int]) -> list[Domain]:
    """A logical domain as the loop domain before scheduling shows it: a device domain and
    the inner one where an `Outer split:` splits it over a device (nested splits in turn),
    or where it is split into heads and its heads over a device whose domain is `printed`
    (nvFuser's head split: the axis in blocks of whole heads, as if split over the device)."""
    direct = d.device_splits.get(dom.number)
    if direct is None or direct[0].number not in printed:
        heads = _head_split(dom, d)
        if heads is not None:
            return heads
    if direct is None:
        return [dom]
    outer, inner = direct
    if inner.scheduled:  # parallelized itself (`iblockIdx.x7{...}`): serial before scheduling
        inner = replace(inner, text=f"{inner.kind}S{inner.number}", ptype="S",
                        extent=("ceilDiv", dom.extent, outer.extent))
    return [outer, *_device_split(inner, d, printed)]


def _head_split(dom: Domain, d: Dump) -> list[Domain] | None:
    """[the device domain, the rest of dom] where dom is split into heads and heads
    (the split's outer part) over a device: device k holds heads k H/n to (k + 1) H/n - 1,
    the block k of dom split over n devices, where n divides H (checked); else None."""
    split = next(((h, inner) for h, (whole, inner) in d.plain_splits.items()
                  if whole.number == dom.number and h in d.device_splits), None)
    if split is None:
        return None
    h, inner = split
    dev, per = d.device_splits[h]
    count = d.splits[per.number]  # the heads' extent, which the device split splits
    if not (isinstance(count, int) and isinstance(dev.extent, int) and count % dev.extent == 0):
        raise ParseError(dev.loc, f"cannot map {dev.text!r}: it splits the heads of {dom.text} ({extent_text(count)}) "
                         f"over {extent_text(dev.extent)} devices, which refir reads as {dom.text} in blocks of whole "
                         "heads only where the devices divide a static head count (else a block cuts through a head)")
    rest = replace(inner, text=f"{inner.kind}S{inner.number}", ptype="S", extent=("ceilDiv", dom.extent, dev.extent))
    return [dev, rest]


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
