"""DTensor's vocabulary in refir: (global shape, device mesh, placements) <-> a
refir tensor type, and the resharding program between two placements.

Placements are per mesh dimension, outermost first, as in torch DTensor.
refir names mesh axes from the innermost: mesh dimension i of an n-D mesh is
DID[x, y, z][n - 1 - i] (DIDx is the last mesh dimension). So on a 2x2 mesh
`[Shard(0), Replicate()]` is `f32[8@DIDy, 6]` and `[Replicate(), Shard(1)]` is
`f32[8, 6@DIDx]` (docs/spec.md, "DTensor placements").

`Partial(op)` is refir's partial type (docs/spec.md §3.3): `[Shard(0), Partial(sum)]`
on a 2x2 mesh is `f32[8@DIDy, 6] partial[sum@DIDx]`, and `redistribute_program`
reshards it with one `set`: to Replicate an allreduce, to Shard a reduce_scatter,
from Replicate to Partial a local partition (refir's terms: the value on the
team's first device, the identity elsewhere, where DTensor puts x / n on each).
`Partial(avg)` is a source (float dtypes, a power-of-two team); no exact avg terms
of a replicated value exist, so it is no target from Replicate.

The older form stays for the peers and gpu checks (`contributions=True`): a
partial input enters as its contributions, one more leading axis per partial
mesh dimension, sharded on it, reduced by a `sum`/`max`/... over those axes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import prod

import numpy as np

from refir.errors import InputError
from refir.ir.program import Program
from refir.ir.types import (
    DIDS,
    DTYPES,
    Axis,
    Mesh,
    TensorType,
    as_shard,
    block_index,
    entries_of,
    shard_text,
)


@dataclass(frozen=True)
class Shard:
    dim: int

    def __str__(self) -> str:
        return f"Shard({self.dim})"


@dataclass(frozen=True)
class StridedShard:
    """DTensor's `_StridedShard(dim, sf)`: dim cut into sf pieces, each piece cut
    over the mesh dimension (refir's interleaved axis `E@DIDx:sf`, spec §3.4)."""

    dim: int
    split_factor: int

    def __str__(self) -> str:
        return f"_StridedShard(dim={self.dim}, sf={self.split_factor})"


@dataclass(frozen=True)
class Replicate:
    def __str__(self) -> str:
        return "Replicate()"


@dataclass(frozen=True)
class Partial:
    op: str = "sum"

    def __str__(self) -> str:
        return f"Partial({self.op})"


Placement = Shard | StridedShard | Replicate | Partial
# DTensor's reduce ops with an exact refir reduction.
PARTIAL_KINDS = {"sum": "sum", "max": "max", "min": "min", "prod": "prod", "product": "prod", "avg": "avg"}
_PLACEMENT = re.compile(r"^(?:S(\d+)|Shard\((\d+)\)|R|Replicate\(\)|P|P\((\w+)\)|Partial\((?:\"?(\w*)\"?)\))$")
# `_S(0,2)` (DTensor's str), `_StridedShard(dim=0,sf=2)` (its repr), `_StridedShard(0,split_factor=2)`
_STRIDED = re.compile(r"^(?:_S|_StridedShard)\((?:dim=)?(\d+),(?:sf=|split_factor=)?(\d+)\)$")


def parse_placements(text: str) -> tuple[Placement, ...]:
    """`S0,P` or `Shard(0), Partial(sum)` or `R,S1` or `_S(0,2),S0` (a _StridedShard)."""
    out: list[Placement] = []
    for item in re.split(r",(?![^()]*\))", text.replace(" ", "")):
        strided = _STRIDED.match(item)
        if strided is not None:
            dim, sf = int(strided.group(1)), int(strided.group(2))
            if sf < 1:
                raise InputError(f"bad placement {item!r}: a split factor is 1 or more")
            out.append(StridedShard(dim, sf) if sf > 1 else Shard(dim))  # sf 1: Shard's own blocks
            continue
        m = _PLACEMENT.match(item)
        if m is None:
            raise InputError(f"bad placement {item!r}: write S<dim>, R, P, P(max), Shard(d), Replicate(), "
                             "Partial(op), _S(dim,sf) or _StridedShard(dim=d,sf=f)")
        shard = m.group(1) or m.group(2)
        if shard is not None:
            out.append(Shard(int(shard)))
        elif item.startswith("R"):
            out.append(Replicate())
        else:
            out.append(Partial(m.group(3) or m.group(4) or "sum"))
    return tuple(out)


def parse_mesh(text: str, name: str = "m") -> Mesh:
    """`4` -> devices 0..3; `2x2` -> [[0, 1], [2, 3]] (row-major, as torch's init_device_mesh)."""
    try:
        shape = tuple(int(n) for n in text.lower().split("x"))
    except ValueError:
        raise InputError(f"bad mesh {text!r}: write sizes joined by x, e.g. 4 or 2x2") from None
    if not 1 <= len(shape) <= 3 or min(shape) < 1:
        raise InputError(f"bad mesh {text!r}: 1 to 3 dimensions of at least one device")
    return Mesh(name, shape, tuple(range(prod(shape))))


def did_of(mesh: Mesh, mesh_dim: int) -> str:
    """The refir name of DTensor's mesh dimension `mesh_dim` (outermost is 0)."""
    return DIDS[mesh.ndim - 1 - mesh_dim]


def mesh_dim_of(mesh: Mesh, did: str) -> int:
    return mesh.axis_of(did)


def to_refir(shape: tuple[int, ...], mesh: Mesh, placements: tuple[Placement, ...],
             dtype: str = "f32") -> TensorType:
    """The refir type of a DTensor; partial placements become the type's `partial`
    mesh axes (refir's model of a value that still needs its reduction)."""
    if len(placements) != mesh.ndim:
        raise InputError(f"{len(placements)} placements for a {mesh.ndim}-D mesh: give one per mesh dimension")
    shards: dict[int, tuple[str, ...]] = {}  # a dim on several mesh dims: a nest, outermost first (§3.2)
    splits: dict[int, tuple[int, ...]] = {}  # each mesh dim's split factor (a _StridedShard's, §3.4)
    partial: list[str] = []
    kinds: set[str] = set()
    for i, p in enumerate(placements):
        did = did_of(mesh, i)
        if isinstance(p, (Shard, StridedShard)):
            if not 0 <= p.dim < len(shape):
                raise InputError(f"{p} on mesh dimension {i}: the tensor has {len(shape)} dimensions")
            shards[p.dim] = (*shards.get(p.dim, ()), did)
            splits[p.dim] = (*splits.get(p.dim, ()), p.split_factor if isinstance(p, StridedShard) else 1)
        elif isinstance(p, Partial):
            if p.op not in PARTIAL_KINDS:
                raise InputError(f"{p}: refir reduces partial values exactly with sum, max, min, prod or avg, "
                                 f"not {p.op!r}")
            partial.append(did)
            kinds.add(PARTIAL_KINDS[p.op])
    if len(kinds) > 1:
        raise InputError("partial placements with different reduce ops: refir's partial values have one op")
    axes = tuple(Axis(n, as_shard(shards.get(i, ())), split=splits.get(i, ())) for i, n in enumerate(shape))
    return TensorType(dtype, axes, mesh, None, tuple(sorted(partial, key=mesh.axis_of)),
                      kinds.pop() if kinds else "")


def from_refir(t: TensorType) -> tuple[tuple[int, ...], Mesh, tuple[Placement, ...]]:
    """A refir type (static extents) as DTensor's (shape, mesh, placements)."""
    if any(not isinstance(a.extent, int) for a in t.axes):
        raise InputError(f"{t} has symbolic extents; DTensor needs a concrete shape")
    kind = {v: k for k, v in PARTIAL_KINDS.items() if k != "product"}.get(t.partial_kind, "sum")
    placements: list[Placement] = []
    for a in t.axes:
        if list(a.dids) != sorted(a.dids, key=t.mesh.axis_of):
            raise InputError(f"{t}: the nest {shard_text(a.shard)} cuts an inner mesh dimension first; DTensor's "
                             "Shard placements cut in mesh-dimension order (outermost first) only")
    for i in range(t.mesh.ndim):
        did = did_of(t.mesh, i)
        dim = next((d for d, a in enumerate(t.axes) if did in a.dids), None)
        sf = 1 if dim is None else dict(entries_of(t.axes[dim]))[did]
        placements.append(StridedShard(dim, sf) if dim is not None and sf > 1 else Shard(dim) if dim is not None
                          else Partial(kind) if did in t.partial else Replicate())
    return tuple(int(a.extent) for a in t.axes), t.mesh, tuple(placements)


def contributions_type(t: TensorType) -> TensorType:
    """The input a partial value enters a program as: one leading axis per partial
    mesh axis (outermost first), of that axis's size, sharded on it."""
    lead = tuple(Axis(t.mesh.size(did), did) for did in t.partial)
    return TensorType(t.dtype, lead + t.axes, t.mesh, None)


def local_block(t: TensorType, value: np.ndarray, device: int, contributions: np.ndarray | None = None) -> np.ndarray:
    """What `device` holds of a DTensor of type `t` whose global value is `value`;
    for a partial type, its own contribution (from `contributions`)."""
    if t.partial:
        if contributions is None:
            raise InputError("a partial DTensor's blocks come from its contributions")
        c = contributions_type(t)  # block_index: an interleaved axis's runs (§3.4) too
        return contributions[block_index(c, device, contributions.shape)][(0,) * len(t.partial)]
    return value[block_index(t, device, value.shape)]


def redistribute_program(mesh: Mesh, shape: tuple[int, ...], src: tuple[Placement, ...],
                         dst: tuple[Placement, ...], dtype: str = "f32", contributions: bool = False) -> Program:
    """`y = redistribute(x)` as a refir program, built with refir.frontends.builder: one
    `set` from the source's type to the target's, partial ones included. With
    `contributions`, a partial source enters as its contributions `x_parts` instead
    (see contributions_type) and the target may not be partial."""
    from refir.frontends.builder import Builder

    if dtype not in DTYPES:  # the source enters as a whole type, which the builder takes as it is
        raise InputError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
    s, d = to_refir(shape, mesh, src, dtype), to_refir(shape, mesh, dst, dtype)
    if d.partial and contributions:
        raise InputError(f"redistributing to {', '.join(map(str, dst))}: a Partial target needs the partial type, "
                         "not contributions")
    new = [k for k in d.partial if (k not in s.partial or s.partial_kind != d.partial_kind)]
    if d.partial_kind == "avg" and new:
        raise InputError(f"redistributing to {', '.join(map(str, dst))}: no terms of an avg fold exactly back to "
                         "the value in team order (copies of x on every device would round at x + x + x; "
                         "DTensor's Partial._partition_value partitions sum alone); refir's avg targets come "
                         "only from avg sources")
    if s.partial and d.partial and s.partial_kind != d.partial_kind:
        raise InputError(f"redistributing {', '.join(map(str, src))} to {', '.join(map(str, dst))}: a partial "
                         "changes kind only through Replicate (redistribute to R first)")
    b = Builder()
    b.mesh(nested_devices(mesh), name=mesh.name)
    if s.partial and contributions:
        c = contributions_type(s)
        x = b.input("x_parts", dtype, c.axes)
        y = x.reduce(s.partial_kind, dims=range(len(s.partial)), name="y", result_type=d)
    else:
        x = b.input("x", s)
        y = x.set(name="y", result_type=d)
    b.output(y)
    return b.build()


def nested_devices(mesh: Mesh) -> list:
    flat = list(mesh.devices)
    for n in reversed(mesh.shape[1:]):
        flat = [flat[i:i + n] for i in range(0, len(flat), n)]
    return flat
