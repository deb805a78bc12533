"""refir.visualize and refir.visualize_placement: explain's pictures of one
value from Python, as text (printed) and as a drawing a notebook shows."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from helpers import ROOT

import refir
from refir.cli import main
from refir.explain.svg import NAMESPACE
from refir.frontends.dtensor import Replicate, Shard

TUTORIAL = ROOT / "docs" / "tutorial"
SCATTER = TUTORIAL / "scatter_after_permute.rir"


def cells(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg)
    rects = root.iter(f"{{{NAMESPACE}}}rect")
    return {r.get("data-devices"): r for r in rects if r.get("class", "").startswith("cell")}


@pytest.mark.parametrize("value", ["t3", "t2", "x"])
def test_draws_what_explain_draws_for_the_value(value, capsys):
    assert main(["explain", str(SCATTER), "--value", value]) == 0
    lines = capsys.readouterr().out.splitlines(keepends=True)
    # explain's heading and its input / segment rule, then the pictures
    want = "".join(line.rstrip() + "\n" for line in lines[2:])
    picture = refir.visualize(SCATTER, value, show=False)
    assert picture.text == want
    assert capsys.readouterr().out == ""  # show=False prints nothing


def test_prints_the_text_and_a_notebook_shows_the_drawing(capsys):
    picture = refir.visualize(str(SCATTER), "t3")
    out = capsys.readouterr().out
    assert "why scatter" in out and "dev 3" in out and "0      3    [3:4, 0:3, 0:3]   36" in out
    svg = picture._repr_svg_()
    assert svg.startswith("<svg") and set(cells(svg)) == {"0", "1", "2", "3"}
    html = picture._repr_html_()
    assert html.startswith("<svg") and "http" not in html and "<rect" in html
    assert repr(picture) == f"<refir picture: {SCATTER}: t3>"


def test_bind_world_and_device():
    a = refir.visualize(TUTORIAL / "allreduce_then_bias.rir", "a", bind={"D": 10, "K": 2, "M": 3}, show=False)
    assert "global [10, 2, 3]" in a.text and "1        [1]      [5:10, 0:2, 0:3]" in a.text
    spread = refir.visualize(TUTORIAL / "two_meshes.rir", "spread", world=6, device=3, show=False)
    assert "devices (0 1 4 5) are outside mesh b and hold nothing" in spread.text
    assert "3        [1]      [2:4, 0:2]" in spread.text and "2        [0]" not in spread.text
    assert cells(spread.svg)["3"].get("stroke-width") == "3" and cells(spread.svg)["2"].get("stroke-width") == "1"


def test_program_text_and_a_partial_value():
    text = "mesh m = [0, 1]\nfunc main(y: f32[2@DIDx, 4] on m) {\n  s = sum(y, dims=[0])\n  return s\n}\n"
    picture = refir.visualize(refir.parse(text), "s", show=False)
    assert "dev 0+1 (partial sum)" in picture.text and "why allreduce" in picture.text
    assert refir.visualize(text, "s", show=False).text == picture.text


def test_mistakes_are_one_line_errors():
    with pytest.raises(refir.InputError, match=r"no value 'nope' in main \(values: x, t1, t2, t3, t4, out\)"):
        refir.visualize(SCATTER, "nope", show=False)
    with pytest.raises(refir.InputError, match="device 9 is not a rank of the world of 4"):
        refir.visualize(SCATTER, "t3", device=9, show=False)
    with pytest.raises(refir.InputError, match="outside a world of 2"):
        refir.visualize(SCATTER, "t3", world=2, show=False)
    with pytest.raises(refir.InputError, match="not a symbol"):
        refir.visualize(TUTORIAL / "allreduce_then_bias.rir", "a", bind={"Q": 3}, show=False)


def test_a_dtensor_style_placement(capsys):
    picture = refir.visualize_placement((7, 5), "2x2", "S0,S1")
    out = capsys.readouterr().out
    assert "x: f32[7@DIDy, 5@DIDx] on m" in out and "│ axis 0 4:7 │ dev 2      │ dev 3      │" in out
    drawn = cells(picture.svg)
    assert float(drawn["0"].get("width")) / float(drawn["1"].get("width")) == pytest.approx(3 / 2, rel=1e-4)
    assert float(drawn["0"].get("height")) / float(drawn["2"].get("height")) == pytest.approx(4 / 3, rel=1e-4)
    same = refir.visualize_placement([7, 5], [[0, 1], [2, 3]], [Shard(0), Shard(1)], show=False)
    assert same.text == picture.text
    copies = refir.visualize_placement((8, 6), 4, [Replicate()], dtype="bf16", show=False)
    assert "dev 0 1 2 3 (copies)" in copies.text and "[12, 2]" in copies.text
    partial = refir.visualize_placement((4,), [[2, 0], [3, 1]], "P,R", show=False)
    assert "dev 2+3, 0+1 (partial sum, copies)" in partial.text


def test_dtensor_style_mistakes():
    for mesh, placements, match in (("2x2", "S0", "2-D mesh"), ([[0, 0]], "R", "distinct"), ("2y2", "R", "bad mesh"),
                                    ("4", "S5", "dimensions"), ("4", "X", "bad placement")):
        with pytest.raises(refir.InputError, match=match):
            refir.visualize_placement((4, 4), mesh, placements, show=False)


def test_save(tmp_path):
    picture = refir.visualize(SCATTER, "t3", show=False)
    assert picture.save(tmp_path / "p.svg").read_text() == picture.svg
    assert picture.save(tmp_path / "p.html").read_text().startswith("<!DOCTYPE html>")
    with pytest.raises(refir.InputError, match="does not exist"):
        picture.save(tmp_path / "missing" / "p.svg")


def test_the_tutorials_python_runs(tmp_path, monkeypatch, capsys):
    """docs/tutorial.md section 10's Python block, as written (its file written under tmp_path)."""
    text = (ROOT / "docs" / "tutorial.md").read_text().split("## 10.", 1)[1]
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    exec(compile(code.replace('"a.svg"', repr(str(tmp_path / "a.svg"))), "tutorial.md", "exec"), {})  # our own docs
    out = capsys.readouterr().out
    assert "global [7, 2, 3]" in out and "1        [1]      [4:7, 0:2, 0:3]" in out
    assert "│ axis 0 4:7 │ dev 2      │ dev 3      │" in out and "dev 0 1 (copies)" in out
    drawn = cells((tmp_path / "a.svg").read_text())
    assert float(drawn["0"].get("width")) / float(drawn["1"].get("width")) == pytest.approx(4 / 3, rel=1e-4)
