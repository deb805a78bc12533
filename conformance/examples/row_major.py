"""A deliberately wrong backend: it ignores the strides of its input buffers.

Many kernels take a raw pointer and index it as if the buffer were row-major
(`ptr[i * cols + j]`). This backend does that to every input a device is
handed, then runs the spmd interpreter's loop (without run_spmd's check of
its inputs, which would refuse them). The suite catches it on every case
whose inputs are not row-major in memory:

    python -m refir conform --backend conformance.examples.row_major:run

A backend is any callable with refir's backend signature (refir/running/backends.py):
the lowered program, each input's buffer per device, the symbols' values and
the world; it returns each result's buffer per device, as numpy arrays laid
out as the result types say.
"""

from __future__ import annotations

from conformance.mutants.patching import as_row_major
from interp.backend import transport_for
from interp.spmd import NumpyLocal, NumpyTransport, execute
from refir.lowering.lower import Lowered
from refir.world.backend_types import Shards
from refir.world.ranks import World


def run(lowered: Lowered, inputs: Shards, scalars: dict[str, int], world: World) -> Shards:
    squashed = {name: {d: as_row_major(x) for d, x in bufs.items()} for name, bufs in inputs.items()}
    transport = transport_for(world)
    try:
        return execute(lowered, squashed, scalars, NumpyLocal(lowered.types), NumpyTransport(transport))
    finally:
        transport.close()
