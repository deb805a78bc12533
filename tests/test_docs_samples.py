"""The console samples of docs/conformance.md and docs/frontends/*.md run, as the
tutorial's do (tests/test_tutorial.py): every `$ python -m refir ...` line of a
```console block runs from the repository root, and its standard output must
match the lines after it. Two marks stand for what a sample cannot fix:

- `…` inside a line stands for any text on that line: a timing (`15.0 s`
  becomes `… s`) or the checkout's own path (`…/conformance/corpus/x.rir`);
- a line of just `...` stands for any number of lines (a long output cut short).

Everything else is compared exactly: case counts, which cases fail and why,
mutant kill counts. When the code changes them, rewrite every sample from the
current code with

    python tests/test_docs_samples.py

which writes each output in full, with `…` where a timing or the checkout's path
was, and for a sample that has `...` keeps as many lines before and after it as
the sample shows. Samples that run the conformance suite count the shared
examples (`examples` row), so they are checked only where ../shared is present.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from pathlib import Path

import pytest
from helpers import EXAMPLES, NO_SHARED, ROOT
from test_tutorial import BLOCK, commands

from refir.cli import main

DOCS = [ROOT / "docs" / "conformance.md", *sorted((ROOT / "docs" / "frontends").glob("*.md"))]
ANY_LINES = "..."
ANY_TEXT = "…"
# What differs between runs of the same code, and what a rewrite writes instead.
VARYING = [
    (re.compile(r"(?<![\w.])\d+\.\d+ s\b"), f"{ANY_TEXT} s"),  # a timing: seconds with a decimal point
    (re.compile(re.escape(str(ROOT))), ANY_TEXT),
]


def run(command: str) -> str:
    """The command's standard output (trailing spaces dropped), whatever it exits with:
    a sample may show a run that fails."""
    args = shlex.split(command)
    assert args[:3] == ["python", "-m", "refir"], command
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(args[3:])
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


def matches(want: str, got: str) -> bool:
    """Whether `got` is what the sample `want` shows, `…` and `...` read as above."""
    parts = []
    for line in want.splitlines():
        if line == ANY_LINES:
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append("[^\n]*?".join(re.escape(p) for p in line.split(ANY_TEXT)) + "\n")
    return re.fullmatch("".join(parts), got) is not None


def sample_of(want: str, got: str) -> str:
    """The sample a rewrite writes for output `got`, cut as `want` is cut."""
    for pattern, mark in VARYING:
        got = pattern.sub(mark, got)
    lines, shown = got.splitlines(), want.splitlines()
    if ANY_LINES in shown:
        head = shown.index(ANY_LINES)
        tail = len(shown) - 1 - max(i for i, s in enumerate(shown) if s == ANY_LINES)
        if head + tail < len(lines):
            lines = lines[:head] + [ANY_LINES] + (lines[len(lines) - tail:] if tail else [])
    return "".join(line + "\n" for line in lines)


def runs_the_suite(command: str) -> bool:
    args = shlex.split(command)[3:]
    return not args or args[0] == "conform" or args[0].startswith("-")


def rewrite(text: str) -> str:
    def block(m: re.Match) -> str:
        return "```console\n" + "".join(f"$ {c}\n{sample_of(want, run(c))}" for c, want in commands(m.group(1))) \
            + "```\n"

    return BLOCK.sub(block, text)


def cases() -> list:
    out = []
    for doc in DOCS:
        for m in BLOCK.finditer(doc.read_text()):
            for c, want in commands(m.group(1)):
                marks = [pytest.mark.skip(reason=NO_SHARED)] if runs_the_suite(c) and not EXAMPLES else []
                out.append(pytest.param(c, want, id=f"{doc.name}: {c}", marks=marks))
    return out


CASES = cases()


@pytest.mark.parametrize("command, want", CASES)
def test_docs_sample_prints_what_the_page_shows(command, want, monkeypatch):
    monkeypatch.chdir(ROOT)
    got = run(command)
    assert matches(want, got), (f"the sample of `{command}` is stale; rewrite the samples with "
                                f"`python tests/test_docs_samples.py`; it prints now:\n{sample_of(want, got)}")


def test_every_page_with_a_run_has_its_samples_checked():
    """Each page's console blocks are samples of the checker, and the pages that
    show a run show its output (not a bare ```sh block of output)."""
    names = {p.values[0].split()[3] if len(p.values[0].split()) > 3 else "" for p in CASES}
    assert {"", "conform", "redistribute", "import-nvfuser"} <= names, names
    for doc in DOCS:
        assert "DESIGN" not in doc.read_text(), doc
        assert not re.search(r"\bissues? \d+", doc.read_text()), doc


def test_the_marks_match_what_they_stand_for_and_no_more():
    assert matches("a\n...\nz\n", "a\nb\nc\nz\n") and matches("a\n...\nz\n", "a\nz\n")
    assert matches("took … s\n", "took 15.0 s\n")
    assert not matches("took … s\n", "took 15.0 s\nmore\n")
    assert not matches("a\n...\nz\n", "a\nb\n")
    assert not matches("3 cases\n", "4 cases\n")
    assert not matches("x … y\n", "x 1\ny\n")  # `…` stays on its line


def test_a_rewrite_keeps_the_cut_and_marks_the_timing():
    want = "head\n...\nlast\n"
    got = f"head\n1\n2\nrefir conform: 3 cases (3 corpus) on ranks, 1.5 s\nat {ROOT}/x\nlast\n"
    assert sample_of(want, got) == "head\n...\nlast\n"
    assert sample_of("a\n", got) == "head\n1\n2\nrefir conform: 3 cases (3 corpus) on ranks, … s\nat …/x\nlast\n"
    assert matches(sample_of("a\n", got), got)
    assert sample_of("a\n", "MPI batch: 3 cases, 12.25 s; 4 s budget\n") == "MPI batch: 3 cases, … s; 4 s budget\n"


if __name__ == "__main__":
    os.chdir(ROOT)
    for doc in DOCS:
        Path(doc).write_text(rewrite(doc.read_text()))
