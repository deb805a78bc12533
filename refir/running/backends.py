"""Which backend runs a program, and in which world.

A backend is any callable of the `Backend` signature: the lowered program,
the inputs of each device this process hosts, the bindings and the world in;
each result's per-device buffers (host numpy arrays, laid out as the backend
chose) out. It is named 'spmd', 'gpu' or 'module:callable'.
"""

from __future__ import annotations

import importlib
from dataclasses import replace

from refir.checks.limits import DEVICES
from refir.checks.verifier import Checked
from refir.errors import InputError, RefirError, RunError
from refir.ir.program_cache import Memo
from refir.lowering.lower import Lowered
from refir.running.bindings import check_world, devices_needed
from refir.world.backend_types import Backend, Shards
from refir.world.ranks import World, local_world, mpi_world, watched_run


def backend_named(name: str) -> Backend:
    """'spmd', 'gpu', or 'module:callable' for a backend of your own."""
    if name == "spmd":
        from interp.backend import run_spmd

        return run_spmd
    if name == "gpu":
        from gpu_backend.backend import run_gpu

        return run_gpu
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            found = getattr(importlib.import_module(module), attr)
        except Exception as exc:  # a backend module of the user's may fail on import in any way
            raise InputError(f"cannot load backend {name!r}: {type(exc).__name__}: {exc}") from exc
        return _reported(name, found)
    raise InputError(f"unknown backend {name!r} (global, spmd, gpu, or module:callable)")


def _reported(name: str, backend: Backend) -> Backend:
    """A backend of the user's: whatever it raises becomes a RunError naming it."""

    def call(lowered: Lowered, inputs: Shards, bindings: dict[str, int], world: World) -> Shards:
        try:
            with watched_run(world):  # under MPI, one rank's failure ends every rank's run at once
                out = backend(lowered, inputs, bindings, world)
        except RefirError:
            raise
        except Exception as exc:
            raise RunError(f"backend {name!r} failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(out, dict) or not all(isinstance(v, dict) for v in out.values()):
            raise RunError(f"backend {name!r} returned a {type(out).__name__}, not a dict of "
                           "{result name: {device: numpy array}}")
        return out

    return call


def resolve_world(checked: Checked, world: int | None) -> World:
    """The world a run of `checked` runs in: the MPI launch's, or in one
    process `world` ranks (by default as many as the program needs)."""
    return world_for(checked, world, mpi_world())


def world_for(checked: Checked, world: int | None, mpi: World | None) -> World:
    """resolve_world, given what mpi_world() found."""
    if mpi is not None:
        if world is not None and world != mpi.size:
            raise InputError(f"--world {world} under an MPI launch of {mpi.size} ranks")
        _WORLD_CHECKED.get(checked, mpi.size, lambda: check_world(checked, mpi.size))
        return mpi

    if world is not None and (isinstance(world, bool) or not isinstance(world, int) or world < 1):
        raise InputError(f"world={world!r}: a world is a whole number of ranks, at least one "
                         f"(this program needs {devices_needed(checked)})")
    if world is not None:  # devices_c1 (devices_c3: every device of a world is hosted, holding blocks or not)
        DEVICES.check(world, "world= asks for")

    def work() -> World:
        size = world if world is not None else devices_needed(checked)
        check_world(checked, size)
        return local_world(size)

    return _WORLDS.get(checked, world, work)  # a frozen World: shared between runs


_WORLDS: Memo[World] = Memo()
_WORLD_CHECKED: Memo[None] = Memo()  # under MPI: every device a mesh names is a rank


def backend_world(world: World) -> World:
    """The world a backend runs in: under MPI, with refir's own communicator
    (refir.world.mpi_job.COMMS), so that its messages never meet the caller's."""
    if world.comm is None:
        return world
    from refir.world.mpi_job import COMMS

    comm = COMMS.world()
    kept = _BACKEND_WORLD[0]
    if kept is None or kept.comm is not comm or (kept.size, kept.hosted) != (world.size, world.hosted):
        kept = _BACKEND_WORLD[0] = replace(world, comm=comm)  # again after refir.close(): a new communicator
    return kept


_BACKEND_WORLD: list[World | None] = [None]  # the last world handed to a backend (frozen, so shared)
