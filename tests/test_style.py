"""The code stays ruff-clean, and the installed package is the whole package."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_clean():
    ruff = Path(sys.executable).parent / "ruff"
    if not ruff.exists():
        pytest.skip("ruff is not installed beside this Python (pip install '.[test]')")
    done = subprocess.run([str(ruff), "check", str(ROOT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_package_is_installed():
    """pip install . ships the packages pyproject.toml's find includes: a new subpackage
    left out works from the checkout and breaks every installed copy."""
    import tomllib
    from setuptools import find_packages

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    shipped = set(find_packages(where=str(ROOT), include=include))
    found = {".".join(p.parent.relative_to(ROOT).parts) for top in ("refir", "interp", "gpu_backend", "conformance")
             for p in (ROOT / top).rglob("__init__.py")}
    assert found == shipped
    assert {"refir.ir", "refir.checks", "refir.running"} <= shipped
