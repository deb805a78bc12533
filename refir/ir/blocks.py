"""How an axis is cut into blocks: one mesh axis (`block`, spec §3.1) or a
nest of several (`nested_block`, §3.2), and a device's block of an axis
(`axis_block`, the one function every slicing, split and block size in refir
comes from). refir.ir.types re-exports every name here.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from refir.ir.types import Axis, Mesh


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
    into a device's slice; local_shape, block_slices and KeepBlock come from it."""
    if not a.shard:
        return 0, extent
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
