"""benchmarks/scale.py at tiny sizes: its programs check, its table and slopes come
out, and its gate fails a command that grows faster than linearly."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT

import refir
from benchmarks import scale


@pytest.mark.parametrize("kind", scale.MESHES)
@pytest.mark.parametrize("name", scale.PROGRAMS)
def test_every_program_checks_on_every_mesh(name, kind):
    checked = refir.verify(refir.parse(scale.program_text(name, 32, kind)))
    mesh = checked.types["x"].mesh
    assert len(mesh.devices) == 32 and mesh.shape == ((32,) if kind == "1d" else (2, 4, 4))


def test_the_slope_is_the_growth_exponent():
    ns = [16, 64, 256]
    assert scale.slope(ns, [n * 0.01 for n in ns]) == pytest.approx(1.0)
    assert scale.slope(ns, [n * n * 1e-4 for n in ns]) == pytest.approx(2.0)
    assert scale.slope(ns, [3.0, 3.0, 3.0]) == pytest.approx(0.0)


def test_the_gate_catches_a_command_that_grows_as_the_square():
    linear = [scale.Measure("check", "allgather", "1d", n, 0.5 + n * 1e-3, 1.0, 40 + n * 1e-3, 100, 0)
              for n in (64, 256, 1024)]
    square = [scale.Measure("explain", "allgather", "1d", n, n * n * 1e-5, 1.0, 40.0, 100, 0) for n in (64, 256, 1024)]
    rows = {r.command: r for r in scale.rows_of(linear + square)}
    assert rows["check"].too_fast == [] and rows["explain"].too_fast == ["CPU"]
    assert "**over**" in scale.table(list(rows.values()), [64, 256, 1024])


def test_it_runs_at_tiny_sizes_and_prints_its_table():
    done = subprocess.run([sys.executable, "-m", "benchmarks.scale", "--sizes", "16,32", "--commands", "check,run",
                           "--programs", "allreduce_add", "--meshes", "3d", "--max-slope", "3"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "allreduce_add" in line]
    assert [r.split(" | ")[0] for r in rows] == ["| check", "| run"]
    assert "check: CPU slope at most" in done.stdout and "run: CPU slope at most" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "benchmarks.scale", "--sizes", "20"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert bad.returncode == 2 and "every size a multiple of 16" in bad.stderr
