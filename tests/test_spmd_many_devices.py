"""Many devices in one process (issue 30): the spmd backend runs programs of small
blocks on meshes of 4,096 devices, exactly as numpy computes them, in time that
grows about linearly with the devices (a team's collective costs one pass over
its blocks, never a step per pair of its members)."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

import refir
from refir.ir import ops


@pytest.fixture(autouse=True)
def many_devices(monkeypatch):
    monkeypatch.setenv("REFIR_MAX_DEVICES", "65536")


def mesh_text(shape: tuple[int, ...]) -> str:
    ids = np.arange(int(np.prod(shape))).reshape(shape)
    return f"mesh m = {ids.tolist()}\n"


# all_to_all along DIDx, reduce_scatter and allreduce along DIDy, a keep_block,
# allgathers along DIDx and DIDy, and a permute to a layout of its own.
MIXED_3D = """func main(x: f32[A@DIDz, B@DIDy, C@DIDx, D]) {
  y: f32[A@DIDz, B@DIDy, C, D@DIDx] = set(x)
  s: f32[A@DIDz, C@DIDy, D@DIDx] = sum(y, dims=[1])
  w: f32[A@DIDz, C, D@DIDx] = sum(y, dims=[1])
  v = add(w, s)
  u: f32[A@DIDz, C@DIDy, D] = set(s)
  t: f32[A@DIDz, D@DIDx, C@DIDy] layout[2, 0, 1] = permute(v, [0, 2, 1])
  g: f32[A@DIDz, D, C] layout[2, 0, 1] = set(t)
  return u, g
}
"""

# One team of every device: an all_to_all, and an allreduce then an add.
WHOLE_TEAM_1D = """func main(x: f32[R@DIDx, C], w: f32[N@DIDx, 2]) {
  y: f32[R, C@DIDx] = set(x)
  p: f32[2] = sum(w, dims=[0])
  q = add(p, 1)
  return y, q
}
"""


def small_ints(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Integers in float32: every sum here is exact, whatever order a team folds in."""
    return rng.integers(-8, 9, size=shape).astype(np.float32)


def mixed_3d(shape: tuple[int, int, int]) -> tuple[str, dict[str, np.ndarray]]:
    a, b, _ = shape
    x = small_ints(np.random.default_rng(0), (a, b, 16, 16))
    return mesh_text(shape) + MIXED_3D, {"x": x}


def whole_team_1d(n: int, columns: int) -> tuple[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return mesh_text((n,)) + WHOLE_TEAM_1D, {"x": small_ints(rng, (2 * n, columns)), "w": small_ints(rng, (n, 2))}


def timed(text: str, inputs: dict[str, np.ndarray]) -> tuple[float, refir.RunResult]:
    """CPU seconds of this process (others on a busy machine count less) for a
    run of a freshly parsed program (verify, lower, shard, run, gather), with
    Python's cyclic collector paused, the best of three (a loaded CI machine once
    slowed a single run enough to take a ratio past its bound)."""
    best, result = float("inf"), None
    for _ in range(3):
        program = refir.parse(text)
        gc.collect()
        gc.disable()
        try:
            start = time.process_time()
            result = refir.run(program, inputs, backend="spmd")
            best = min(best, time.process_time() - start)
        finally:
            gc.enable()
    return best, result


def test_a_4096_device_3d_program_of_small_blocks_runs_exactly_and_linearly():
    small, _ = timed(*mixed_3d((4, 16, 16)))  # 1,024 devices
    text, inputs = mixed_3d((16, 16, 16))  # 4,096
    large, r = timed(text, inputs)
    kinds = {type(s.op) for s in r.lowered.steps}
    assert {ops.AllToAll, ops.ReduceScatter, ops.Allreduce, ops.Allgather, ops.Permute} <= kinds
    x = inputs["x"]
    assert r.outputs["u"].tobytes() == x.sum(1).tobytes()
    assert r.outputs["g"].tobytes() == np.transpose(2 * x.sum(1), (0, 2, 1)).tobytes()
    u, g = r.shards["u"], r.shards["g"]
    assert len(u) == len(g) == 4096
    assert u[4095].shape == (1, 1, 16) and np.array_equal(u[4095][0, 0], x[15, :, 15].sum(0))  # C block 15 of 16
    assert g[7].strides == (64, 4, 64)  # laid out as [2, 0, 1] on every device
    assert not np.shares_memory(g[7], g[8])  # each device a buffer of its own
    assert large < 20, large  # about 1.5 s alone on two cores
    assert large / small < 6, (small, large)  # 4x the devices; a step per pair of a team would be 16x


def test_one_team_of_4096_devices_all_to_all_and_allreduce_run_linearly():
    small, _ = timed(*whole_team_1d(1024, 16))
    text, inputs = whole_team_1d(4096, 16)  # each device's 2 rows cut 4096 ways: pieces of 0 or 1 columns
    large, r = timed(text, inputs)
    assert [type(s.op) for s in r.lowered.steps] == [ops.AllToAll, ops.Reduction, ops.Allreduce, ops.Binary]
    assert r.outputs["y"].tobytes() == inputs["x"].tobytes()
    assert r.outputs["q"].tobytes() == (inputs["w"].sum(0) + 1).tobytes()
    y = r.shards["y"]
    assert y[3].shape == (8192, 1) and y[16].shape == (8192, 0) and np.array_equal(y[3][:, 0], inputs["x"][:, 3])
    assert large < 20, large
    assert large / small < 6, (small, large)


def test_a_team_of_4096_devices_swaps_full_blocks():
    """Every receiver of a 4096-device all_to_all gets a piece from each sender."""
    n = 4096
    x = np.arange(n * n, dtype=np.int32).reshape(n, n)
    r = refir.run(mesh_text((n,)) + "func main(x: i32[R@DIDx, C]) {\n  y: i32[R, C@DIDx] = set(x)\n"
                  "  return y\n}\n", {"x": x}, backend="spmd")
    assert r.outputs["y"].tobytes() == x.tobytes()
    assert np.array_equal(r.shards["y"][4095][:, 0], x[:, 4095]) and r.shards["y"][4095].strides == (4, 4)
