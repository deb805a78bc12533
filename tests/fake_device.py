"""A fake GPU for the replay tests (gpu_backend/launches/replay.py), under the simulator.

Under the simulator there is no pool and no driver launch, so the replay's
logic runs on a fake device: "device memory" is a dict of numpy arrays by
address, blocks come from a real SizeClassPool over fake upstream blocks,
and the run's one "kernel" is a Python call noted as the driver's launches
note themselves. Under MPI (tests/mpi_replay.py) the fake run also makes what
a rank's run makes around a collective: a shape header through MPI on the
world's communicator (host work, which a replay skips on every rank) and a
sum over the ranks on a communicator of its own, noted as NCCL's calls are
(recording.collective, with the communicator `require`d)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpu_backend.buffers import memory
from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.buffers.memory import Lease, Memory
from gpu_backend.buffers.pool import SizeClassPool
from gpu_backend.launches import launch, recording, replay
from refir.world.ranks import World, local_world

PROGRAM = """mesh m = [0]
func main(x: f32[M, K@DIDx], w: f32[K@DIDx, N]) {
  out = matmul(x, w)
  return out
}
"""


class Block:
    def __init__(self, address: int) -> None:
        self.device_pointer_value = address


class FakeDevice:
    """Device memory by address, the pool over it, and the replay's host copies."""

    def __init__(self) -> None:
        self.memory: dict[int, np.ndarray] = {}
        self.next = 1 << 20
        self.pool = SizeClassPool(self._upstream)
        self.wire: Any = None  # under MPI: the communicator the "collective" runs on (NCCL's, in a real run)

    def _upstream(self, size: int) -> Block:
        self.next += size
        return Block(self.next - size)

    def up(self, address: int, host: np.ndarray) -> None:
        self.memory[address] = host.copy()

    def down(self, host: np.ndarray, address: int) -> None:
        host[...] = self.memory[address].view(host.dtype)[:host.size]

    def upload(self, x: np.ndarray) -> DeviceBuffer:  # stands in for buffer.upload
        block, size = memory._pool.take(x.nbytes)
        data = Memory(block.device_pointer_value, x.size, x.dtype, Lease(memory._pool, block, size))
        self.up(data.ptr, np.ascontiguousarray(x).reshape(-1))
        return DeviceBuffer.dense(data, x.shape)

    def download(self, b: DeviceBuffer) -> np.ndarray:  # stands in for buffer.download
        host = np.empty(b.size, b.dtype)
        self.down(host, b.data.ptr)
        return host.reshape(b.shape)

    def matmul(self, out: int, a: int, b: int, m: int, k: int, n: int) -> None:  # the one "kernel"
        x = self.memory[a][:m * k].reshape(m, k)
        w = self.memory[b][:k * n].reshape(k, n)
        self.memory[out] = (x @ w).reshape(-1)

    def allreduce(self, address: int, count: int, comm: Any) -> None:  # the one "collective": a sum over ranks
        from mpi4py import MPI

        from refir.world.mpi_job import wait

        mine = np.ascontiguousarray(self.memory[address][:count])
        total = np.empty_like(mine)
        wait(comm.Iallreduce(mine, total, op=MPI.SUM), "the fake collective")
        self.memory[address] = total


def use_fake(monkeypatch: Any, dev: FakeDevice) -> None:
    """The pool, uploads and downloads of `dev`, with replays and direct launches on."""
    monkeypatch.setattr(memory, "_pool", dev.pool)
    monkeypatch.setattr(replay, "ENABLED", True)
    monkeypatch.setattr(launch, "FAST", True)
    monkeypatch.setattr(replay, "upload", dev.upload)
    monkeypatch.setattr("gpu_backend.buffers.buffer.download", dev.download)


def run(dev: FakeDevice, lowered: Any, inputs: dict[str, dict[int, np.ndarray]], world: World | None = None,
        scalars: dict[str, int] | None = None, spoil: Callable[[], None] | None = None) -> dict[str, Any]:
    """run_gpu's shape, on the fake device: a replay, else a recorded full run.
    Under MPI (`world.comm`), the product is summed over the ranks after a
    shape header from rank 0 (a full run's host-side MPI message)."""
    world = world or local_world(1)
    d = world.hosted[0]
    scalars = {"M": inputs["x"][d].shape[0], "K": 8, "N": 3} if scalars is None else scalars
    again = replay.replayed(lowered, inputs, scalars, world, dev)
    if again is not None:
        return again
    with replay.Recorder(lowered, inputs, scalars, world) as record:
        bufs = record.uploads(inputs)
        x, w = bufs["x"][d], bufs["w"][d]
        (m, k), n = x.shape, w.shape[1]
        out = DeviceBuffer.empty((m, n), x.dtype)
        recording.note(dev.matmul, out.data.ptr, x.data.ptr, w.data.ptr, m, k, n)
        dev.matmul(out.data.ptr, x.data.ptr, w.data.ptr, m, k, n)
        if world.comm is not None:
            _header(world.comm, (m, n))
            wire = dev.wire
            recording.require("fake wire", lambda: dev.wire is wire)
            recording.collective(dev.allreduce, out.data.ptr, m * n, wire)
            dev.allreduce(out.data.ptr, m * n, wire)
        if spoil is not None:
            spoil()
        results = {"out": {d: out}}
        del bufs, x, w, out  # as run_gpu holds nothing but `results`, which downloads empties
        return record.downloads(results)


def _header(comm: Any, shape: tuple[int, int]) -> None:
    """Rank 0's shape on every rank, as RankTransport.header sends one (a replay makes none)."""
    from refir.world.mpi_job import wait

    header = np.array(shape, np.int64)
    wait(comm.Ibcast(header, root=0), "a shape header")
    if tuple(header) != shape:
        raise AssertionError(f"rank 0's block is {tuple(header)}, this rank's {shape}")


def data(seed: int, m: int = 4, dtype: Any = np.float32, d: int = 0) -> dict[str, dict[int, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {"x": {d: rng.integers(-4, 4, (m, 8)).astype(dtype)}, "w": {d: rng.integers(-4, 4, (8, 3)).astype(dtype)}}
