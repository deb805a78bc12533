"""Replayed gpu runs (gpu_backend/launches/replay.py) and the direct cuBLAS call's
arguments (gpu_backend/kernels/gemm.py).

Under the simulator there is no pool and no driver launch, so the replay's
logic runs here on a fake device: "device memory" is a dict of numpy arrays
by address, blocks come from a real SizeClassPool over fake upstream blocks,
and the run's one "kernel" is a Python call noted as the driver's launches
note themselves. A run is recorded, replayed on new data, and every changed
assumption must send the run down the full path. On a GPU, the last test
runs every shared example again and again: replayed results must equal the
full path's bit for bit."""

import os
import sys
import threading

import numpy as np
import pytest

import refir
from gpu_backend.buffers import memory
from gpu_backend.device import SIMULATED
from gpu_backend.kernels import elementwise as kernels
from gpu_backend.kernels import gemm
from gpu_backend.launches import graph, launch, recording, replay, replay_trace
from refir.ir.types import BF16
from refir.lowering.lower import lower
from refir.running.inputs import bind_lines, default_bindings, draw_inputs
from refir.world.ranks import local_world

sys.path.insert(0, os.path.dirname(__file__))
from fake_device import PROGRAM, FakeDevice, data, run, use_fake  # noqa: E402
from helpers import EXAMPLES, OWN_EXAMPLES, ROOT, fake_blas  # noqa: E402


@pytest.fixture
def device(monkeypatch):
    dev = FakeDevice()
    use_fake(monkeypatch, dev)
    replay.forget()
    for k in replay.counts:
        monkeypatch.setitem(replay.counts, k, 0)
    yield dev
    replay.forget()


def test_a_recorded_run_is_replayed_on_new_data(device):
    lowered = lower(refir.verify(refir.load(PROGRAM)))
    first = data(1)
    got = run(device, lowered, first)["out"][0]
    assert np.array_equal(got, first["x"][0] @ first["w"][0])
    assert replay.counts["recorded"] == 1, replay.last_taint
    in_use = device.pool.stats().in_use
    assert in_use == 0  # the recording saw every block go back
    for seed in (2, 3):
        new = data(seed)
        got = run(device, lowered, new)["out"][0]
        assert np.array_equal(got, new["x"][0] @ new["w"][0])
    assert replay.counts["replayed"] == 2 and replay.counts["recorded"] == 1
    assert device.pool.stats().in_use == 0


def test_replayed_uploads_hand_the_driver_bfloat16_as_its_bits(monkeypatch):
    """The driver copy takes a plain buffer: bfloat16 (no buffer format) goes as uint16."""
    seen = []

    class Recorded:
        def __init__(self, address, size, dtype, lease) -> None:
            seen.append((address, size, np.dtype(dtype)))

        def upload(self, host: np.ndarray) -> None:
            seen.append(host.copy())

    monkeypatch.setattr(replay, "Memory", Recorded)
    x = np.array([2.0, -4.0, 0.5], BF16)
    replay.DriverTransfers.up(4096, x)
    (address, size, dtype), host = seen
    assert (address, size, dtype) == (4096, 3, np.dtype(np.uint16))
    assert host.dtype == np.uint16 and host.tobytes() == x.tobytes()
    f = np.array([1.5, 2.5], np.float32)
    replay.DriverTransfers.up(8192, f)
    assert seen[2][2] == np.float32 and np.array_equal(seen[3], f)


def test_retake_leaves_the_pool_as_the_run_did():
    """pool.retake of replay.folded(a run's takes and gives) against the takes and gives themselves."""
    pools = []
    for _ in range(2):
        dev = FakeDevice()
        warm = [dev.pool.take(n) for n in (600, 700, 2000, 600, 5000)]
        for block, size in warm:
            dev.pool.give(block, size)
        pools.append(dev.pool)
    stepwise, folded_ = pools
    events, held = [], {}
    for step in ("take 600", "take 2000", "take 600", "give 0", "take 700", "give 2", "take 600", "give 1",
                 "give 3", "give 4", "take 5000", "give 5"):
        verb, n = step.split()
        if verb == "take":
            block, size = stepwise.take(int(n))
            held[len(held)] = (block, size)
            events.append((True, size, block.device_pointer_value))
        else:
            block, size = held[int(n)]
            stepwise.give(block, size)
            events.append((False, size, block.device_pointer_value))
    assert folded_.retake(*replay.folded(events))
    lists = [{c: [b.device_pointer_value for b in blocks] for c, blocks in p.free.items()} for p in pools]
    assert lists[0] == lists[1]
    assert stepwise.stats() == folded_.stats()
    taken = folded_.take(600)
    assert folded_.retake(*replay.folded(events)) is None  # a block in use: nothing taken
    folded_.give(*taken)
    assert folded_.stats().in_use == 0 and sum(map(len, folded_.free.values())) == 5


def free_lists(pool):
    return {c: [b.device_pointer_value for b in blocks] for c, blocks in pool.free.items()}


def test_a_failed_or_undone_retake_leaves_the_pool_as_it_was():
    """Which block a take hands out depends on the free lists' order: a retake
    that finds some block in use, or one undone because another rank cannot
    replay, must leave every list in its order, and the counts, as they were."""
    dev = FakeDevice()
    pool = dev.pool
    warm = [pool.take(n) for n in (600, 600, 600, 700, 2000, 2000, 5000)]
    for block, size in warm[::2] + warm[1::2]:  # given back out of order: the lists' order is not the take order
        pool.give(block, size)
    (a, klass), (b, _), (c, _), (e, _) = (pool.take(600) for _ in range(4))  # four blocks of one class
    for block in (a, e, b, c):  # given back with e, not the run's, between the run's blocks
        pool.give(block, klass)
    d, size_d = pool.take(2000)
    pool.give(d, size_d)
    before, stats = free_lists(pool), pool.stats()
    events = [(True, klass, x.device_pointer_value) for x in (a, b)] + [(True, size_d, d.device_pointer_value)]
    events += [(True, klass, c.device_pointer_value)]  # the run's block that is found in use: looked for last
    events += [(False, klass, x.device_pointer_value) for x in (b, c, a)] + [(False, size_d, d.device_pointer_value)]
    hog = pool.take(5000)  # not in the run: a retake must not disturb it
    held = pool.take(600)  # the last block of the class given back: one of the run's, now in use
    assert held[0] is c
    mid, mid_stats = free_lists(pool), pool.stats()
    assert pool.retake(*replay.folded(events)) is None
    assert free_lists(pool) == mid and pool.stats() == mid_stats  # every list as it was, in its order
    pool.give(*held)
    pool.give(*hog)
    before, stats = free_lists(pool), pool.stats()
    retaken = pool.retake(*replay.folded(events))
    assert retaken is not None and free_lists(pool) != before
    assert pool.stats().reused == stats.reused + 4
    retaken.undo()
    assert free_lists(pool) == before and pool.stats() == stats


def replays_again(device, lowered, inputs, **kw) -> bool:
    before = replay.counts["replayed"]
    got = run(device, lowered, inputs, **kw)["out"][0]
    assert np.array_equal(got, inputs["x"][0] @ inputs["w"][0])
    return replay.counts["replayed"] > before


def test_every_changed_assumption_falls_back_to_the_full_path(device, monkeypatch):
    lowered = lower(refir.verify(refir.load(PROGRAM)))
    run(device, lowered, data(1))
    assert replays_again(device, lowered, data(2))
    assert not replays_again(device, lowered, data(2, m=5))  # input shapes
    assert not replays_again(device, lowered, data(2, m=5, dtype=np.float64))  # dtypes
    strided = data(2)
    strided["x"][0] = np.asfortranarray(strided["x"][0])
    assert not replays_again(device, lowered, strided)  # layouts
    assert not replays_again(device, lowered, data(2), scalars={"M": 4, "K": 8, "N": 3, "extra": 1})
    assert not replays_again(device, lowered, data(2), world=local_world(2))
    assert not replays_again(device, lower(refir.verify(refir.load(PROGRAM))), data(2))  # another program
    kernels.clear_plans()  # the launch knobs may have changed
    assert not replays_again(device, lowered, data(3))
    assert replays_again(device, lowered, data(4))
    monkeypatch.setattr(launch, "FAST", False)  # numba's own launches: nothing to replay
    assert not replays_again(device, lowered, data(5))
    monkeypatch.undo()
    use_fake(monkeypatch, device)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(replays_again(device, lowered, data(6))))
    thread.start()
    thread.join()
    assert seen == [False]  # cupy's cuBLAS handle is per thread
    monkeypatch.setattr(replay, "ENABLED", False)
    assert not replays_again(device, lowered, data(6))


def test_a_block_in_use_elsewhere_refuses_the_replay(device):
    lowered = lower(refir.verify(refir.load(PROGRAM)))
    run(device, lowered, data(1))
    assert replays_again(device, lowered, data(2))
    hogs = [device.pool.take(4 * 32) for _ in range(3)]  # the input blocks, now someone else's
    refused = replay.counts["refused"]
    assert not replays_again(device, lowered, data(3))
    assert replay.counts["refused"] == refused + 1
    for block, size in hogs:
        device.pool.give(block, size)
    assert device.pool.stats().in_use == 0  # what the refused replay took went back
    assert replays_again(device, lowered, data(4))  # the full run recorded afresh
    device.pool.trim()  # the blocks are gone
    assert not replays_again(device, lowered, data(5))


def test_runs_a_replay_would_not_repeat_are_not_kept(device, monkeypatch):
    lowered = lower(refir.verify(refir.load(PROGRAM)))
    run(device, lowered, data(1), spoil=lambda: recording.taint("a numba launch"))
    assert replay.counts["tainted"] == 1 and replay.last_taint == ["a numba launch"]
    assert not replays_again(device, lowered, data(2))  # this one recorded
    replay.forget()
    run(device, lowered, data(1), spoil=lambda: launch.counts.__setitem__("numba", launch.counts["numba"] + 1))
    assert replay.last_taint == ["a launch through numba or cuda.core"]
    replay.forget()
    kept = []
    run(device, lowered, data(1), spoil=lambda: kept.append(memory.empty(4, np.dtype(np.float32))))
    assert replay.last_taint == ["a block taken in the run is still held"]
    kept.clear()
    replay.forget()
    run(device, lowered, data(1), spoil=lambda: recording.host_copy("a download"))
    assert replay.last_taint == ["a host copy (a download) inside the steps or by another thread"]
    for elsewhere, why in [(lambda: recording.note(print, "a launch"), "work queued by another thread"),
                           (lambda: memory._pool.give(*memory._pool.take(64)), "a pool block taken by another thread")]:
        replay.forget()
        other = threading.Thread(target=elsewhere)
        run(device, lowered, data(1), spoil=lambda t=other: (t.start(), t.join()))
        assert replay.last_taint == [why]  # another thread's work must not be replayed as this run's
        assert not replays_again(device, lowered, data(2))


class FakeGraph:
    """The captured calls, run one by one at each launch; `skew` spoils the first result."""

    def __init__(self, calls, dev, skew=False) -> None:
        self.calls, self.dev, self.skew, self.launches = calls, dev, skew, 0

    def launch(self) -> None:
        self.launches += 1
        for fn, args in self.calls:
            fn(*args)
        if self.skew:
            self.dev.memory[self.calls[0][1][0]][0] += 1


@pytest.mark.parametrize("skew", [False, True])
def test_a_graph_is_kept_only_where_its_bits_are_the_calls(device, monkeypatch, skew):
    made = []
    monkeypatch.setattr(replay_trace, "capture_graph",
                        lambda calls, gemm_ex: made.append(FakeGraph(calls, device, skew)) or made[-1])
    lowered = lower(refir.verify(refir.load(PROGRAM)))
    run(device, lowered, data(1))
    assert replays_again(device, lowered, data(2))  # replayed call by call, then the graph made and tried
    assert len(made) == 1 and made[0].launches == 1 and len(made[0].calls) == 1
    assert replay.counts["graphs with other bits" if skew else "graphs kept"] == 1, str(replay.counts)
    for seed in (3, 4):
        assert replays_again(device, lowered, data(seed))
    assert made[0].launches == (1 if skew else 3) and replay.counts["graphed"] == (0 if skew else 2)
    assert len(made) == 1  # never captured again
    monkeypatch.setattr(graph, "ENABLED", False)  # REFIR_GPU_GRAPH=0: the calls one by one
    assert replays_again(device, lowered, data(5))
    assert made[0].launches == (1 if skew else 3)


def test_gemm_arguments_are_cupys():
    gemm._calls.clear()
    blas = fake_blas()
    m, k, n = 4, 6, 5
    c = (1000, (m, n), (n, 1))
    dense_a, dense_b = (2000, (m, k), (k, 1)), (3000, (k, n), (n, 1))
    call = gemm.gemm_call(blas, c, dense_a, dense_b, "f")
    # C^T = B^T A^T in column-major terms: both operands as they lie, no transposition
    assert call[1:6] == (0, 0, n, m, k) and call[7:10] == (3000, 0, n) and call[10:13] == (2000, 0, k)
    assert call[14:] == (1000, 0, n, 68, 99)
    column_a = (2000, (m, k), (1, m))  # a.T is C-contiguous: transposed, lda its row stride
    assert gemm.gemm_call(blas, c, column_a, dense_b, "f")[2] == 1
    assert gemm.gemm_call(blas, c, column_a, dense_b, "f")[12] == m
    column_b = (3000, (k, n), (1, k))
    assert gemm.gemm_call(blas, c, dense_a, column_b, "d")[1] == 1
    assert gemm.gemm_call(blas, c, dense_a, column_b, "d")[9] == k
    assert gemm.gemm_call(blas, c, dense_a, column_b, "d")[17] == 70
    gapped_a = (2000, (m, k), (2 * k, 1))  # a column block of a wider x: cupy copies it first
    assert gemm.gemm_call(blas, c, gapped_a, dense_b, "f") is None
    assert gemm.gemm_call(blas, (1000, (m, n), (1, m)), dense_a, dense_b, "f") is None  # result not C-contiguous
    assert gemm.gemm_call(blas, (2004, (m, n), (n, 1)), dense_a, dense_b, "f") is None  # overlaps a
    assert gemm.gemm_call(blas, (1000, (1, 1), (1, 1)), (2000, (1, k), (k, 1)), (3000, (k, 1), (1, 1)), "f") is None
    assert gemm.gemm_call(blas, (1000, (2, m, n), (m * n, n, 1)), dense_a, dense_b, "f") is None  # batched
    one_row = gemm.gemm_call(blas, (1000, (1, n), (n, 1)), (2000, (1, k), (99, 1)), dense_b, "f")
    assert one_row[2] == 0 and one_row[12] == 99  # F-contiguous a.T: lda = max(stride, K), as cupy
    blas.compute_type = lambda char: None  # a compute type cupy was set to that is not mirrored
    assert gemm.gemm_call(blas, c, dense_a, dense_b, "f") is None


@pytest.mark.skipif(SIMULATED, reason="replays need the pool and driver launches of a GPU")
def test_replayed_examples_equal_the_full_path(monkeypatch):
    # The shared examples, the project's own and the conformance corpus: every
    # layout, collective and extent the suite knows, replayed and as a graph.
    corpus = sorted((ROOT / "conformance" / "corpus").glob("*.rir"))
    for path in EXAMPLES + OWN_EXAMPLES + corpus:
        program = refir.load(path)
        checked = refir.verify(program)
        before = replay.counts["replayed"]
        listed = bind_lines(path.read_text())  # an example's first # bind: line (its reshapes need it)
        bindings = default_bindings(checked, listed[0] if listed else None)
        for draw in range(5):  # compiles; records; replays, then makes and tries the graph; the graph
            inputs = draw_inputs(checked, bindings, seed=draw)
            got = refir.run(program, inputs, backend="gpu")
            monkeypatch.setattr(replay, "ENABLED", False)
            want = refir.run(program, inputs, backend="gpu")
            monkeypatch.setattr(replay, "ENABLED", True)
            for name, blocks in want.shards.items():
                for d, buf in blocks.items():
                    mine = got.shards[name][d]
                    assert mine.strides == buf.strides and mine.tobytes() == buf.tobytes(), (path.stem, name, d)
        print(path.stem, replay.counts["replayed"] - before, "replayed", replay.counts, replay.last_taint)
