"""An input's walk from `refir.run` to a device's buffer reads straight down:
below `refir.run`, and below the setup it calls, each module is entered once
(consecutive calls into one module are one visit), on every backend."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import numpy as np
import pytest

import refir
from refir.running import run_setup, runner

PROGRAM = """
mesh m = [0, 1, 2, 3]

func main(x: f32[8, 6@DIDx] on m) {
  y: f32[8, 6] on m = set(x)
  z: f32[8, 6] on m = add(y, y)
  return z
}
"""
OURS = ("refir", "interp", "gpu_backend")
OPTIONS = ["refir.world.ranks", "refir.checks.footprint", "refir.running.run_setup"]  # under MPI? the run's kind
BACKENDS = {"spmd": "interp.backend", "gpu": "gpu_backend.backend"}


def visits(caller: Any, call: Any) -> list[str]:
    """The modules of refir's own functions called directly from `caller`'s
    frame while `call()` runs (but `caller`'s own module: a dataclass made
    there), consecutive repeats merged."""
    code, own = caller.__code__, caller.__module__
    seen: list[str] = []

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event != "call" or frame.f_back is None or frame.f_back.f_code is not code:
            return
        module = frame.f_globals.get("__name__", "")
        if module.split(".")[0] in OURS and module != own and (not seen or seen[-1] != module):
            seen.append(module)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen


@pytest.mark.parametrize("backend", ["global", "spmd", "gpu"])
def test_each_module_is_entered_once(backend: str) -> None:
    program = refir.parse(PROGRAM)
    x = np.arange(48, dtype=np.float32).reshape(8, 6)
    refir.run(program, {"x": x}, backend=backend)  # caches filled: the walk of a second run is the same
    below_run = visits(runner.run, lambda: refir.run(program, {"x": x}, backend=backend))
    below_setup = visits(run_setup.set_up, lambda: refir.run(program, {"x": x}, backend=backend))
    for walk in (below_run, below_setup):
        assert len(walk) == len(set(walk)), walk
    steps = ["refir.world.ranks", "refir.running.prepare"]
    if backend == "global":
        assert below_setup == steps
        assert below_run == [*OPTIONS, "interp.global_eval"], below_run
    else:
        assert below_setup == [*steps, "refir.running.backends", "refir.running.shard_inputs"]
        assert below_run == [*OPTIONS, "refir.running.backends", BACKENDS[backend],
                             "refir.running.gather_outputs"], below_run


def test_the_walk_catches_a_module_entered_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: a setup that goes back to prepare after the world is
    chosen (the run then fails: only the walk matters here)."""
    from refir.running import prepare

    monkeypatch.setattr(run_setup, "shard_inputs", prepare.bind_and_check)  # called as prepare's, from set_up
    program = refir.parse(PROGRAM)
    x = np.zeros((8, 6), np.float32)

    def attempt() -> None:
        try:
            refir.run(program, {"x": x}, backend="spmd")
        except Exception:  # noqa: BLE001 (the broken run's own failure is not what is tested)
            pass

    walk = visits(run_setup.set_up, attempt)
    assert walk == ["refir.world.ranks", "refir.running.prepare", "refir.running.backends",
                    "refir.running.prepare"], walk


CHILD = """
import json, sys
import numpy as np
import refir
from refir.running import run_setup, runner
from refir.world.ranks import mpi_world
from tests.test_run_walk import PROGRAM, visits

program = refir.parse(PROGRAM)
rank = mpi_world().rank
x = {"x": np.arange(48, dtype=np.float32).reshape(8, 6)} if rank == 0 else {}
refir.run(program, x, backend="spmd")
walks = [visits(runner.run, lambda: refir.run(program, x, backend="spmd")),
         visits(run_setup.set_up, lambda: refir.run(program, x, backend="spmd"))]
print("WALK", rank, json.dumps(walks))
"""


def test_under_mpi_each_module_is_entered_once() -> None:
    import json

    from helpers import run_mpi

    done = run_mpi(4, ["-c", CHILD], timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    walks = [json.loads(line.split(" ", 2)[2]) for line in done.stdout.splitlines() if line.startswith("WALK")]
    assert len(walks) == 4, done.stdout
    for below_run, below_setup in walks:
        assert below_run == [*OPTIONS, "refir.running.backends", "interp.backend", "refir.running.gather_outputs"]
        assert below_setup == ["refir.world.ranks", "refir.running.prepare", "refir.world.exchange"], below_setup
