"""A clone without ../shared says once, in pytest's summary, why the tests of the
shared examples skipped (tests/conftest.py); one with it says nothing of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from helpers import ROOT

COPIED = ("conftest.py", "helpers.py", "test_examples.py")


def pytest_in_a_copy(tmp_path, shared: str | None, select: str = "") -> subprocess.CompletedProcess:
    """pytest over a copy of conftest, helpers and one file of shared-example tests."""
    tests = tmp_path / "clone" / "tests"
    tests.mkdir(parents=True)
    for name in COPIED:
        shutil.copy(ROOT / "tests" / name, tests / name)
    env = {k: v for k, v in os.environ.items() if k not in ("REFIR_SHARED", "REFIR_REQUIRE_SHARED")}
    if shared is not None:
        env["REFIR_SHARED"] = shared
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *(["-k", select] if select else []), str(tests)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)


def test_a_clone_without_shared_says_why_once(tmp_path):
    done = pytest_in_a_copy(tmp_path, None)  # tmp_path/clone has no ../shared beside it
    said = [ln for ln in done.stdout.splitlines() if "tests skipped:" in ln]
    assert done.returncode == 0 and len(said) == 1, done.stdout + done.stderr
    n = int(said[0].split()[0])
    assert n >= 5 and f"{n} skipped" in done.stdout.splitlines()[-1], done.stdout
    assert said[0] == f"{n} tests skipped: ../shared is not beside the checkout ({tmp_path / 'shared'}; CI has it, " \
        "REFIR_SHARED may point to a copy)"


def test_a_wrong_refir_shared_is_named(tmp_path):
    done = pytest_in_a_copy(tmp_path, str(tmp_path / "elsewhere"))
    assert f"tests skipped: REFIR_SHARED={tmp_path / 'elsewhere'} holds no examples/" in done.stdout, done.stdout


def test_a_clone_with_shared_says_nothing_of_it(tmp_path):
    shared = ROOT.parent / "shared"
    if not (shared / "examples").is_dir():
        return  # nothing to compare with here; the tests above still ran
    done = pytest_in_a_copy(tmp_path, str(shared), "verifies")  # the quick ones
    assert done.returncode == 0 and " passed" in done.stdout and "tests skipped:" not in done.stdout, done.stdout
