"""Every spec constraint has its negative test, named after its label
(docs/spec.md), in one of tests/test_verify_*.py (types, functions, ops,
partial values, windows), and every label the code raises is in the spec."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = sorted(Path(__file__).parent.glob("test_verify_*.py"))


def test_every_label_the_code_raises_has_a_negative_test_here():
    sources = "".join(p.read_text() for p in sorted((ROOT / "refir").rglob("*.py")))
    labels = set(re.findall(r'"([a-z]+_c[0-9]+)"', sources))
    tests = {label for p in TESTS for label in re.findall(r"^def test_([a-z]+_c[0-9]+)\(", p.read_text(), re.M)}
    assert len(TESTS) >= 5
    assert len(labels) >= 34
    assert labels <= tests, sorted(labels - tests)


def test_every_label_the_code_raises_is_in_the_spec():
    sources = "".join(p.read_text() for p in sorted((ROOT / "refir").rglob("*.py")))
    spec = (ROOT / "docs" / "spec.md").read_text()
    labels = set(re.findall(r'"([a-z]+_c[0-9]+)"', sources))
    assert {lab for lab in labels if f"**{lab}**" not in spec} == set()
