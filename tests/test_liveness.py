"""Buffers are forgotten after their last reader (interp/liveness.py), and the
largest live set the memory target is measured against."""

import weakref

import numpy as np
import pytest
from helpers import SEED2

import refir
from interp.liveness import drops, largest_live
from interp.spmd import NumpyLocal, NumpyTransport, execute
from interp.transport import InProcess
from refir.lowering.lower import lower
from refir.running.bindings import bind_inputs
from refir.running.shard_inputs import shard_inputs


def _lowered(text):
    return lower(refir.verify(refir.load(text)))


class Watching:
    """spmd that notes, as each step starts, which earlier results are still alive."""

    def __init__(self, low):
        self.local = NumpyLocal(low.types)
        self.made: dict[str, weakref.ref] = {}
        self.alive_at: dict[str, set[str]] = {}

    def __call__(self, step, device, args):
        self.alive_at[step.out] = {name for name, ref in self.made.items() if ref() is not None}
        out = self.local(step, device, args)
        self.made[step.out] = weakref.ref(out)
        return out


def test_execute_forgets_a_buffer_after_its_last_reader():
    low = _lowered(SEED2.replace("[0, 1]", "[0]"))
    x, w, bias = np.ones((4, 6), np.float32), np.ones((6, 3), np.float32), np.arange(3, dtype=np.float32)
    inputs = {"x": x, "w": w, "bias": bias}
    watch = Watching(low)
    got = execute(low, shard_inputs(low.checked, inputs, (0,)), bind_inputs(low.checked, inputs), watch,
                  NumpyTransport(InProcess(1)))
    product, _, bb, y, out = (s.out for s in low.steps)  # matmul, allreduce, unsqueeze, add, relu
    assert product not in watch.alive_at[bb]  # freed once the allreduce has read it
    assert bb in watch.alive_at[y]
    assert bb not in watch.alive_at[out] and y in watch.alive_at[out]  # the add read bb last
    np.testing.assert_array_equal(got["out"][0], np.maximum(x @ w + bias, 0))


def test_drops_keep_results_and_what_later_segments_read():
    low = _lowered(SEED2)
    plan = drops(low)
    kept = {low.source(r) for r in low.results}
    for s, seg in enumerate(low.segments):
        later = {n for other in low.segments[s + 1:] for n in other.inputs}
        assert not (set(plan.taken[s]) | set(plan.unkept[s])) & (kept | later)
        forgotten = {n for names in plan.after_step[s] for n in names} | set(plan.before[s])
        assert not forgotten & set(seg.outputs)


def test_largest_live_of_the_seed2_pattern():
    low = _lowered(SEED2)
    m, k, n = 8, 6, 5
    # Per device: x block 8x3, w block 3x5, bias 5 live from the start; at the
    # matmul c (8x5) joins them; x and w go, the allreduce's result (8x5) joins c.
    at_matmul = (8 * 3 + 3 * 5 + 5 + 8 * 5) * 4
    at_allreduce = (5 + 2 * 8 * 5) * 4
    assert largest_live(low, {"M": m, "K": k, "N": n}, 0) == max(at_matmul, at_allreduce)
    assert largest_live(low, {"M": m, "K": k, "N": n}, 5) == 0  # not in the mesh


@pytest.mark.parametrize("returned", ["x", "y"])
def test_a_returned_value_is_never_forgotten(returned):
    low = _lowered("mesh m = [0]\nfunc main(x: f32[N]) {\n  y = neg(x)\n  return " + returned + "\n}\n")
    plan = drops(low)
    source = low.source(returned)
    forgotten = {n for seg in plan.after_step for names in seg for n in names}
    forgotten |= {n for names in (*plan.taken, *plan.unkept, *plan.before) for n in names}
    assert source not in forgotten
    assert "x" in plan.taken[0]  # a returned x is a copy of it (lowering): x itself goes
