"""The gpu backend: the lowered program as kernels on device buffers.

The same per-device loop as spmd (interp.spmd.execute), with GpuLocal for
local steps and a device transport for communications. Host memory is touched
only to upload the inputs and download the results (and, under the simulator
with MPI, to stage what MPI sends). A run made before on inputs of the same
layouts is replayed instead: its recorded driver calls, made again
(gpu_backend/launches/replay.py).
"""

from __future__ import annotations

from gpu_backend.buffers.buffer import DeviceBuffer, download, upload
from gpu_backend.device import announce, use_device
from gpu_backend.impls import GpuLocal
from gpu_backend.launches import replay
from gpu_backend.transports.in_process import LaidOut, transport_for
from interp.spmd import execute
from refir.lowering.lower import Lowered
from refir.running.bindings import check_local_inputs
from refir.world.backend_types import Shards
from refir.world.ranks import World, watched_run


def run_gpu(lowered: Lowered, inputs: Shards, scalars: dict[str, int], world: World,
            keep: Shards | None = None) -> Shards:
    """With `keep`, every input's and step's device buffers are read back into
    it as the step that made them ends (`trace --backend gpu`)."""
    with watched_run(world):  # under MPI: a failure here ends the others' waits at once, and theirs this one's
        return _run_gpu(lowered, inputs, scalars, world, keep)


def _run_gpu(lowered: Lowered, inputs: Shards, scalars: dict[str, int], world: World,
             keep: Shards | None) -> Shards:
    check_local_inputs(lowered.checked, inputs, scalars)
    announce(world.rank)
    use_device(world.comm)
    if keep is not None:
        return _kept_run(lowered, inputs, scalars, world, keep)
    again = replay.replayed(lowered, inputs, scalars, world)  # the recorded driver calls of an earlier run
    if again is not None:
        return again
    with replay.Recorder(lowered, inputs, scalars, world) as record:
        transport = transport_for(world)
        try:
            # Handed over, not kept: execute frees each input after its last reader.
            results = execute(lowered, record.uploads(inputs), scalars, GpuLocal(lowered.types), LaidOut(transport))
            return record.downloads(results)  # which empties `results`: their blocks go back while recorded
        finally:
            transport.close()


class HostCopies(dict):
    """execute's `keep`: each value's device buffers downloaded (their strides as
    the gpu laid them out) when they are put here, before a later step frees them."""

    def __setitem__(self, name: str, buffers: dict[int, DeviceBuffer]) -> None:
        super().__setitem__(name, {d: download(b) for d, b in buffers.items()})

    def update(self, other: dict[str, dict[int, DeviceBuffer]]) -> None:  # type: ignore[override]
        for name, buffers in other.items():
            self[name] = buffers


def _kept_run(lowered: Lowered, inputs: Shards, scalars: dict[str, int], world: World, keep: Shards) -> Shards:
    """The full path, neither replayed nor recorded (its downloads are no part
    of a run's device work). Every rank of an MPI launch keeps alike, so none
    takes the replay round."""
    transport = transport_for(world)
    copies = HostCopies()
    try:
        uploaded = {name: {d: upload(x) for d, x in blocks.items()} for name, blocks in inputs.items()}
        results = execute(lowered, uploaded, scalars, GpuLocal(lowered.types), LaidOut(transport), copies)
        keep.update(copies)
        return {name: {d: download(b) for d, b in blocks.items()} for name, blocks in results.items()}
    finally:
        transport.close()
