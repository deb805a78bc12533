"""The spmd backend: the lowered program on numpy, in one process or under MPI."""

from __future__ import annotations

from interp.spmd import NumpyLocal, NumpyTransport, execute
from interp.transport import InProcess, Transport
from refir.lowering.lower import Lowered
from refir.running.bindings import check_local_inputs
from refir.world.backend_types import Shards
from refir.world.ranks import World, watched_run


def transport_for(world: World) -> Transport:
    if world.comm is None:
        return InProcess(world.size)
    from interp.mpi.transport import MpiTransport

    return MpiTransport()


def run_spmd(lowered: Lowered, inputs: Shards, scalars: dict[str, int], world: World,
             keep: Shards | None = None) -> Shards:
    """With `keep`, every intermediate's per-device buffers land there too."""
    with watched_run(world):  # under MPI: a failure here ends the others' waits at once, and theirs this one's
        check_local_inputs(lowered.checked, inputs, scalars)
        transport = transport_for(world)
        try:
            return execute(lowered, inputs, scalars, NumpyLocal(lowered.types), NumpyTransport(transport), keep)
        finally:
            transport.close()
