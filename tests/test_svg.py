"""explain's SVG and HTML: a drawing of its own, self-contained, its cells in
proportion to the blocks they show (parsed with xml.etree, everywhere), and
rendered by a real browser where Debian's chromium is installed."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT

from refir.cli import main
from refir.explain.svg import NAMESPACE

NS = {"s": NAMESPACE}
# x: 5 rows over 4 devices (blocks of 2, 2, 1 and 0 rows); y: 7 x 5 over a 2 x 2 mesh (rows 4, 3; columns 3, 2).
UNEVEN = """mesh m = [0, 1, 2, 3]
mesh g = [[0, 1], [2, 3]]

func main(x: f32[5@DIDx, 3] on m, y: f32[7@DIDy, 5@DIDx] on g) {
  w: f32[5, 3] on m = set(x)
  return w
}
"""
MESH_2D = ROOT / "docs" / "tutorial" / "mesh_2d.rir"
SCATTER = ROOT / "docs" / "tutorial" / "scatter_after_permute.rir"


def explain_svg(tmp_path: Path, program: Path | str, *more: str) -> tuple[str, Path]:
    if isinstance(program, str):
        path = tmp_path / "prog.rir"
        path.write_text(program)
        program = path
    svg = tmp_path / "out.svg"
    assert main(["explain", str(program), "--svg", str(svg), *more]) == 0
    return svg.read_text(), svg


def grids(text: str) -> list[tuple[tuple[float, float], list[dict]]]:
    """Each grid's offset on the page and its cells (rect attributes, numbers parsed)."""
    out = []
    for g in ET.fromstring(text).iter(f"{{{NAMESPACE}}}g"):
        if g.get("class") != "grid":
            continue
        dx, dy = map(float, re.fullmatch(r"translate\((\S+) (\S+)\)", g.get("transform")).groups())
        cells = []
        for r in g.findall("s:rect", NS):
            cell = {k: float(r.get(k)) for k in ("x", "y", "width", "height")}
            cell["ranges"] = [tuple(map(int, s.split(":"))) for s in r.get("data-ranges").split(",")]
            cell["devices"] = r.get("data-devices")
            cell["fill"], cell["class"] = r.get("fill"), r.get("class")
            cells.append(cell)
        out.append(((dx, dy), cells))
    return out


def extent(cell: dict, axis: int) -> int:
    a, b = cell["ranges"][axis]
    return b - a


def test_cells_are_in_proportion_to_their_blocks_and_empty_blocks_show(tmp_path, capsys):
    text, _ = explain_svg(tmp_path, UNEVEN)
    (_, x), (_, y), (_, w) = grids(text)
    # x: one row of four blocks along axis 0, 2 : 2 : 1 rows and an empty one.
    assert [c["devices"] for c in x] == ["0", "1", "2", "3"]
    widths = [c["width"] for c in x]
    assert widths[0] == widths[1] == pytest.approx(2 * widths[2])
    assert x[3]["class"] == "cell empty" and 0 < widths[3] < widths[2]
    for left, right in zip(x, x[1:]):  # the cells tile the row: no gap, no overlap
        assert right["x"] == pytest.approx(left["x"] + left["width"])
    # y: rows of 4 and 3 (axis 0), columns of 3 and 2 (axis 1).
    by_dev = {c["devices"]: c for c in y}
    assert by_dev["0"]["width"] / by_dev["1"]["width"] == pytest.approx(3 / 2, rel=1e-4)
    assert by_dev["0"]["height"] / by_dev["2"]["height"] == pytest.approx(4 / 3, rel=1e-4)
    assert by_dev["0"]["width"] == by_dev["2"]["width"] and by_dev["1"]["x"] == by_dev["3"]["x"]
    assert by_dev["2"]["y"] == pytest.approx(by_dev["0"]["y"] + by_dev["0"]["height"])
    # w: whole on every device, one cell of four copies.
    assert len(w) == 1 and w[0]["devices"] == "0 1 2 3"


@pytest.mark.parametrize("program", [MESH_2D, SCATTER, UNEVEN], ids=["mesh_2d", "scatter", "uneven"])
def test_every_grid_is_proportional(tmp_path, capsys, program):
    """Every non-empty cell's width over its block's extent along the axis drawn
    across is one constant per grid (and so for heights down), in every picture."""
    text, _ = explain_svg(tmp_path, program)
    seen = 0
    for _, cells in grids(text):
        for size, pos in (("width", "x"), ("height", "y")):
            if len({c[pos] for c in cells}) < 2:
                continue  # one block this way
            # the tensor axis drawn this way: its block changes exactly where the position does
            (axis,) = [a for a in range(len(cells[0]["ranges"]))
                       if len({(c[pos], c["ranges"][a]) for c in cells}) == len({c[pos] for c in cells})
                       == len({c["ranges"][a] for c in cells})]
            ratios = [c[size] / extent(c, axis) for c in cells if extent(c, axis) > 0]
            assert max(ratios) == pytest.approx(min(ratios), rel=1e-4), (size, axis, ratios)
            seen += 1
    assert seen >= 2


def test_nothing_is_loaded_from_anywhere(tmp_path, capsys):
    text, svg = explain_svg(tmp_path, SCATTER, "--html", str(tmp_path / "out.html"))
    html = (tmp_path / "out.html").read_text()
    assert text.count(NAMESPACE) == 1 and f'xmlns="{NAMESPACE}"' in text  # a standalone SVG must name it
    for doc in (text.replace(f'xmlns="{NAMESPACE}"', ""), html):
        assert "http" not in doc
        for word in ("href", "@import", "url(", "<image", "<script", "<link", "@font-face"):
            assert word not in doc
    assert "monospace" in text and "<svg" in html and "<rect" in html
    ET.fromstring(text)  # well-formed XML


def test_a_drawing_not_terminal_text(tmp_path, capsys):
    text, _ = explain_svg(tmp_path, MESH_2D)
    assert not re.search("[\u2500-\u257f]", text)  # no box-drawing characters: lines are lines
    root = ET.fromstring(text)
    assert len(root.findall(".//s:line", NS)) >= 4 and len(root.findall(".//s:rect", NS)) >= 7
    # each table column's text starts at one x in every row (the device table of x: 4 rows)
    rows: dict[str, list[str]] = {}  # y -> the x of each "[i, j]" (coords, local shape) on that line
    for t in root.findall("s:text", NS):
        if re.fullmatch(r"\[\d, \d\]", "".join(t.itertext())):
            rows.setdefault(t.get("y"), []).append(t.get("x"))
    first = list(rows.values())[:4]
    assert len(first) == 4 and len(first[0]) == 2 and all(xs == first[0] for xs in first)


def test_the_device_asked_for_is_outlined(tmp_path, capsys):
    text, _ = explain_svg(tmp_path, MESH_2D, "--device", "3")
    root = ET.fromstring(text)
    strokes = {r.get("data-devices"): r.get("stroke-width") for r in root.iter(f"{{{NAMESPACE}}}rect")
               if r.get("class") == "cell" and r.get("data-devices") in ("3", "2")}
    assert strokes == {"3": "3", "2": "1"}


def test_an_unwritable_svg_is_one_line_before_anything_prints(tmp_path, capsys):
    for option in ("--svg", "--html"):
        assert main(["explain", str(MESH_2D), option, str(tmp_path / "missing" / "x.svg")]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and "does not exist" in err and option in err


def test_json_with_svg_writes_both(tmp_path, capsys):
    assert main(["explain", str(MESH_2D), "--json", "--svg", str(tmp_path / "j.svg")]) == 0
    assert capsys.readouterr().out.startswith("{") and "<rect" in (tmp_path / "j.svg").read_text()


# ---- in a real browser -----------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on the PATH (Debian: apt-get install "
                                    "chromium): the SVG is not checked in a browser")


def read_png(path: Path) -> np.ndarray:
    """An 8-bit RGB or RGBA, non-interlaced PNG (what chromium writes) as an (h, w, 3) array."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, head = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, colour, _, _, interlace = head
    assert depth == 8 and colour in (2, 6) and interlace == 0, head
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    out = np.zeros((h, w * bpp), np.int32)
    stride = w * bpp
    for y in range(h):
        f, line = raw[y * (stride + 1)], np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        up = out[y - 1] if y else np.zeros(stride, np.int32)
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + up) & 255
        else:  # sub, average, paeth: byte by byte
            cur = np.zeros(stride, np.int32)
            for i in range(stride):
                a = cur[i - bpp] if i >= bpp else 0
                b, c = up[i], (up[i - bpp] if i >= bpp else 0)
                if f == 1:
                    pred = a
                elif f == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                cur[i] = (line[i] + pred) & 255
        out[y] = cur
    return out.reshape(h, w, bpp)[:, :, :3]


def screenshot(svg: Path, out: Path, size: tuple[int, int]) -> np.ndarray:
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--force-device-scale-factor=1", f"--screenshot={out}", f"--window-size={size[0]},{size[1]}",
                           svg.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert out.exists(), done.stderr
    return read_png(out)


def rgb(fill: str) -> np.ndarray:
    return np.array([int(fill[i:i + 2], 16) for i in (1, 3, 5)])


def drawings_of(program: Path | str, tmp_path: Path) -> list:
    """The geometry (refir.explain.drawing) of every grid explain draws, in order."""
    from rich.console import Group

    import refir
    from refir.explain.drawing import grid_drawing
    from refir.explain.pictures import GridPicture
    from refir.explain.placement import explain
    from refir.explain.report import pictures_of
    from refir.lowering.lower import lower
    from refir.running.inputs import bindings_for

    checked = refir.verify(refir.load(program if isinstance(program, Path) else tmp_path / "prog.rir"))
    ex = explain(lower(checked), bindings_for(checked, None), 4)
    out = []

    def walk(r: object) -> None:
        if isinstance(r, Group):
            for part in r.renderables:
                walk(part)
        elif isinstance(r, GridPicture):
            out.append(grid_drawing(r.placement, r.focus))

    for item in pictures_of(ex):
        walk(item)
    return out


@needs_chromium
@pytest.mark.parametrize("program", [MESH_2D, SCATTER, UNEVEN], ids=["mesh_2d", "scatter", "uneven"])
def test_chromium_draws_every_cell_where_the_geometry_says(tmp_path, capsys, program):
    text, svg = explain_svg(tmp_path, program)
    root = ET.fromstring(text)
    size = (int(float(root.get("width"))) + 1, int(float(root.get("height"))) + 1)
    image = screenshot(svg, tmp_path / "shot.png", size)
    drawn = grids(text)
    geometry = drawings_of(program, tmp_path)
    assert len(drawn) == len(geometry) >= 2
    checked = 0
    for ((dx, dy), rects), g in zip(drawn, geometry):
        assert len(rects) == len(g.cells)
        for c, rect in zip(g.cells, rects):
            # a quarter in from the cell's corners: inside its fill, clear of its label and outline
            for fx, fy in ((0.25, 0.25), (0.75, 0.75)):
                px, py = int(dx + c.x + fx * c.w), int(dy + c.y + fy * c.h)
                got = image[py, px]
                assert np.abs(got - rgb(rect["fill"])).max() <= 8, (c, (px, py), got)
                checked += 1
            assert rect["fill"] != "#ffffff"
        right = max(c.x + c.w for c in g.cells)
        px, py = int(dx + right + 4), int(dy + g.cells[0].y + g.cells[0].h / 2)
        assert (image[py, px] >= 245).all(), (px, py)  # white past the grid's right edge
    assert checked >= 12
    assert (image[2, 2] >= 245).all()  # the page is white, the picture at the top left
