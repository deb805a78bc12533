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

from refir.explain.device_sets import devices_text
from refir.explain.placement import Block, Placement, Range
from refir.ir.types import DIDS, Mesh, Runs, parts_of
from refir.text.printer import format_mesh

PALETTE = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta")


def span(r: Range) -> str:
    """`a:b`, or `empty` for a block with no element (an uneven cut's tail)."""
    a, b = r
    return f"{a}:{b}" if b > a else "empty"


def run_span(runs: Runs) -> str:
    """An interleaved block's runs (§3.4): `0:1+4:5`, in buffer order."""
    return "+".join(span(r) for r in runs) if runs else "empty"


def block_spans(b: Block) -> str:
    """The device's global block: its ranges, or each axis's runs where interleaved."""
    if b.runs is None:
        return spans(b.ranges)
    return "[" + ", ".join(run_span(r) for r in b.runs) + "]" + (" (no elements)" if b.empty else "")


def spans(ranges: tuple[Range, ...]) -> str:
    if not ranges:
        return "[] (a scalar)"
    text = "[" + ", ".join(span(r) for r in ranges) + "]"
    return text + " (no elements)" if any(b <= a for a, b in ranges) else text


def ints(xs: tuple[int, ...] | list[int]) -> str:
    return "[" + ", ".join(map(str, xs)) + "]"


def mesh_text(p: Placement) -> str:
    m = p.type.mesh
    names = [d for d in DIDS if m.has(d)][::-1]  # outermost mesh axis first
    axes = " x ".join(f"{n}={m.size(n)}" for n in names)
    return f"{mesh_listing(m).replace(' = ', ' ')} ({axes})"


def mesh_listing(m: Mesh) -> str:
    """A mesh as the program writes it; past DEVICES_LISTED devices its shape and its
    ids as runs (`mesh m = 16x16x16 of devices (0..4095)`, in mesh order)."""
    if len(m.devices) <= DEVICES_LISTED:
        return format_mesh(m)
    return f"mesh {m.name} = {'x'.join(map(str, m.shape))} of devices {devices_text(m.devices)}, in mesh order"


def holder_text(p: Placement, devices: tuple[int, ...]) -> str:
    """Who holds one block: one device, copies, or terms of a partial value."""
    t = p.type
    if not t.partial:
        return "dev " + devices_text(devices, 8)[1:-1] + (" (copies)" if len(devices) > 1 else "")
    # Devices that differ only on partial mesh axes hold terms of one sum.
    keep = [i for i in range(t.mesh.ndim) if i not in {t.mesh.axis_of(k) for k in t.partial}]
    sums: dict[tuple[int, ...], list[int]] = {}
    for d in devices:
        c = t.mesh.coords(d)
        sums.setdefault(tuple(c[i] for i in keep), []).append(d)
    terms = ", ".join("+".join(map(str, ds)) if len(ds) <= 8 else f"{ds[0]}+{ds[1]}+...+{ds[-1]} [{len(ds)} terms]"
                      for ds in list(sums.values())[:2 if len(sums) > 4 else 4])
    if len(sums) > 4:
        terms += f", ... [{len(sums)} sums]"
    return f"dev {terms} (partial {t.partial_kind}{', copies' if len(sums) > 1 else ''})"


MOVES_LISTED = 64  # explain lists a communication's moves one by one up to this many (or --moves all)
DEVICES_LISTED = 64  # and each device (its bytes, its block) up to this many devices
GRID_BLOCKS = 8  # past this many blocks, an axis of a grid shows its first 4 and last 2
GRID_PAGES = 3  # past this many pages (blocks of a third sharded axis), the first 2 and the last


def shown_blocks(count: int, most: int = GRID_BLOCKS) -> list[int | None]:
    """Which blocks of an axis a picture draws: all, or past `most` the first
    ones and the last two around a gap (None) that says how many it leaves out."""
    if count <= most:
        return list(range(count))
    head = max(1, most - 4)
    return [*range(head), None, count - 2, count - 1]


def shown_pages(pages: list[dict[int, int]]) -> list[dict[int, int] | None]:
    kept = shown_blocks(len(pages), GRID_PAGES)
    return [None if k is None else pages[k] for k in kept]


def left_out(count: int, most: int = GRID_BLOCKS) -> int:
    """How many blocks shown_blocks leaves out."""
    return count - sum(k is not None for k in shown_blocks(count, most))


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
        pages = [{sharded[2]: n} for n in range(parts_of(t.mesh, t.axes[sharded[2]]))]
    return rows, cols, pages


def grid(p: Placement, focus: int | None = None) -> RenderableType:
    """The sharded axes as a grid of blocks (first sharded axis down, second
    across, a third as one grid per block); each cell names its holders."""
    t = p.type
    rows, cols, pages = grid_axes(p)
    holders = p.holders()
    ranges_of = {(i, n[i]): r[i] for n, r, _ in holders for i in n}
    runs_of = {(i, n[i]): p.block(ds[0]).runs[i] for n, _, ds in holders for i in n  # type: ignore[index]
               if t.axes[i].split}

    def axis_span(axis: int, number: int) -> str:
        got = runs_of.get((axis, number))
        return span(ranges_of[axis, number]) if got is None else run_span(got)

    by_number = {tuple(sorted(n.items())): k for k, (n, _, _) in enumerate(holders)}

    def cell(fixed: dict[int, int]) -> Text:
        k = by_number.get(tuple(sorted(fixed.items())))
        if k is None:
            return Text("-")
        _, ranges, ds = holders[k]
        text = Text(holder_text(p, ds) + (" (empty)" if any(b <= a for a, b in ranges) else ""),
                    style=PALETTE[k % len(PALETTE)])
        if focus in ds:
            text.stylize("bold reverse")
        return text

    def count(axis: int | None) -> int:
        return 1 if axis is None else parts_of(t.mesh, t.axes[axis])

    elided = any(a is not None and count(a) > GRID_BLOCKS for a in (rows, cols))

    def label(axis: int, number: int | None) -> str:
        if number is None:
            return f"+{left_out(count(axis))}"
        # an elided grid names its axes once, in its title, so that no label is cut
        return axis_span(axis, number) if elided and axis in (rows, cols) else \
            f"axis {axis} {axis_span(axis, number)}"

    def numbers(axis: int | None) -> list[int | None]:
        return [None] if axis is None else shown_blocks(count(axis))

    tables: list[RenderableType] = []
    for page in shown_pages(pages):
        if page is None:
            tables.append(Text(f"... {left_out(len(pages), GRID_PAGES)} more grids, one per block of axis "
                               f"{next(iter(pages[0]))}", style="dim"))
            continue
        title = ", ".join(label(a, n) for a, n in page.items()) or None
        if elided:
            axes = ", ".join(f"{what}: axis {a} ({count(a)} blocks, +k: k left out)"
                             for what, a in (("down", rows), ("across", cols)) if a is not None)
            title = f"{title}; {axes}" if title else axes
        table = Table(box=box.SQUARE, show_lines=True, title=title, title_justify="left",
                      show_header=cols is not None)
        if rows is not None:
            table.add_column("", no_wrap=True, min_width=max(len(label(rows, r)) for r in numbers(rows)))
        for c in numbers(cols):
            # an elided grid wraps a long holder list inside its cell rather than cut it
            table.add_column(label(cols, c) if cols is not None else "", no_wrap=not elided,
                             overflow="fold" if elided else "ellipsis")
        for r in numbers(rows):
            cells = []
            for c in numbers(cols):
                if (r is None and rows is not None) or (c is None and cols is not None):
                    cells.append(Text("...", style="dim"))
                    continue
                fixed = dict(page)
                if r is not None and rows is not None:
                    fixed[rows] = r
                if c is not None and cols is not None:
                    fixed[cols] = c
                cells.append(cell(fixed))
            table.add_row(*([label(rows, r)] if rows is not None else []), *cells)
        tables.append(table)
    return Group(*tables)


DEVICE_ROWS = (8, 4)  # past DEVICES_LISTED devices a value's table shows its first 8 and last 4


def device_table(p: Placement, devices: list[int] | None = None) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name in ("device", "coords", "global block", "local shape", "byte strides"):
        table.add_column(name, no_wrap=True)
    blocks = [b for b in p.blocks if devices is None or b.device in devices]
    head, tail = DEVICE_ROWS
    gap = len(blocks) - head - tail if len(blocks) > DEVICES_LISTED else 0
    for i, b in enumerate(blocks):
        if gap and i == head:
            table.add_row(*["..."] * 5)
        if gap and head <= i < head + gap:
            continue
        table.add_row(str(b.device), ints(b.coords), block_spans(b), ints(b.local_shape), strides_text(p, b))
    if gap:
        table.caption = f"{gap:,} more devices: --device D shows one, --json lists every one"
        table.caption_justify = "left"
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
