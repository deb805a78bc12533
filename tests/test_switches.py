"""docs/switches.md's table is complete: every REFIR_* environment switch the code
reads has a row there, and every row names a switch the code still reads."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import ROOT

# Where switches are read or set: the packages, the suite, the benchmarks, CI. Markdown is
# prose (HISTORY.md names switches long removed), so only code and scripts are searched.
SEARCHED = ["refir", "interp", "gpu_backend", "conformance", "benchmarks", "tests", ".ci"]
NAME = re.compile(r"\bREFIR_[A-Z0-9_]*[A-Z0-9]")


def in_code() -> dict[str, list[str]]:
    """Each REFIR_ name found in the code, with the files it is in."""
    found: dict[str, list[str]] = {}
    for top in SEARCHED:
        for path in sorted((ROOT / top).rglob("*")):
            if (not path.is_file() or path.suffix in (".md", ".pyc") or "__pycache__" in path.parts
                    or path == Path(__file__).resolve()):  # this file names the removed ones
                continue
            for name in set(NAME.findall(path.read_text(errors="replace"))):
                found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def in_table(doc: Path = ROOT / "docs" / "switches.md") -> list[str]:
    """The names of the table's rows (the first cell of each), in order."""
    return re.findall(r"^\| `(REFIR_[A-Z0-9_]+)` \|", doc.read_text(), re.M)


def test_every_refir_switch_read_by_the_code_has_a_row_in_docs_switches_md() -> None:
    code, rows = in_code(), in_table()
    assert len(code) >= 10, sorted(code)  # the search itself found the switches
    missing = {name: files for name, files in code.items() if name not in rows}
    assert missing == {}, f"add a row to docs/switches.md for each: {missing}"


def test_every_row_of_docs_switches_md_names_a_switch_the_code_reads() -> None:
    code, rows = in_code(), in_table()
    assert len(rows) == len(set(rows)), "a switch has two rows"
    assert [name for name in rows if name not in code] == []


def test_the_removed_experiment_switches_are_read_nowhere() -> None:
    """REFIR_FAST_LAUNCH, REFIR_DIRECT_LAUNCH and REFIR_DIRECT_GEMM went with their
    losing paths: nothing may read them again without a row (and a reason) here."""
    gone = {"REFIR_FAST_LAUNCH", "REFIR_DIRECT_LAUNCH", "REFIR_DIRECT_GEMM"}
    assert gone & set(in_code()) == set()
    assert gone & set(in_table()) == set()
