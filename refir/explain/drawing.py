"""A placement's grid as geometry: cells sized in proportion to the blocks they
show, in pixels, for refir.explain.svg to draw (the text grid is refir.explain.pictures.grid).

Columns are the blocks of the axis drawn across, rows those of the axis drawn
down (refir.explain.pictures.grid_axes picks them), each as wide or as tall as its
block has elements, so an uneven cut's short blocks come out visibly smaller;
an empty block is a narrow strip, dashed. Which blocks of an axis are drawn,
and how wide, is decided in `axis_sizes` alone: folding or eliding the blocks
of a large mesh belongs there.
"""

from __future__ import annotations

from dataclasses import dataclass

from refir.explain.pictures import GRID_PAGES, grid_axes, holder_text, left_out, shown_blocks, shown_pages, span
from refir.explain.placement import Placement, Range
from refir.ir.types import parts_of

FONT = 12  # px
CHAR = 0.6 * FONT  # the advance of one character of a monospace font
LINE = 16  # px from one baseline to the next
PAD = 6
EMPTY = 20  # px across an empty block
TARGET = (360, 120)  # (across, down): the least a grid spans, px
CAP = (960, 640)  # the most it spans in proportion; smaller blocks are then clamped


@dataclass(frozen=True)
class Cell:
    """One block: its rectangle, who holds it and what it covers."""

    x: float
    y: float
    w: float
    h: float
    devices: tuple[int, ...]
    ranges: tuple[Range, ...]
    number: tuple[tuple[int, int], ...]  # (sharded tensor axis, block number)
    lines: tuple[str, ...]  # the label, wrapped to the cell
    colour: int  # which distinct block (an index into the palette)
    empty: bool
    focus: bool  # holds the device asked for (--device)
    vertical: bool  # the label runs upwards (a narrow strip)


@dataclass(frozen=True)
class Label:
    x: float
    y: float  # of the baseline (of the left end, for vertical text)
    text: str
    anchor: str  # start, middle or end
    vertical: bool = False
    bold: bool = False


@dataclass(frozen=True)
class GridDrawing:
    width: float
    height: float
    cells: tuple[Cell, ...]
    labels: tuple[Label, ...]


def text_width(text: str) -> float:
    return len(text) * CHAR


def axis_sizes(extents: list[int], least: float, target: float, cap: float) -> list[float]:
    """Pixels for each block of an axis, in proportion to its extent: the
    smallest non-empty block gets at least `least`, the whole at least
    `target`, and at most `cap` (past which blocks under `least` are clamped)."""
    full = [n for n in extents if n > 0]
    if not full:
        return [max(least, EMPTY) for _ in extents]
    total = sum(full)
    scale = max(least / min(full), target / total)
    if scale * total > cap:
        scale = max(cap, least) / total
    return [EMPTY if n == 0 else max(least, n * scale) for n in extents]


def wrap(text: str, chars: int) -> tuple[str, ...]:
    """Words into lines of at most `chars` (a longer word gets a line of its
    own); a note in parentheses starts a line of its own where all does not fit."""
    if len(text) <= chars:
        return (text,)
    head, paren, note = text.partition(" (")
    lines: list[str] = []
    for part in ([head, paren.strip() + note] if paren else [text]):
        start = len(lines)
        for word in part.split(" "):
            if len(lines) > start and len(lines[-1]) + 1 + len(word) <= chars:
                lines[-1] += " " + word
            else:
                lines.append(word)
    return tuple(lines)


GAP = 3 * FONT  # px across the gap that stands for the blocks a large grid leaves out


def grid_drawing(p: Placement, focus: int | None = None) -> GridDrawing:
    """The grid's pages one below another, each titled by its block of a third sharded
    axis. Past GRID_BLOCKS blocks an axis, or GRID_PAGES pages, the middle ones are left
    out (refir.explain.pictures.shown_blocks), a gap labelled with how many: cells stay whole."""
    rows, cols, pages = grid_axes(p)
    holders = p.holders()
    ranges_of = {(i, n[i]): r[i] for n, r, _ in holders for i in n}
    by_number = {tuple(sorted(n.items())): k for k, (n, _, _) in enumerate(holders)}

    def ids(axis: int | None) -> list[int | None]:
        return [0] if axis is None else shown_blocks(parts_of(p.type.mesh, p.type.axes[axis]))

    def count(axis: int) -> int:
        return parts_of(p.type.mesh, p.type.axes[axis])

    def extents(axis: int | None) -> list[int]:
        if axis is None:
            return [1]
        return [b - a for a, b in (ranges_of[axis, k] for k in ids(axis) if k is not None)]

    def sizes(axis: int | None, least: float, target: float, cap: float) -> list[float]:
        """Pixels per shown block, GAP where the left-out ones stand."""
        shown = iter(axis_sizes(extents(axis), least, target, cap))
        return [GAP if k is None else next(shown) for k in ids(axis)]

    texts = [holder_text(p, ds) + (" (empty)" if any(b <= a for a, b in r) else "") for _, r, ds in holders]
    least_w = max(6, *(len(w) for t in texts for w in t.split(" "))) * CHAR + 2 * PAD
    col_ids, row_ids = ids(cols), ids(rows)
    widths = sizes(cols, least_w, *((TARGET[0], CAP[0]) if cols is not None else (0, 0)))
    if cols is None:  # one block across: as wide as its label
        widths = [max(widths[0], min(text_width(max(texts, key=len)) + 2 * PAD, CAP[0]))]

    def holder(fixed: dict[int, int]) -> int:
        return by_number[tuple(sorted(fixed.items()))]

    def fixed_of(page: dict[int, int], r: int | None, c: int | None) -> dict[int, int]:
        fixed = dict(page)
        if rows is not None and r is not None:
            fixed[rows] = r
        if cols is not None and c is not None:
            fixed[cols] = c
        return fixed

    def block_extent(axis: int, k: int) -> int:
        a, b = ranges_of[axis, k]
        return b - a

    kept_pages = shown_pages(pages)
    # Labels wrapped to their columns; the rows are then tall enough for the tallest.
    need = (LINE + 2 * PAD) if rows is not None else 40.0  # one row: a band, not a line
    for page in kept_pages:
        for r in row_ids:
            for c, w in zip(col_ids, widths):
                if page is None or r is None or c is None:
                    continue
                text = texts[holder(fixed_of(page, r, c))]
                if cols is not None and block_extent(cols, c) == 0:
                    need = max(need, text_width(text) + 2 * PAD)
                else:
                    need = max(need, len(wrap(text, int((w - 2 * PAD) // CHAR))) * LINE + 2 * PAD)
    heights = sizes(rows, need, *((TARGET[1], CAP[1]) if rows is not None else (0, 0)))

    def head_text(c: int | None) -> str:
        return f"+{left_out(count(cols))}" if c is None else span(ranges_of[cols, c])  # type: ignore[arg-type]

    head = [head_text(c) for c in col_ids] if cols is not None else []
    band = max([LINE] + [text_width(t) + PAD for t, w in zip(head, widths) if text_width(t) > w - 2]) + PAD
    side = 0.0 if rows is None else max(text_width(f"axis {rows}"), *(
        text_width(f"+{left_out(count(rows))}" if r is None else span(ranges_of[rows, r])) for r in row_ids)) + 2 * PAD
    cells: list[Cell] = []
    labels: list[Label] = []
    y = 0.0
    for page in kept_pages:
        if page is None:
            labels.append(Label(0, y + FONT, f"... {left_out(len(pages), GRID_PAGES)} more grids, one per block of "
                                f"axis {next(iter(pages[0]))}", "start"))
            y += 2 * LINE
            continue
        if page:
            title = ", ".join(f"axis {a} {span(ranges_of[a, n])}" for a, n in page.items())
            labels.append(Label(0, y + FONT, title, "start", bold=True))
            y += LINE + PAD
        top = y
        if cols is not None:
            labels.append(Label(side + sum(widths) / 2, y + FONT, f"axis {cols}", "middle", bold=True))
            y += LINE
            x = side
            for text, w in zip(head, widths):
                upright = text_width(text) <= w - 2
                labels.append(Label(x + w / 2, y + band - PAD, text, "middle") if upright else
                              Label(x + w / 2 + FONT / 3, y + band - PAD, text, "start", vertical=True))
                x += w
            y += band
        if rows is not None:
            labels.append(Label(PAD, top + FONT, f"axis {rows}", "start", bold=True))
        for r, h in zip(row_ids, heights):
            if rows is not None:
                text = f"+{left_out(count(rows))}" if r is None else span(ranges_of[rows, r])
                labels.append(Label(side - PAD, y + h / 2 + FONT / 3, text, "end"))
            x = side
            for c, w in zip(col_ids, widths):
                if r is None or c is None:  # the gap: a mark where the left-out blocks stand
                    labels.append(Label(x + w / 2, y + h / 2 + FONT / 3, "...", "middle"))
                    x += w
                    continue
                k = holder(fixed_of(page, r, c))
                number, ranges, ds = holders[k]
                empty = any(b <= a for a, b in ranges)
                vertical = cols is not None and block_extent(cols, c) == 0
                text = texts[k]
                lines = (text,) if vertical else wrap(text, int((w - 2 * PAD) // CHAR))
                cells.append(Cell(x, y, w, h, ds, ranges, tuple(sorted(number.items())), lines, k, empty,
                                  focus in ds, vertical))
                x += w
            y += h
        y += LINE
    width = side + sum(widths)
    width = max([width] + [text_width(lb.text) for lb in labels if lb.anchor == "start" and not lb.vertical])
    return GridDrawing(width, y - LINE, tuple(cells), tuple(labels))
