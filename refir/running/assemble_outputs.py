"""Whole results put together from the blocks each device returned.

Where each device's block of a result lies is worked out once per program and
bindings. Devices that hold copies of one block must hold the same bits; a
block that is missing, misshapen or of another dtype is an error naming the
device. Under MPI, refir.running.gather_outputs brings the blocks to rank 0 first.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from interp.impls import fold
from refir.checks.verifier import Checked
from refir.errors import MismatchError, RunError
from refir.ir.program_cache import Memo
from refir.ir.types import (
    TensorType,
    axis_runs,
    block_index,
    block_shape,
    block_slices,
    global_shape,
    local_shape,
    runs_length,
)
from refir.world.backend_types import Shards


@dataclass(frozen=True)
class ResultBlocks:
    """Where a value's blocks lie in a global array of some shape: each device's
    block (as (start, stop) per axis) and its local shape, and every block there is."""

    keys: dict[int, tuple]
    shapes: dict[int, tuple[int, ...]]
    every: frozenset[tuple]


def blocks_of(t: TensorType, shape: tuple[int, ...]) -> ResultBlocks:
    """A partial value's key ends in the device's place in its team (§3.3): each term
    is a block of its own, folded into the whole by assemble."""
    if t.interleaved():  # §3.4: a block is its runs on each axis
        keys = {d: tuple(axis_runs(t.mesh, a, n, d) if a.shard else ((0, n),) for a, n in zip(t.axes, shape))
                + _term(t, d) for d in t.mesh.devices}
        shapes = {d: tuple(runs_length(r) for r in k[:t.rank]) + shape[t.rank:] for d, k in keys.items()}
        return ResultBlocks(keys, shapes, frozenset(keys.values()))
    index = {d: block_slices(t, d, shape) for d in t.mesh.devices}
    keys = {d: tuple((s.start, s.stop) for s in i) + _term(t, d) for d, i in index.items()}
    return ResultBlocks(keys, {d: block_shape(shape, i) for d, i in index.items()}, frozenset(keys.values()))


def result_blocks(checked: Checked, bindings: dict[str, int]) -> dict[str, ResultBlocks]:
    """Every result's blocks under `bindings` (worked out once per program and bindings)."""

    def work() -> dict[str, ResultBlocks]:
        return {r: blocks_of(checked.types[r], global_shape(checked.types[r], bindings))
                for r in checked.func.results}

    return _RESULT_BLOCKS.get(checked, tuple(sorted(bindings.items())), work)


_RESULT_BLOCKS: Memo[dict[str, ResultBlocks]] = Memo()


@dataclass
class Assembled:
    """A global array put together from per-device blocks, and what went wrong."""

    whole: np.ndarray | None  # None unless every block was delivered
    missing: list[int] = field(default_factory=list)  # devices that returned no array
    misshapen: list[int] = field(default_factory=list)  # devices whose block has the wrong shape or dtype
    disagree: list[tuple[int, int]] = field(default_factory=list)  # (first holder, device): copies differ


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit (NaN payloads, -0.0): as unsigned integers of the same width,
    without copying either array."""
    if a.shape == b.shape and a.dtype == b.dtype and a.itemsize in (1, 2, 4, 8):
        bits = np.dtype(f"u{a.itemsize}")
        return bool(np.array_equal(a.view(bits), b.view(bits)))
    return a.tobytes() == np.ascontiguousarray(b).tobytes()


def assemble(t: TensorType, buffers: dict[int, Any], bindings: dict[str, int],
             same: Callable[[np.ndarray, np.ndarray], bool] = same_bits,
             devices: Collection[int] | None = None, blocks: ResultBlocks | None = None) -> Assembled:
    """The global array of type `t` from each device's block (of `devices`, by
    default all of the mesh); devices holding copies of one block must hold the
    `same` values. `blocks`: where they lie, if the caller has it at hand. A
    single C-contiguous block that is the whole array is returned as it is,
    not copied."""
    shape, dtype = global_shape(t, bindings), t.np_dtype
    blocks = blocks or blocks_of(t, shape)
    out = Assembled(None)
    owner: dict[tuple, int] = {}
    firsts: list[tuple[int, np.ndarray]] = []
    for d in t.mesh.devices:
        if devices is not None and d not in devices:
            continue
        key = blocks.keys[d]
        block = buffers.get(d)
        if not isinstance(block, np.ndarray):
            out.missing.append(d)
        elif block.shape != blocks.shapes[d] or block.dtype != dtype:
            out.misshapen.append(d)
        elif key in owner:
            if not same(block, buffers[owner[key]]):
                out.disagree.append((owner[key], d))
        else:
            owner[key] = d
            firsts.append((d, block))
    if len(owner) < len(blocks.every):
        return out  # whole stays None: a block is missing
    if t.partial:
        firsts = _folded(t, firsts, blocks)
    if len(firsts) == 1 and firsts[0][1].flags.c_contiguous:
        out.whole = firsts[0][1]
    else:
        out.whole = np.empty(shape, dtype)
        for d, block in firsts:
            out.whole[block_index(t, d, shape)] = block
    return out


def _term(t: TensorType, d: int) -> tuple:
    return (t.mesh.team(d, t.partial).index(d),) if t.partial else ()


def _folded(t: TensorType, firsts: list[tuple[int, np.ndarray]], blocks: ResultBlocks) -> list[tuple[int, np.ndarray]]:
    """The terms of each block of a partial value folded in team order (interp.impls.fold:
    the reduction the value stands for; avg, the sum divided by the team's size)."""
    terms: dict[tuple, list[tuple[int, int, np.ndarray]]] = {}
    for d, block in firsts:
        key = blocks.keys[d]
        terms.setdefault(key[:-1], []).append((key[-1], d, block))
    out = []
    for group in terms.values():
        group.sort(key=lambda g: g[0])
        kind = "sum" if t.partial_kind == "avg" else t.partial_kind
        with np.errstate(all="ignore"):
            whole = fold(kind, [np.asarray(b) for _, _, b in group])
            if t.partial_kind == "avg":
                whole = (whole / whole.dtype.type(len(group))).astype(whole.dtype)
        out.append((group[0][1], whole))
    return out


def assemble_outputs(checked: Checked, shards: Shards, bindings: dict[str, int],
                     partial: bool = False) -> dict[str, np.ndarray]:
    """Every result from `shards`: every device's buffer, or where `partial`
    those at hand (at least one of each block). Its errors are the ones
    refir.world.result_headers finds from the headers under MPI: keep them alike."""
    outputs = {}
    where = result_blocks(checked, bindings)
    for r in checked.func.results:
        t = checked.types[r]
        got = assemble(t, shards.get(r, {}), bindings, devices=set(shards.get(r, {})) if partial else None,
                       blocks=where[r])
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
        if got.whole is None:
            raise RunError(f"no device returned every block of {r!r}")
        outputs[r] = got.whole
    return outputs
