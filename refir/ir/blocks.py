"""How an axis is cut into blocks: one mesh axis (`block`, spec §3.1) or a
nest of several (`nested_block`, §3.2), and a device's block of an axis
(`axis_block`, the one function every slicing, split and block size in refir
comes from). An interleaved axis (a mesh axis with a split factor, §3.4) gives
each device runs, not one block: `cut_runs`, `axis_runs`, `inner_runs`.
refir.ir.types re-exports every name here.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from refir.ir.types import Axis, Mesh, ShardSpec, TensorType


def block(extent: int, parts: int, k: int) -> tuple[int, int]:
    """Block k of an axis of extent E cut over `parts` devices: [start, stop).

    Blocks are ceil(E/parts) long, the last ones shorter or empty (spec §3.1,
    shard_c1): torch.chunk's sizes as DTensor pads them, and nvFuser's outer split
    by ceilDiv. Every slicing, split and block size in refir comes from here."""
    size = -(-extent // parts) if parts else 0
    start = min(k * size, extent)
    return start, min(start + size, extent)


def block_size(extent: int, parts: int, k: int) -> int:
    start, stop = block(extent, parts, k)
    return stop - start


def nested_block(extent: int, parts: tuple[int, ...], ks: tuple[int, ...]) -> tuple[int, int]:
    """The block of an axis cut over a nest of mesh axes (spec §3.2): cut by
    `block` over the first, that block cut over the next, and so on (DTensor's
    rule for one dim sharded on several mesh dims). One mesh axis: `block`."""
    start, stop = 0, extent
    for n, k in zip(parts, ks):
        lo, hi = block(stop - start, n, k)
        start, stop = start + lo, start + hi
    return start, stop


def axis_block(mesh: Mesh, a: Axis, extent: int, device: int | None) -> tuple[int, int]:
    """`device`'s part [start, stop) of axis `a` of global `extent` on `mesh` (the
    first, longest one when device is None): the one place that turns a sharding
    into a device's slice; local_shape, block_slices and KeepBlock come from it.
    An interleaved axis has no one block (its runs: axis_runs)."""
    if not a.shard:
        return 0, extent
    if a.split:
        raise ValueError(f"axis {a} is interleaved: a device holds runs of it (axis_runs), not one block")
    dids = a.dids
    ks = tuple(0 for _ in dids) if device is None else tuple(mesh.coord(device, d) for d in dids)
    return nested_block(extent, tuple(mesh.size(d) for d in dids), ks)


def inner_block(mesh: Mesh, have: Axis, want: Axis, extent: int, device: int) -> tuple[int, int]:
    """Where `device`'s block under `want` lies inside its block under `have`,
    an axis whose nest is a prefix of want's (extent: have's block on the
    device): the rest of the nest cuts it, as nested_block does."""
    rest = want.dids[len(have.dids):]
    assert want.dids[:len(have.dids)] == have.dids, f"{have} is not a prefix of {want}"
    return nested_block(extent, tuple(mesh.size(d) for d in rest), tuple(mesh.coord(device, d) for d in rest))


def parts_of(mesh: Mesh, a: Axis) -> int:
    """How many blocks axis `a` is cut into (1 when whole)."""
    return prod(mesh.size(d) for d in a.dids)


def block_number(mesh: Mesh, a: Axis, device: int) -> int:
    """Which of axis a's blocks, in axis order, `device` holds: its coordinates on
    the nest's mesh axes read as one number, outermost first (blocks are ordered
    so: each cut lies inside the one before)."""
    k = 0
    for d in a.dids:
        k = k * mesh.size(d) + mesh.coord(device, d)
    return k


Runs = tuple[tuple[int, int], ...]  # [start, stop) intervals, in the order a buffer holds them


def runs_length(runs: Runs) -> int:
    return sum(stop - start for start, stop in runs)


def cut_runs(length: int, parts: int, split: int, k: int) -> Runs:
    """Where block k lies in a list of `length` elements cut over `parts` devices
    with split factor `split` (spec §3.4): the list cut into `split` pieces by
    `block`, each piece cut by `block` over the devices, block k of every piece
    in piece order. Positions in the list; empty runs left out. split 1: `block`."""
    out = []
    for j in range(split):
        p0, p1 = block(length, split, j)
        b0, b1 = block(p1 - p0, parts, k)
        if b1 > b0:
            out.append((p0 + b0, p0 + b1))
    return tuple(out)


def through(runs: Runs, positions: Runs) -> Runs:
    """The global runs that `positions` (runs of positions in the list `runs`
    holds) pick, adjacent ones joined."""
    out: list[tuple[int, int]] = []
    starts, at = [], 0
    for start, stop in runs:
        starts.append(at)
        at += stop - start
    for p0, p1 in positions:
        for (start, stop), first in zip(runs, starts):
            lo, hi = max(p0, first), min(p1, first + stop - start)
            if lo < hi:
                g0, g1 = start + lo - first, start + hi - first
                if out and out[-1][1] == g0:
                    out[-1] = (out[-1][0], g1)
                else:
                    out.append((g0, g1))
    return tuple(out)


Move = tuple[int, int, int]  # (position in the sender's buffer, in the receiver's, length)


def held_runs(length: int, parts: int, split: int | None, k: int) -> Runs:
    """The positions member k of a team holds of the `length`-long list the team
    shares on one axis: all of it where the team's mesh axis does not cut the
    axis (split None), else its cut_runs (split 1: its one block)."""
    if split is None:
        return ((0, length),) if length else ()
    return cut_runs(length, parts, split, k)


def shared_moves(have: Runs, want: Runs) -> tuple[Move, ...]:
    """What a member holding positions `have` sends one that will hold `want`
    (both increasing, as held_runs gives them): the positions both hold, each
    run as (its position in the sender's buffer, in the receiver's, length), in
    both buffers' order. Every transport's all_to_all and reduce_scatter of runs
    (spec §7) packs and places by these."""
    out: list[Move] = []
    i = j = at_have = at_want = 0
    while i < len(have) and j < len(want):
        (h0, h1), (w0, w1) = have[i], want[j]
        lo, hi = max(h0, w0), min(h1, w1)
        if lo < hi:
            out.append((at_have + lo - h0, at_want + lo - w0, hi - lo))
        if h1 <= w1:
            at_have += h1 - h0
            i += 1
        else:
            at_want += w1 - w0
            j += 1
    return tuple(out)


def runs_overlap(a: Runs, b: Runs) -> Runs:
    """The indices both run lists hold (each increasing), as runs."""
    return tuple((max(a0, b0), min(a1, b1)) for a0, a1 in a for b0, b1 in b if max(a0, b0) < min(a1, b1))


def entries_of(a: Axis) -> tuple[tuple[str, int], ...]:
    """An axis's mesh axes with their split factors, outermost first."""
    return tuple(zip(a.dids, a.split or (1,) * len(a.dids)))


def axis_runs(mesh: Mesh, a: Axis, extent: int, device: int | None) -> Runs:
    """`device`'s part of axis `a` as runs of global indices, in buffer order (the
    first device's when None): each mesh axis of the nest, outermost first, cuts
    the list the one before left (cut_runs). A contiguous axis: its one block."""
    if not a.shard:
        return ((0, extent),) if extent else ()
    if not a.split:
        start, stop = axis_block(mesh, a, extent, device)
        return ((start, stop),) if stop > start else ()
    runs: Runs = ((0, extent),) if extent else ()
    for did, sf in entries_of(a):
        k = 0 if device is None else mesh.coord(device, did)
        runs = through(runs, cut_runs(runs_length(runs), mesh.size(did), sf, k))
    return runs


def axis_length(mesh: Mesh, a: Axis, extent: int, device: int | None) -> int:
    """How long `device`'s part of axis `a` is (runs or one block)."""
    if a.split:
        return runs_length(axis_runs(mesh, a, extent, device))
    start, stop = axis_block(mesh, a, extent, device)
    return stop - start


def inner_runs(mesh: Mesh, have: Axis, want: Axis, length: int, device: int) -> Runs:
    """Where `device`'s part under `want` lies in its part under `have` (positions
    in its buffer of `length`), have's mesh axes and split factors beginning
    want's: the rest of want's entries cut it, each the list the one before left."""
    ours, theirs = entries_of(have), entries_of(want)
    assert theirs[:len(ours)] == ours, f"{have} does not begin {want}"
    runs: Runs = ((0, length),) if length else ()
    for did, sf in theirs[len(ours):]:
        runs = through(runs, cut_runs(runs_length(runs), mesh.size(did), sf, mesh.coord(device, did)))
    return runs


def gathered_order(sizes: list[int], split: int) -> tuple[tuple[int, int, int], ...]:
    """An allgather over a mesh axis with split factor `split` (§3.4): which
    pieces (member, start, stop) of the members' buffers (`sizes` long, in team
    order) make the gathered list, in its order. The members' lists are cuts of
    one list (the block the team shares), so `sum(sizes)` is its length; member k
    holds its cut_runs. split 1: each member's buffer whole, in team order."""
    if split == 1:
        return tuple((k, 0, n) for k, n in enumerate(sizes) if n)
    n, length = len(sizes), sum(sizes)
    found = []
    for k in range(n):
        at = 0
        for p0, p1 in cut_runs(length, n, split, k):
            found.append((p0, k, at, at + p1 - p0))
            at += p1 - p0
    return tuple((k, start, stop) for _, k, start, stop in sorted(found))


def gathered_split(src: Axis) -> int:
    """The split factor of the mesh axis an allgather of `src` drops (its innermost)."""
    return entries_of(src)[-1][1] if src.shard else 1


def resplit(a: Axis, shard: str | tuple[str, ...] | None) -> tuple[int, ...]:
    """The split factors axis `a` keeps when its mesh axes become `shard`: those of
    the mesh axes both begin with, 1 for every other (a collective adds or drops
    a nest's innermost mesh axis; the ones outside it keep their factors)."""
    old, new = entries_of(a), (() if not shard else (shard,) if isinstance(shard, str) else shard)
    out = []
    for i, d in enumerate(new):
        if i < len(old) and old[i][0] == d and all(o[0] == n for o, n in zip(old[:i], new[:i])):
            out.append(old[i][1])
        else:
            out.append(1)
    return tuple(out)


def block_index(t: TensorType, device: int, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """Which part of an array of global `shape` the device holds, as an index that
    reads and writes it: block_slices, or (an interleaved axis, §3.4) np.ix_ of
    every axis's global indices in buffer order."""
    if not t.interleaved():  # types.block_slices
        return tuple(slice(*axis_block(t.mesh, a, n, device)) if a.shard else slice(None)
                     for a, n in zip(t.axes, shape))
    return np.ix_(*(axis_indices(t, i, n, device) for i, n in enumerate(shape)))


def axis_indices(t: TensorType, i: int, extent: int, device: int) -> np.ndarray:
    """The global indices of axis i that `device` holds, in its buffer's order."""
    a = t.axes[i]
    if not a.shard:
        return np.arange(extent)
    runs = axis_runs(t.mesh, a, extent, device)
    return np.concatenate([np.arange(*r) for r in runs]) if runs else np.arange(0)


def shard_text(shard: str | tuple[str, ...] | None, split: tuple[int, ...] = ()) -> str:
    """`DIDx`, or a nest `(DIDy,DIDx)`, as the text format writes it; a split
    factor other than 1 follows its mesh axis (`DIDx:3`, `(DIDy:2,DIDx)`)."""
    dids = () if not shard else (shard,) if isinstance(shard, str) else shard
    names = [d if f == 1 else f"{d}:{f}" for d, f in zip(dids, split or (1,) * len(dids))]
    return f"({','.join(names)})" if isinstance(shard, tuple) else (names[0] if names else str(shard))


def dids_of(shard: ShardSpec | None) -> tuple[str, ...]:
    """A shard as its mesh axes, outermost first."""
    return () if not shard else (shard,) if isinstance(shard, str) else shard


def as_shard(dids: tuple[str, ...]) -> ShardSpec | None:
    """The shard of mesh axes `dids` (outermost first): None, one name, or a nest."""
    return None if not dids else dids[0] if len(dids) == 1 else dids


def block_shape(shape: tuple[int, ...], index: tuple[slice, ...]) -> tuple[int, ...]:
    """The shape of `index` (block_slices) in an array of `shape`."""
    return tuple(len(range(*s.indices(n))) if isinstance(s, slice) else s.size
                 for s, n in zip(index, shape)) + shape[len(index):]
