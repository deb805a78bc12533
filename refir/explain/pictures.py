"""Pictures of placements and communications, as rich renderables.

A placement is drawn as a grid over the tensor's sharded axes (rows: the first
sharded axis, columns: the second, one grid per block of a third), each cell
naming the devices that hold that block (axes not sharded are whole in every
block). A table then lists every device's global index ranges, local shape
and byte strides. Colour only repeats what the text says.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from refir.explain.placement import RULES, Block, CommFacts, Placement, Range, StepFacts
from refir.ir import ops
from refir.ir.types import DIDS
from refir.text.printer import format_call, format_mesh

PALETTE = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta")


def span(r: Range) -> str:
    """`a:b`, or `empty` for a block with no element (an uneven cut's tail)."""
    a, b = r
    return f"{a}:{b}" if b > a else "empty"


def spans(ranges: tuple[Range, ...]) -> str:
    if not ranges:
        return "[] (a scalar)"
    text = "[" + ", ".join(span(r) for r in ranges) + "]"
    return text + " (no elements)" if any(b <= a for a, b in ranges) else text


def ints(xs: tuple[int, ...] | list[int]) -> str:
    return "[" + ", ".join(map(str, xs)) + "]"


def devices_text(ds: tuple[int, ...] | list[int]) -> str:
    return "(" + " ".join(map(str, ds)) + ")"


def mesh_text(p: Placement) -> str:
    m = p.type.mesh
    names = [d for d in DIDS if m.has(d)][::-1]  # outermost mesh axis first
    axes = " x ".join(f"{n}={m.size(n)}" for n in names)
    return f"{format_mesh(m).replace(' = ', ' ')} ({axes})"


def holder_text(p: Placement, devices: tuple[int, ...]) -> str:
    """Who holds one block: one device, copies, or terms of a partial value."""
    t = p.type
    if not t.partial:
        return "dev " + " ".join(map(str, devices)) + (" (copies)" if len(devices) > 1 else "")
    # Devices that differ only on partial mesh axes hold terms of one sum.
    keep = [i for i in range(t.mesh.ndim) if i not in {t.mesh.axis_of(k) for k in t.partial}]
    sums: dict[tuple[int, ...], list[int]] = {}
    for d in devices:
        c = t.mesh.coords(d)
        sums.setdefault(tuple(c[i] for i in keep), []).append(d)
    terms = ", ".join("+".join(map(str, ds)) for ds in sums.values())
    return f"dev {terms} (partial {t.partial_kind}{', copies' if len(sums) > 1 else ''})"


@dataclass(frozen=True)
class GridPicture:
    """The grid of a placement: drawn as text tables by rich (`grid`), and as
    cells in proportion to their blocks by refir.explain.svg (refir.explain.drawing)."""

    placement: Placement
    focus: int | None = None

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield grid(self.placement, self.focus)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, grid(self.placement, self.focus))


def grid_axes(p: Placement) -> tuple[int | None, int | None, list[dict[int, int]]]:
    """Which tensor axis runs down the grid, which across, and the pages (one
    per block of a third sharded axis, each fixing that axis's block number)."""
    t = p.type
    sharded = [i for i, a in enumerate(t.axes) if a.shard]
    rows = sharded[0] if len(sharded) > 1 else None
    cols = sharded[1] if len(sharded) > 1 else sharded[0] if sharded else None
    pages: list[dict[int, int]] = [{}]
    if len(sharded) > 2:
        pages = [{sharded[2]: n} for n in range(t.mesh.size(t.axes[sharded[2]].shard))]
    return rows, cols, pages


def grid(p: Placement, focus: int | None = None) -> RenderableType:
    """The sharded axes as a grid of blocks (first sharded axis down, second
    across, a third as one grid per block); each cell names its holders."""
    t = p.type
    rows, cols, pages = grid_axes(p)
    holders = p.holders()
    ranges_of = {(i, n[i]): r[i] for n, r, _ in holders for i in n}

    def cell(fixed: dict[int, int]) -> Text:
        found = [(k, r, ds) for k, (n, r, ds) in enumerate(holders) if all(n[i] == v for i, v in fixed.items())]
        if not found:
            return Text("-")
        k, ranges, ds = found[0]
        text = Text(holder_text(p, ds) + (" (empty)" if any(b <= a for a, b in ranges) else ""),
                    style=PALETTE[k % len(PALETTE)])
        if focus in ds:
            text.stylize("bold reverse")
        return text

    def label(axis: int, number: int) -> str:
        return f"axis {axis} {span(ranges_of[axis, number])}"

    def numbers(axis: int | None) -> list[int | None]:
        return [None] if axis is None else list(range(t.mesh.size(t.axes[axis].shard)))

    tables = []
    for page in pages:
        title = ", ".join(label(a, n) for a, n in page.items()) or None
        table = Table(box=box.SQUARE, show_lines=True, title=title, title_justify="left",
                      show_header=cols is not None)
        if rows is not None:
            table.add_column("", no_wrap=True)
        for c in numbers(cols):
            table.add_column(label(cols, c) if cols is not None and c is not None else "", no_wrap=True)
        for r in numbers(rows):
            cells = []
            for c in numbers(cols):
                fixed = dict(page)
                if r is not None and rows is not None:
                    fixed[rows] = r
                if c is not None and cols is not None:
                    fixed[cols] = c
                cells.append(cell(fixed))
            table.add_row(*([label(rows, r)] if rows is not None and r is not None else []), *cells)
        tables.append(table)
    return Group(*tables)


def device_table(p: Placement, devices: list[int] | None = None) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name in ("device", "coords", "global block", "local shape", "byte strides"):
        table.add_column(name, no_wrap=True)
    for b in p.blocks:
        if devices is None or b.device in devices:
            table.add_row(str(b.device), ints(b.coords), spans(b.ranges), ints(b.local_shape), strides_text(p, b))
    return table


def strides_text(p: Placement, b: Block) -> str:
    return ("any; nominal " if p.is_input and p.type.layout is None else "") + ints(b.byte_strides)


def value_header(p: Placement) -> Text:
    text = Text()
    text.append(p.name, style="bold")
    text.append(f": {p.type}\n  global {ints(list(p.shape))} over {mesh_text(p)}")
    whole = [str(i) for i, a in enumerate(p.type.axes) if not a.shard]
    if whole and len(whole) < p.type.rank:
        text.append(f"\n  axis {', '.join(whole)} whole in every block")
    notes = []
    if p.type.partial:
        notes.append(f"partial: devices along {', '.join(p.type.partial)} hold terms of a {p.type.partial_kind} "
                     "not yet reduced")
    if p.is_input and p.type.layout is None:
        notes.append("an input with no layout: any strides accepted")
    if notes:
        text.append("\n  " + "\n  ".join(notes), style="italic")
    return text


def value_picture(p: Placement, device: int | None = None, idle: list[int] | None = None) -> Group:
    parts: list[RenderableType] = [value_header(p), GridPicture(p, device)]
    parts.append(device_table(p, None if device is None else [device]))
    if idle:
        parts.append(Text(f"devices {devices_text(idle)} are outside mesh {p.type.mesh.name} and hold nothing",
                          style="dim"))
    return Group(*parts)


def comm_picture(c: CommFacts, device: int | None = None) -> Group:
    parts: list[RenderableType] = [Text(f"why {c.kind}: {c.rule}", style="bold")]
    parts += [Text(f"  {x}") for x in c.changes]
    for team in c.teams:
        roles = "" if team.senders == team.receivers == team.devices else (
            f" senders {devices_text(team.senders)} receivers {devices_text(team.receivers)}")
        parts.append(Text(f"  team {devices_text(team.devices)}{roles}"))
    moves = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title="moves", title_justify="left")
    for name in ("from", "to", "global block", "bytes each"):
        moves.add_column(name, no_wrap=True)
    grouped: dict[tuple, list[int]] = {}
    for tr in c.transfers:
        if device is None or device in (tr.sender, tr.receiver):
            grouped.setdefault((tr.sender, tr.ranges, tr.nbytes), []).append(tr.receiver)
    for (s, ranges, n), receivers in grouped.items():
        moves.add_row(str(s), " ".join(map(str, receivers)), spans(ranges), str(n))
    if not grouped:
        parts.append(Text("  nothing moves between devices", style="dim"))
    else:
        parts.append(moves)
    totals = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name in ("device", "sends B", "receives B"):
        totals.add_column(name, justify="right", no_wrap=True)
    for d in c.devices():
        if device is None or d == device:
            sent, got = c.bytes_of(d)
            totals.add_row(str(d), str(sent), str(got))
    parts.append(totals)
    return Group(*parts)


def step_line(s: StepFacts) -> Text:
    text = Text()
    text.append(f"{s.step.out} = {s.call}", style="bold")
    e = s.step.eqn
    if s.step.out != e.out or s.comm:
        text.append(f"\n  lowered from {e.out} = {format_call(e.op, e.args)} at {e.loc}", style="dim")
    return text


def step_picture(s: StepFacts, device: int | None = None, idle: list[int] | None = None) -> Group:
    parts: list[RenderableType] = [step_line(s)]
    if s.comm is not None:
        parts.append(comm_picture(s.comm, device))
    else:
        t = s.placement.type
        rule = _local_rule(s)
        if rule:
            parts.append(Text(rule, style="italic"))
        parts.append(Text(f"local step on {devices_text(list(t.mesh.devices))}, layout {ints(list(t.order))}"
                          + ("" if t.layout is not None else " (row-major)")))
    parts.append(value_picture(s.placement, device, idle))
    return Group(*parts)


def _local_rule(s: StepFacts) -> str:
    if isinstance(s.step.op, ops.Slice):
        return "why slice: " + RULES[ops.Slice]
    if isinstance(s.step.op, ops.Copy):
        return "why copy: same placement, another layout"
    if isinstance(s.step.op, ops.Reshape) and s.placement.type.sharding():
        return ("why local: reshape keeps every device's elements: its block of the operand is its block of the "
                "result, whole rows of each split or merge (spec §5.9)")
    return ""

