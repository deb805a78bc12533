"""explain's pictures as a drawing of their own: SVG (and HTML holding it) of
real rectangles, lines and text, self-contained (a system monospace font
stack, no reference to anything outside the file).

The pictures are the rich renderables refir.explain.pictures builds; they are walked
here, not rendered as terminal text: a grid (refir.explain.pictures.GridPicture)
becomes cells in proportion to its blocks (refir.explain.drawing), a table text
placed column by column with ruled lines, a rule a line, text lines of text
(bold, italic, dim and colour kept). Each table cell and text line is placed
at its own position, so nothing drifts out of line whatever font renders it.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape

from rich.console import Console, Group, RenderableType
from rich.rule import Rule
from rich.style import Style
from rich.table import Table
from rich.text import Text

from refir.explain.drawing import CHAR, FONT, LINE, PAD, GridDrawing, grid_drawing
from refir.explain.pictures import PALETTE, GridPicture

FONTS = "ui-monospace, 'SF Mono', Menlo, Consolas, 'DejaVu Sans Mono', 'Liberation Mono', 'Courier New', monospace"
MARGIN = 12
GAP = 3  # characters between table columns, as rich puts them
NAMESPACE = "http://www.w3.org/2000/svg"  # a name, not a reference: a standalone SVG must declare it
# The palette's colours as (text and outline, cell fill).
COLOURS = {
    "cyan": ("#00838f", "#d5f1f4"), "magenta": ("#9c1f86", "#f6d8f0"), "green": ("#2e7d32", "#d9f2d5"),
    "yellow": ("#8d6e00", "#f8efc4"), "blue": ("#1f4fb0", "#d8e1f8"), "red": ("#b3261e", "#f8d9d6"),
    "bright_cyan": ("#00796b", "#c9f3ee"), "bright_magenta": ("#7b1fa2", "#ecd5f5"),
}
EMPTY_FILL, EMPTY_LINE, INK, DIM = "#f3f3f3", "#888888", "#1a1a1a", "#707070"
_CONSOLE = Console(width=10_000, color_system="truecolor", force_terminal=True, highlight=False, markup=False)


def _num(v: float) -> str:
    return f"{v:.3f}".rstrip("0").rstrip(".")


class Sheet:
    """Elements placed top to bottom; `y` is where the next one goes."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.y = float(MARGIN)
        self.width = 0.0
        self.rules: list[tuple[float, float]] = []  # (y, x where the line starts): drawn to the final width

    def text(self, x: float, baseline: float, segments: Iterable[tuple[str, Style | None]], anchor: str = "start",
             extra: str = "") -> None:
        spans, chars = [], 0
        for text, style in segments:
            if text:
                spans.append(f"<tspan{_style(style)}>{escape(text)}</tspan>" if _style(style) else escape(text))
                chars += len(text)
        if not spans:
            return
        a = "" if anchor == "start" else f' text-anchor="{anchor}"'
        self.parts.append(f'<text x="{_num(x)}" y="{_num(baseline)}"{a}{extra}>{"".join(spans)}</text>')
        self.width = max(self.width, x + (chars * CHAR if anchor == "start" else 0))

    def line(self, x1: float, y1: float, x2: float, y2: float, colour: str = INK, extra: str = "") -> None:
        self.parts.append(f'<line x1="{_num(x1)}" y1="{_num(y1)}" x2="{_num(x2)}" y2="{_num(y2)}" '
                          f'stroke="{colour}"{extra}/>')


def _style(style: Style | None) -> str:
    if style is None:
        return ""
    attrs = []
    colour = None
    if style.color is not None:
        colour = COLOURS[style.color.name][0] if style.color.name in COLOURS else \
            style.color.get_truecolor().hex
    if style.dim:
        colour = DIM
    if colour:
        attrs.append(f'fill="{colour}"')
    if style.bold or style.reverse:  # reverse (the device asked for) as bold, underlined
        attrs.append('font-weight="bold"')
    if style.reverse:
        attrs.append('text-decoration="underline"')
    if style.italic:
        attrs.append('font-style="italic"')
    return (" " + " ".join(attrs)) if attrs else ""


def _lines(r: RenderableType) -> list[list[tuple[str, Style | None]]]:
    """A text's lines as styled runs."""
    text = r if isinstance(r, Text) else Text(r) if isinstance(r, str) else None
    if text is None:  # anything else: its rendered lines
        return [[(s.text, s.style) for s in line] for line in _CONSOLE.render_lines(r, pad=False)]
    return [[(s.text, s.style) for s in line.render(_CONSOLE, end="") if not s.control]
            for line in text.split("\n", allow_blank=True)]


def _plain(r: RenderableType) -> list[str]:
    return ["".join(t for t, _ in line) for line in _lines(r)]


def place(sheet: Sheet, r: RenderableType, x: float = MARGIN) -> None:
    if isinstance(r, Group):
        for part in r.renderables:
            place(sheet, part, x)
    elif isinstance(r, GridPicture):
        draw_grid(sheet, grid_drawing(r.placement, r.focus), x + PAD, sheet.y + PAD)
    elif isinstance(r, Table):
        place_table(sheet, r, x)
    elif isinstance(r, Rule):
        sheet.y += PAD
        title = _lines(r.title)[0] if r.title else []
        sheet.text(x, sheet.y + FONT, [(t, Style(bold=True) + (s or Style())) for t, s in title])
        sheet.rules.append((sheet.y + LINE / 2, x + (sum(len(t) for t, _ in title) + 1) * CHAR))
        sheet.y += LINE + PAD / 2
    else:
        for line in _lines(r):
            indent = len(line[0][0]) - len(line[0][0].lstrip(" ")) if line else 0
            if line:
                line[0] = (line[0][0][indent:], line[0][1])
            sheet.text(x + indent * CHAR, sheet.y + FONT, line)
            sheet.y += LINE


def place_table(sheet: Sheet, table: Table, x: float) -> None:
    cols = table.columns
    cells = [list(c.cells) for c in cols]
    width = [max([len(s) for s in _plain(c.header)] + [len(s) for cell in cs for s in _plain(cell)] + [0])
             for c, cs in zip(cols, cells)]
    left = [x + (sum(width[:i]) + GAP * i) * CHAR for i in range(len(cols))]
    right = x + (sum(width) + GAP * max(0, len(cols) - 1)) * CHAR
    if table.title:
        sheet.text(x, sheet.y + FONT, [(t, Style(bold=True)) for t in _plain(table.title)])
        sheet.y += LINE

    def row(items: list[RenderableType], bold: bool = False) -> None:
        tall = 0
        for i, item in enumerate(items):
            lines = _lines(item)
            for k, line in enumerate(lines):
                runs = [(t, Style(bold=True) + (s or Style()) if bold else s) for t, s in line]
                if cols[i].justify == "right":
                    sheet.text(left[i] + width[i] * CHAR, sheet.y + FONT + k * LINE, runs, "end")
                else:
                    sheet.text(left[i], sheet.y + FONT + k * LINE, runs)
            tall = max(tall, len(lines))
        sheet.y += max(tall, 1) * LINE

    if table.show_header:
        row([c.header for c in cols], bold=True)
        sheet.line(x, sheet.y + 2, right, sheet.y + 2)
        sheet.y += PAD
    for r in range(table.row_count):
        if r and table.show_lines:
            sheet.line(x, sheet.y + PAD / 2, right, sheet.y + PAD / 2, DIM, ' stroke-dasharray="2 3"')
            sheet.y += PAD
        row([cs[r] for cs in cells])
    sheet.width = max(sheet.width, right)
    sheet.y += PAD / 2


def draw_grid(sheet: Sheet, g: GridDrawing, x: float, y: float) -> None:
    """Cells first, then their outlines and labels, on top."""
    parts = sheet.parts
    parts.append(f'<g class="grid" transform="translate({_num(x)} {_num(y)})">')
    for c in sorted(g.cells, key=lambda c: c.focus):  # the device asked for outlined on top
        ink, fill = (EMPTY_LINE, EMPTY_FILL) if c.empty else COLOURS[PALETTE[c.colour % len(PALETTE)]]
        dash = ' stroke-dasharray="4 3"' if c.empty else ""
        ranges = ",".join(f"{a}:{b}" for a, b in c.ranges)
        number = ",".join(f"{a}={n}" for a, n in c.number)
        parts.append(f'<rect class="cell{" empty" if c.empty else ""}" x="{_num(c.x)}" y="{_num(c.y)}" '
                     f'width="{_num(c.w)}" height="{_num(c.h)}" fill="{fill}" stroke="{ink}" '
                     f'stroke-width="{3 if c.focus else 1}"{dash} data-devices="{" ".join(map(str, c.devices))}" '
                     f'data-ranges="{ranges}" data-block="{number}"/>')
    for c in g.cells:
        ink = EMPTY_LINE if c.empty else COLOURS[PALETTE[c.colour % len(PALETTE)]][0]
        weight = ' font-weight="bold"' if c.focus else ""
        if c.vertical:
            cx, cy = c.x + c.w / 2 + FONT / 3, c.y + c.h / 2
            parts.append(f'<text x="{_num(cx)}" y="{_num(cy)}" text-anchor="middle" fill="{ink}"{weight} '
                         f'transform="rotate(-90 {_num(cx)} {_num(cy)})">{escape(c.lines[0])}</text>')
            continue
        top = c.y + c.h / 2 - len(c.lines) * LINE / 2 + FONT
        for k, line in enumerate(c.lines):
            parts.append(f'<text x="{_num(c.x + c.w / 2)}" y="{_num(top + k * LINE - 1)}" text-anchor="middle" '
                         f'fill="{ink}"{weight}>{escape(line)}</text>')
    for lb in g.labels:
        weight = ' font-weight="bold"' if lb.bold else ""
        turn = f' transform="rotate(-90 {_num(lb.x)} {_num(lb.y)})"' if lb.vertical else ""
        parts.append(f'<text x="{_num(lb.x)}" y="{_num(lb.y)}" text-anchor="{lb.anchor}" fill="{INK}"'
                     f'{weight}{turn}>{escape(lb.text)}</text>')
    parts.append("</g>")
    sheet.width = max(sheet.width, x + g.width)
    sheet.y = y + g.height + PAD + LINE / 2


def svg_of(items: Iterable[RenderableType], title: str, standalone: bool = True) -> str:
    """The pictures as one SVG document (`standalone`: a file of its own, which
    must name the SVG namespace; inside HTML it needs none)."""
    sheet = Sheet()
    for r in items:
        place(sheet, r)
    width = max(sheet.width, 60 * CHAR) + MARGIN
    for y, x in sheet.rules:
        sheet.line(min(x, width - MARGIN), y, width - MARGIN, y, DIM)
    height = sheet.y + MARGIN
    ns = f' xmlns="{NAMESPACE}"' if standalone else ""
    return (f'<svg{ns} width="{_num(width)}" height="{_num(height)}" viewBox="0 0 {_num(width)} {_num(height)}" '
            f'font-family="{escape(FONTS)}" font-size="{FONT}" fill="{INK}" xml:space="preserve" '
            f'style="white-space: pre">\n<title>{escape(title)}</title>\n'
            f'<rect width="100%" height="100%" fill="#ffffff"/>\n' + "\n".join(sheet.parts) + "\n</svg>\n")


def html_of(items: Iterable[RenderableType], title: str) -> str:
    """A page holding the SVG, with nothing it loads from elsewhere."""
    return ("<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{escape(title)}</title>\n<style>body {{ margin: 0; background: #ffffff; }}</style>\n"
            "</head>\n<body>\n" + svg_of(items, title, standalone=False) + "</body>\n</html>\n")
