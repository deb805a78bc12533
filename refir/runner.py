"""`refir.run`: bind and check inputs, lower, run on a backend, gather results.

Inputs and outputs are global arrays. Each device is handed a view of the
caller's array (any strides), or a copy dense in the declared layout where the
parameter type has one. Outputs come back whole, and per device exactly as the
backend laid them out.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from refir.arrays import host_array
from refir.bindings import bind_inputs, check_world, devices_needed
from refir.errors import InputError, MismatchError, RefirError, RunError
from refir.limits import check_shape
from refir.lower import Lowered, lower
from refir.program import Program
from refir.types import TensorType, block_slices, global_shape, local_shape, materialize
from refir.verify import Checked, verify
from refir.world import World, local_world, mpi_world

Shards = dict[str, dict[int, np.ndarray]]
# A backend runs a lowered program on the ranks `world.hosted`: per-device
# inputs in, the results' per-device buffers (as host numpy arrays) out.
Backend = Callable[[Lowered, Shards, dict[str, int], World], Shards]


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]
    shards: Shards = field(default_factory=dict)
    backend: str = "global"
    lowered: Lowered | None = None
    bindings: dict[str, int] = field(default_factory=dict)
    kept: Shards = field(default_factory=dict)  # with keep="all": every value's per-device buffers


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
    mpi = mpi_world()
    if mpi is not None:
        if world is not None and world != mpi.size:
            raise InputError(f"--world {world} under an MPI launch of {mpi.size} ranks")
        check_world(checked, mpi.size)
        return mpi
    size = world if world is not None else devices_needed(checked)
    check_world(checked, size)
    return local_world(size)


def shard_inputs(checked: Checked, inputs: dict[str, np.ndarray], hosted: tuple[int, ...]) -> Shards:
    shards: Shards = {}
    for p in checked.func.params:
        x = inputs[p.name]
        shards[p.name] = {}
        for d in hosted:
            if d in p.type.mesh:
                block = x[block_slices(p.type, d, x.shape) + (Ellipsis,)]  # a view, also of a 0-d array
                shards[p.name][d] = block if p.type.layout is None else materialize(block, p.type.layout)
    return shards


@dataclass
class Assembled:
    """A global array put together from per-device blocks, and what went wrong."""

    whole: np.ndarray | None  # None unless every block was delivered
    missing: list[int] = field(default_factory=list)  # devices that returned no array
    misshapen: list[int] = field(default_factory=list)  # devices whose block has the wrong shape or dtype
    disagree: list[tuple[int, int]] = field(default_factory=list)  # (first holder, device): copies differ


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.tobytes() == np.ascontiguousarray(b).tobytes()


def assemble(t: TensorType, buffers: dict[int, Any], bindings: dict[str, int],
             same: Callable[[np.ndarray, np.ndarray], bool] = same_bits) -> Assembled:
    """The global array of type `t` from each device's block; devices holding
    copies of one block must hold the `same` values."""
    whole = np.zeros(global_shape(t, bindings), t.np_dtype)
    out = Assembled(whole)
    owner: dict[tuple, int] = {}
    keys = set()
    for d in t.mesh.devices:
        index = block_slices(t, d, whole.shape)
        key = tuple((s.start, s.stop) for s in index)
        keys.add(key)
        block = buffers.get(d)
        if not isinstance(block, np.ndarray):
            out.missing.append(d)
        elif block.shape != whole[index].shape or block.dtype != whole.dtype:
            out.misshapen.append(d)
        elif key in owner:
            if not same(block, whole[index]):
                out.disagree.append((owner[key], d))
        else:
            owner[key] = d
            whole[index] = block
    if len(owner) < len(keys):
        out.whole = None
    return out


def gather_outputs(checked: Checked, shards: Shards, bindings: dict[str, int],
                   world: World) -> tuple[dict[str, np.ndarray], Shards]:
    """Whole results from per-device blocks; replicas must agree bit for bit."""
    if world.comm is not None:
        shards = share_shards(checked, shards, world)
    outputs = {}
    for r in checked.func.results:
        t = checked.types[r]
        got = assemble(t, shards.get(r, {}), bindings)
        if got.missing:
            raise RunError(f"the backend returned no buffer of {r!r} for device {got.missing[0]}")
        if got.misshapen:
            d = got.misshapen[0]
            block = shards[r][d]
            raise MismatchError(f"device {d} holds {r!r} with local shape {block.shape} and dtype {block.dtype}, "
                                f"expected {local_shape(t, bindings)} and {t.np_dtype}")
        if got.disagree:
            first, d = got.disagree[0]
            raise MismatchError(f"replicas of {r!r} disagree: device {first} and device {d} "
                                "hold different values for the same block")
        assert got.whole is not None
        outputs[r] = got.whole
    return outputs, shards


def share_shards(checked: Checked, shards: Shards, world: World) -> Shards:
    """Every rank's result buffers on every rank, strides preserved."""
    return share_buffers(shards, world, checked.func.results)


def share_kept(kept: Shards, world: World) -> Shards:
    """Every rank's kept buffers on every rank, with the very strides the rank
    held them in (an input's view of the caller's array included)."""
    mine = {v: {d: (np.array(x, order="C"), x.strides) for d, x in bufs.items()} for v, bufs in kept.items()}
    merged: Shards = {}
    for part in world.comm.allgather(mine):
        for v, bufs in part.items():
            for d, (dense, strides) in bufs.items():
                merged.setdefault(v, {})[d] = with_strides(dense, strides)
    return merged


def with_strides(x: np.ndarray, strides: tuple[int, ...]) -> np.ndarray:
    """A copy of `x` laid out in memory with the given byte strides (any signs)."""
    if x.size == 0:
        return x
    low = sum(min(0, s * (n - 1)) for s, n in zip(strides, x.shape))
    high = sum(max(0, s * (n - 1)) for s, n in zip(strides, x.shape)) + x.itemsize
    out = np.ndarray(x.shape, x.dtype, np.empty(high - low, np.uint8), -low, strides)
    out[...] = x
    return out


def share_buffers(shards: Shards, world: World, names: tuple[str, ...] | list[str]) -> Shards:
    """Every rank's buffers of `names` on every rank, strides preserved: each
    buffer travels dense in its memory order, with that order."""
    mine = {
        r: {d: (np.transpose(x, _order(x)).copy(order="C"), _order(x)) for d, x in bufs.items()}
        for r, bufs in shards.items()
    }
    merged: Shards = {r: {} for r in names}
    for part in world.comm.allgather(mine):
        for r, bufs in part.items():
            for d, (dense, order) in bufs.items():
                merged[r][d] = dense.transpose(np.argsort(order))
    return merged


def _order(x: np.ndarray) -> tuple[int, ...]:
    """Axes from the largest stride to the smallest. An extent-1 axis goes inside
    an axis of equal stride, so that a dense buffer comes back with its very strides."""
    return tuple(sorted(range(x.ndim), key=lambda a: (-abs(x.strides[a]), x.shape[a] == 1, a)))


def run(program: Program | str, inputs: dict[str, Any], backend: str = "spmd", world: int | None = None,
        func: str | None = None, keep: str | None = None) -> RunResult:
    """Run `program` on global `inputs`; see RunResult. keep="all" (spmd only)
    keeps every input's and intermediate's per-device buffers in `kept`."""
    from refir import load

    if not isinstance(program, Program):
        program = load(program)
    if keep not in (None, "all"):
        raise InputError(f"keep={keep!r}: write keep='all' or leave it out")
    if keep and backend != "spmd":
        raise InputError(f"keep='all' needs the spmd backend, not {backend!r}")
    checked = verify(program, func)
    inputs = {name: host_array(name, x) for name, x in inputs.items()}
    bindings = bind_inputs(checked, inputs)
    for name, t in checked.types.items():  # intermediates too, before any is allocated
        check_shape(global_shape(t, bindings), f"{name}: {t}")
    if backend == "global":
        from interp.global_eval import eval_global

        return RunResult(eval_global(checked, inputs, bindings), {}, "global", None, bindings)
    w = resolve_world(checked, world)
    lowered = lower(checked)
    kept: Shards = {}
    local = shard_inputs(checked, inputs, w.hosted)
    if keep:
        from interp.backend import run_spmd

        shards = run_spmd(lowered, local, bindings, w, keep=kept)
        if w.comm is not None:
            kept = share_kept(kept, w)
    else:
        shards = backend_named(backend)(lowered, local, bindings, w)
    outputs, shards = gather_outputs(checked, shards, bindings, w)
    return RunResult(outputs, shards, backend, lowered, bindings, kept)
