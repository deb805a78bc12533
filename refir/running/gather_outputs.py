"""A run's outputs from its per-device results, in one process or under MPI.

In one process every device's buffer is at hand: the results are assembled
(refir.running.assemble_outputs). Under MPI rank 0 receives only the blocks it lacks, after
every rank has vetted every rank's result headers (refir.world.result_headers), so
that a bad block stops every rank alike; with `everywhere`, every buffer
reaches every rank. The messages themselves are refir.world.exchange' business.
"""

from __future__ import annotations

import numpy as np

from refir.checks.verifier import Checked
from refir.errors import RefirError
from refir.ir.program_cache import Memo
from refir.running.assemble_outputs import assemble_outputs, result_blocks
from refir.world.backend_types import Shards
from refir.world.ranks import World
from refir.world.result_headers import vet_headers


def gather_outputs(checked: Checked, shards: Shards, bindings: dict[str, int],
                   world: World, everywhere: bool = False) -> tuple[dict[str, np.ndarray], Shards]:
    """Whole results from per-device blocks; replicas must agree bit for bit.
    Under MPI, on rank 0 only, from the blocks it lacks (replicas elsewhere are
    neither shipped nor compared); with `everywhere`, every device's buffer on
    every rank, replicas compared."""
    if world.comm is None:
        return assemble_outputs(checked, shards, bindings), shards
    from refir.world.exchange import collect_results, gather_to_root
    from refir.world.mpi_job import as_agreed

    if not everywhere:
        wanted = root_blocks(checked, bindings)
        early: dict[str, dict[str, np.ndarray]] = {}

        def assemble_own() -> None:
            """Rank 0 lacking no block: its results, while the headers travel."""
            try:
                early["outputs"] = assemble_outputs(checked, shards, bindings, partial=True)
            except RefirError:
                pass  # vet_headers finds what is wrong, alike on every rank, once the headers are in

        own = assemble_own if world.is_root and not wanted else None
        shards = gather_to_root(shards, world, wanted, lambda every: vet_headers(checked, bindings, every), own)
        if not world.is_root:
            return {}, shards
        if "outputs" in early:
            return early["outputs"], shards
        # vet_headers found every block there and of its shape: this cannot fail
        return assemble_outputs(checked, shards, bindings, partial=True), shards
    shards = collect_results(shards, world)
    try:
        outputs = assemble_outputs(checked, shards, bindings)
    except RefirError as exc:
        as_agreed(exc)  # every rank assembled the same buffers, and met the same error
        raise
    return outputs, shards


def root_blocks(checked: Checked, bindings: dict[str, int]) -> frozenset[tuple[str, int]]:
    """The (result, device) buffers rank 0 lacks to assemble every result:
    each block device 0 does not hold, from the first device that holds it."""

    def work() -> frozenset[tuple[str, int]]:
        wanted = set()
        for r, blocks in result_blocks(checked, bindings).items():
            held = {blocks.keys[0]} if 0 in blocks.keys else set()
            for d, key in blocks.keys.items():
                if key not in held:
                    held.add(key)
                    wanted.add((r, d))
        return frozenset(wanted)

    return _ROOT_BLOCKS.get(checked, tuple(sorted(bindings.items())), work)


_ROOT_BLOCKS: Memo[frozenset[tuple[str, int]]] = Memo()


def share_shards(checked: Checked, shards: Shards, world: World) -> Shards:
    """Every rank's result buffers on every rank, strides preserved."""
    from refir.world.exchange import collect_results

    return collect_results({r: shards.get(r, {}) for r in checked.func.results}, world)


def share_kept(kept: Shards, world: World) -> Shards:
    """Every rank's kept buffers on every rank, with the very strides the rank
    held them in (an input's view of the caller's array included). Kept values
    are for looking at small programs: they travel pickled."""
    from refir.world.mpi_job import COMMS, allgather_obj

    mine = {v: {d: (np.array(x, order="C"), x.strides) for d, x in bufs.items()} for v, bufs in kept.items()}
    merged: Shards = {}
    for part in allgather_obj(COMMS.world(), mine, "every rank's kept buffers"):
        for v, bufs in part.items():
            for d, (dense, strides) in bufs.items():
                merged.setdefault(v, {})[d] = with_strides(dense, strides)
    return merged


def with_strides(x: np.ndarray, strides: tuple[int, ...]) -> np.ndarray:
    """A copy of `x` laid out in memory with the given byte strides (any signs)."""
    if x.size == 0:  # nothing to copy, but the strides are still the buffer's own
        return np.ndarray(x.shape, x.dtype, np.empty(x.itemsize, np.uint8), 0, strides)
    low = sum(min(0, s * (n - 1)) for s, n in zip(strides, x.shape))
    high = sum(max(0, s * (n - 1)) for s, n in zip(strides, x.shape)) + x.itemsize
    out = np.ndarray(x.shape, x.dtype, np.empty(high - low, np.uint8), -low, strides)
    out[...] = x
    return out
