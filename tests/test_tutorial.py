"""docs/tutorial.md and README.md run: every `$ python -m refir ...` line in a
```console block is run and its output compared with the lines that follow it.
`python tests/test_tutorial.py` rewrites those outputs from the current code."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex

import pytest
from helpers import ROOT

from refir.cli import main

TUTORIAL = ROOT / "docs" / "tutorial.md"
DOCS = [TUTORIAL, ROOT / "README.md"]
BLOCK = re.compile(r"^```console\n(.*?)^```\n", re.M | re.S)


def commands(block: str) -> list[tuple[str, str]]:
    """(command, expected output) pairs of one console block."""
    out: list[tuple[str, str]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], ""))
        else:
            assert out, f"output before any command: {line!r}"
            out[-1] = (out[-1][0], out[-1][1] + line + "\n")
    return out


def run(command: str) -> str:
    args = shlex.split(command)
    assert args[:3] == ["python", "-m", "refir"], command
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(args[3:]) == 0, command
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())


def rewrite(text: str) -> str:
    def block(m: re.Match) -> str:
        return "```console\n" + "".join(f"$ {c}\n{run(c)}" for c, _ in commands(m.group(1))) + "```\n"

    return BLOCK.sub(block, text)


CASES = [(c, want) for doc in DOCS for m in BLOCK.finditer(doc.read_text()) for c, want in commands(m.group(1))]


@pytest.mark.parametrize("command, want", CASES, ids=[c for c, _ in CASES])
def test_tutorial_command_prints_what_the_tutorial_says(command, want, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert run(command) == want


def test_tutorial_covers_every_communication():
    text = TUTORIAL.read_text()
    for kind in ("allgather", "gather", "scatter", "broadcast", "send_recv", "all_to_all", "allreduce", "reduce",
                 "reduce_scatter"):
        assert f"why {kind}:" in text, kind
    assert len(CASES) >= 10


def test_readme_quick_start_is_one_sh_block_of_two_commands():
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("##", 1)[0]
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", quick, re.M | re.S)
    assert len(blocks) == 1 and blocks[0][0] == "sh" and len(blocks[0][1].strip().splitlines()) == 2


if __name__ == "__main__":
    os.chdir(ROOT)
    for doc in DOCS:
        doc.write_text(rewrite(doc.read_text()))
