"""interp.spmd keeps each step's operand fill and result shape per operand
shapes (step_facts): a later run with other shapes works them out afresh, and
a result of the wrong shape is still refused on every run."""

from __future__ import annotations

import numpy as np
import pytest

import refir
from interp import spmd
from refir.errors import RunError
from refir.running.prepare import lowered_of, verified

PROGRAM = """mesh m = [0, 1]
func main(x: f32[M, N@DIDx]) {
  y = add(x, N)
  s = sum(y, dims=[1])
  return s
}
"""


def test_other_shapes_get_facts_of_their_own():
    program = refir.load(PROGRAM)
    for m, n in ((3, 4), (3, 4), (5, 6), (3, 4)):
        x = np.arange(m * n, dtype=np.float32).reshape(m, n)
        got = refir.run(program, {"x": x}, backend="spmd").outputs["s"]
        assert np.array_equal(got, (x + n).sum(axis=1, dtype=np.float64).astype(np.float32))


def test_a_result_of_the_wrong_shape_is_refused_after_facts_are_kept(monkeypatch):
    program = refir.load(PROGRAM)
    x = np.ones((3, 4), np.float32)
    refir.run(program, {"x": x}, backend="spmd")  # the facts are kept
    lowered = lowered_of(verified(program, None))
    assert any(key[0] == "y" for key in spmd._FACTS[id(lowered)][1])
    real = spmd.NumpyLocal.__call__

    def short(self, step, device, args):
        out = real(self, step, device, args)
        return out[:-1] if step.out == "y" else out

    monkeypatch.setattr(spmd.NumpyLocal, "__call__", short)
    with pytest.raises(RunError, match=r"local shape \(2, 2\).*gives \(3, 2\).*shard_c1"):
        refir.run(program, {"x": x}, backend="spmd")


def test_a_program_on_ever_new_shapes_keeps_a_bounded_number_of_facts(monkeypatch):
    monkeypatch.setattr(spmd, "FACTS_KEPT", 4)
    program = refir.load(PROGRAM)
    lowered = lowered_of(verified(program, None))
    for m in range(1, 9):  # two steps on two devices: four facts a shape
        x = np.arange(m * 4, dtype=np.float32).reshape(m, 4)
        got = refir.run(program, {"x": x}, backend="spmd").outputs["s"]
        assert np.array_equal(got, (x + 4).sum(axis=1, dtype=np.float64).astype(np.float32))
        assert len(spmd._FACTS[id(lowered)][1]) <= 4
