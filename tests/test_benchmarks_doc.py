"""benchmarks/README.md names every benchmark there is, and only those; RESULTS.md stays short."""

from __future__ import annotations

import re

from helpers import ROOT

BENCH = ROOT / "benchmarks"


def test_benchmarks_readme_has_a_line_for_every_script_and_names_no_other() -> None:
    readme = (BENCH / "README.md").read_text()
    named = set(re.findall(r"`([a-z0-9_]+\.py)`", readme))
    scripts = {p.name for p in BENCH.glob("*.py")}
    assert scripts - named == set(), "benchmarks/README.md lacks a line for these"
    assert named - scripts == set(), "benchmarks/README.md names scripts that are gone"


def test_what_runs_a_benchmark_module_names_one_that_exists() -> None:
    """device_session.sh's stages and the docs' commands (`-m benchmarks.NAME`)."""
    texts = [ROOT / "gpu_backend" / "device_session.sh", ROOT / "gpu_backend" / "DEVICE.md", ROOT / "README.md",
             BENCH / "README.md", BENCH / "RESULTS.md", *(ROOT / "docs").glob("**/*.md")]
    run = {m for t in texts for m in re.findall(r"-m benchmarks\.([a-z0-9_]+)", t.read_text())}
    assert run, "no benchmark command found at all"
    assert {m for m in run if not (BENCH / f"{m}.py").exists()} == set()


def test_results_md_stays_under_400_lines() -> None:
    assert len((BENCH / "RESULTS.md").read_text().splitlines()) < 400
