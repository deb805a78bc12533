"""Meshes, axes and tensor types, and what they imply for local buffers.

A type describes the *global* tensor. Sharding, mesh and layout then say which
block each device holds and how that block lies in memory.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import cache, cached_property
from typing import Any

import numpy as np

from refir.ir.blocks import (  # noqa: F401  (re-exported: every module imports them from here)
    Runs,
    as_shard,
    axis_block,
    axis_length,
    axis_runs,
    block,
    block_index,
    block_number,
    block_shape,
    block_size,
    dids_of,
    entries_of,
    inner_block,
    nested_block,
    parts_of,
    resplit,
    runs_length,
    shard_text,
)
from refir.ir.extents import Extent, ExtentExpr, evaluate, shape_symbols, symbols_of  # noqa: F401  (re-exported)
from refir.ir.layouts import (  # noqa: F401  (re-exported: every module imports them from here)
    axis_first,
    dense_strides,
    empty_in_order,
    has_layout,
    materialize,
    memory_order,
    receive_into,
    wire_bytes,
)

# bfloat16 comes from ml_dtypes, imported where a bf16 is first met: importing
# ml_dtypes 0.7 takes about half a second of CPU (it registers its ufunc loops),
# which every process and every MPI rank would pay, most never meeting a bf16.
# numpy reports its kind as 'V', so code asks `is_float` rather than
# `dtype.kind == "f"`, and `is_bf16` rather than comparing with it.
_NUMPY_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(t)
    for name, t in [
        ("bool", np.bool_), ("i8", np.int8), ("i16", np.int16), ("i32", np.int32),
        ("i64", np.int64), ("u8", np.uint8), ("f16", np.float16), ("f32", np.float32),
        ("f64", np.float64),
    ]
}
_DTYPE_NAMES = (*_NUMPY_DTYPES, "bf16")


@cache
def bf16() -> np.dtype:
    """numpy's dtype of bfloat16 (ml_dtypes is imported on the first call)."""
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def is_bf16(dtype: np.dtype) -> bool:
    """Whether `dtype` is bfloat16 (none can be before ml_dtypes is imported)."""
    return "ml_dtypes" in sys.modules and dtype == bf16()


class _Dtypes(Mapping[str, np.dtype]):
    """refir's dtype names (in the spec's order) and their numpy dtypes; asking
    for "bf16"'s is what imports ml_dtypes."""

    def __getitem__(self, name: str) -> np.dtype:
        return bf16() if name == "bf16" else _NUMPY_DTYPES[name]

    def __contains__(self, name: object) -> bool:
        return name in _DTYPE_NAMES

    def __iter__(self) -> Iterator[str]:
        return iter(_DTYPE_NAMES)

    def __len__(self) -> int:
        return len(_DTYPE_NAMES)


DTYPES: Mapping[str, np.dtype] = _Dtypes()
FLOATS = frozenset({"f16", "bf16", "f32", "f64"})
INTEGERS = frozenset({"i8", "i16", "i32", "i64", "u8"})

# Mesh axes as nvFuser names them: DIDx is the last mesh axis.
DIDS = ("DIDx", "DIDy", "DIDz")
RESERVED = frozenset({"b", "on", "layout", *DTYPES, *DIDS})


def __getattr__(name: str) -> Any:
    """`BF16`, made on first use (see bf16)."""
    if name == "BF16":
        return bf16()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def dtype_name(dtype: np.dtype) -> str | None:
    """refir's name of a numpy dtype, or None where it has none."""
    for name, d in _NUMPY_DTYPES.items():
        if d == dtype:
            return name
    return "bf16" if is_bf16(dtype) else None


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or is_bf16(dtype)


def as_dtype(x: Any, dtype: np.dtype) -> np.ndarray:
    """`x` (an array or a Python number) in `dtype`, rounded as the spec says
    (§2): a value reaches bfloat16 through float32, whatever its type, as the
    gpu kernels round it. ml_dtypes rounded a double that way before 0.7 and
    rounds it directly since, so refir says it itself."""
    x = np.asarray(x)
    if is_bf16(dtype) and x.dtype != _F32 and not is_bf16(x.dtype):
        with np.errstate(all="ignore"):  # a double beyond float32's range is its infinity, as on the device
            x = x.astype(np.float32)
    return x.astype(dtype)


_F32 = np.dtype(np.float32)


def finfo(dtype: np.dtype) -> np.finfo:
    """np.finfo, bfloat16 included (ml_dtypes.finfo, a subclass, for it)."""
    if is_bf16(dtype):
        import ml_dtypes

        return ml_dtypes.finfo(dtype)
    return np.finfo(dtype)


# An extent: a static one, the name of a symbol, or an expression `E/h` (refir.ir.extents).
# Uneven sharding (docs/spec.md §3.1), checked at run time and cited by errors:
SHARD_C1 = "shard_c1"  # a device's buffer has exactly its block's extents (`block`)
SHARD_C2 = "shard_c2"  # a segment is handed the global extents it needs, never guesses them
Bindings = Mapping[str, int]


@dataclass(frozen=True)
class Mesh:
    """A dense 1- to 3-D array of distinct device ids, stored row-major."""

    name: str
    shape: tuple[int, ...]
    devices: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def axis_of(self, did: str) -> int:
        """The mesh axis a parallel type names: DIDx is the last one."""
        got = self._axes.get(did)
        return self.ndim - 1 - DIDS.index(did) if got is None else got  # DIDS.index: ValueError for a non-DID

    @cached_property
    def _axes(self) -> dict[str, int]:
        """Each DID's mesh axis, and its size, worked out once per mesh (asked per
        device and step: a mesh of thousands asks thousands of times a step)."""
        return {did: self.ndim - 1 - i for i, did in enumerate(DIDS)}

    @cached_property
    def _sizes(self) -> dict[str, int]:
        return {did: self.shape[a] for did, a in self._axes.items() if 0 <= a}

    def has(self, did: str) -> bool:
        return DIDS.index(did) < self.ndim

    def size(self, did: str) -> int:
        got = self._sizes.get(did)
        return self.shape[self.axis_of(did)] if got is None else got

    @cached_property
    def _coords(self) -> dict[int, tuple[int, ...]]:
        """Every device's coordinates, worked out once per mesh (asked per block, per step)."""
        every = np.unravel_index(np.arange(len(self.devices)), self.shape)  # one call, not one a device
        return dict(zip(self.devices, zip(*(c.tolist() for c in every))))

    def coords(self, device: int) -> tuple[int, ...]:
        if device not in self._coords:
            raise ValueError(f"device {device} is not in mesh {self.name}")
        return self._coords[device]

    def coord(self, device: int, did: str) -> int:
        coords = self._coords.get(device)
        if coords is None:
            return self.coords(device)[self.axis_of(did)]  # ValueError: not in the mesh
        return coords[self.axis_of(did)]

    def team(self, device: int, dids: Iterable[str]) -> tuple[int, ...]:
        """The devices that share `device`'s coordinates on every mesh axis not in
        `dids`, in mesh order. Every collective forms its groups through this."""
        self.coords(device)  # a device outside the mesh: ValueError
        return self._grouped(frozenset(self.axis_of(d) for d in dids))[1][device]

    def teams(self, dids: Iterable[str]) -> tuple[tuple[int, ...], ...]:
        """Every team along `dids` (see team), in the order their first members come."""
        return self._grouped(frozenset(self.axis_of(d) for d in dids))[0]

    def _grouped(self, free: frozenset[int]) -> tuple[tuple[tuple[int, ...], ...], dict[int, tuple[int, ...]]]:
        """The teams along the mesh axes `free` and each device's team, formed in one
        pass over the devices (grouped by their coordinates off those axes) and kept:
        linear in the devices, as a mesh of thousands asks (issue 30)."""
        kept = self.__dict__.setdefault("_teams_along", {})
        if free not in kept:
            groups: dict[tuple[int, ...], list[int]] = {}
            for dev in self.devices:
                key = tuple(c for a, c in enumerate(self._coords[dev]) if a not in free)
                groups.setdefault(key, []).append(dev)
            formed = tuple(tuple(g) for g in groups.values())
            kept[free] = (formed, {dev: g for g in formed for dev in g})
        return kept[free]

    def __contains__(self, device: object) -> bool:
        try:
            return device in self._coords  # a dict: asked per device of a world of thousands
        except TypeError:  # unhashable: no device
            return False


ShardSpec = str | tuple[str, ...]  # one mesh axis, or a nest of several, outermost first


@dataclass(frozen=True)
class Axis:
    """One logical axis: an extent, maybe sharded on a mesh axis or on a nest of
    mesh axes (a tuple, outermost first: `E@(DIDy,DIDx)`, spec §3.2), or `b`.
    A nest of one mesh axis is that axis: `Axis(5, ("DIDx",)) == Axis(5, "DIDx")`. `split`: each
    mesh axis's split factor (§3.4, `E@DIDx:3`), () where every one is 1 (a contiguous axis)."""

    extent: Extent
    shard: ShardSpec | None = None
    broadcast: bool = False
    split: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.shard, tuple) and len(self.shard) == 1:
            object.__setattr__(self, "shard", self.shard[0])
        if self.split and (all(f == 1 for f in self.split) or not self.shard):
            object.__setattr__(self, "split", ())
        if self.split and len(self.split) != len(self.dids):
            raise ValueError(f"split factors {self.split} for the mesh axes {self.dids}")

    @property
    def dids(self) -> tuple[str, ...]:
        """The mesh axes the axis is cut over, outermost first (none when whole)."""
        return dids_of(self.shard)

    @property
    def nested(self) -> bool:
        return isinstance(self.shard, tuple)

    @property
    def interleaved(self) -> bool:
        return bool(self.split)

    def __str__(self) -> str:
        if self.broadcast:
            return "b"
        return f"{self.extent}@{shard_text(self.shard, self.split)}" if self.shard else str(self.extent)


BROADCAST = Axis(1, None, True)


# The kinds a partial value's pending reduction may have (docs/spec.md §3.3). Lowering's
# own partials (inside a reduction over a sharded axis) may also be band, bor, bxor.
PARTIAL_KINDS = ("sum", "prod", "max", "min", "avg")


@dataclass(frozen=True)
class TensorType:
    """A global tensor type. `layout` lists logical axes outermost first; None
    means row-major (for inputs: any strides). `partial` names mesh axes (kept in mesh
    order, outermost first) whose devices hold terms of a pending `partial_kind` reduction: the
    value is that reduction, over each team along them, of the devices' buffers
    (docs/spec.md §3.3; the text writes ` partial[sum@DIDx]`)."""

    dtype: str
    axes: tuple[Axis, ...]
    mesh: Mesh
    layout: tuple[int, ...] | None = None
    partial: tuple[str, ...] = ()
    partial_kind: str = ""

    def __post_init__(self) -> None:
        # One order for the same pending reduction, however it was named or inferred (a
        # matmul over K@(DIDy,DIDx) and a declared partial[sum@DIDx,DIDy] are one type):
        # the mesh's axes outermost first. Names the mesh lacks are left for partial_c1.
        if len(self.partial) > 1 and all(k in DIDS and self.mesh.has(k) for k in self.partial):
            object.__setattr__(self, "partial", tuple(sorted(self.partial, key=self.mesh.axis_of)))

    @property
    def rank(self) -> int:
        return len(self.axes)

    @property
    def np_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]

    @property
    def order(self) -> tuple[int, ...]:
        """The memory order, outermost first (row-major when no layout)."""
        return self.layout if self.layout is not None else tuple(range(self.rank))

    def sharding(self) -> dict[int, ShardSpec]:
        """Tensor axis -> mesh axis (or nest of mesh axes), for the sharded axes."""
        return {i: a.shard for i, a in enumerate(self.axes) if a.shard}

    def symbols(self) -> set[str]:
        """Every symbol an extent uses, those inside expressions (`E/h`) too."""
        return {s for a in self.axes for s in symbols_of(a.extent)}

    def nests(self) -> dict[int, tuple[str, ...]]:
        """Tensor axis -> its mesh axes, outermost first, for the sharded axes."""
        return {i: a.dids for i, a in enumerate(self.axes) if a.shard}

    def placements(self) -> dict[int, tuple[ShardSpec, tuple[int, ...]]]:
        """Tensor axis -> (its mesh axes, their split factors), for the sharded axes."""
        return {i: (a.shard, a.split) for i, a in enumerate(self.axes) if a.shard}

    def interleaved(self) -> bool:
        return any(a.split for a in self.axes)

    def with_sharding(self, sharding: Mapping[int, ShardSpec | None]) -> TensorType:
        """The axes sharded as `sharding` says; an axis keeps the split factors of
        the mesh axes its nest keeps (resplit)."""
        axes = tuple(replace(a, shard=sharding.get(i), split=resplit(a, sharding.get(i)))
                     for i, a in enumerate(self.axes))
        return replace(self, axes=axes)

    def with_placements(self, placements: Mapping[int, tuple[ShardSpec, tuple[int, ...]]]) -> TensorType:
        """The axes placed as `placements` (TensorType.placements) says, the rest whole."""
        return replace(self, axes=tuple(replace(a, shard=placements.get(i, (None, ()))[0], split=placements.get(
            i, (None, ()))[1]) for i, a in enumerate(self.axes)))

    def __str__(self) -> str:
        text = f"{self.dtype}[{', '.join(map(str, self.axes))}] on {self.mesh.name}"
        if self.layout is not None:
            text += f" layout[{', '.join(map(str, self.layout))}]"
        if self.partial:
            text += f" partial[{self.partial_kind}@{','.join(self.partial)}]"
        return text


def extent_value(extent: Extent, bindings: Bindings) -> int:
    """The extent under `bindings`: a KeyError for a symbol not bound, an InputError
    (type_c9) for an expression whose divisor does not divide it."""
    return extent if isinstance(extent, int) else bindings[extent] if isinstance(extent, str) else \
        evaluate(extent, bindings)


def global_shape(t: TensorType, bindings: Bindings) -> tuple[int, ...]:
    return tuple(extent_value(a.extent, bindings) for a in t.axes)


def local_shape(t: TensorType, bindings: Bindings, device: int | None = None) -> tuple[int, ...]:
    """The shape of `device`'s block (the first, longest block when no device is named)."""
    out = []
    for a in t.axes:
        n = extent_value(a.extent, bindings)
        if a.shard:
            n = axis_length(t.mesh, a, n, device)
        out.append(n)
    return tuple(out)


def block_slices(t: TensorType, device: int, shape: tuple[int, ...]) -> tuple[slice, ...]:
    """Which part of an array of global `shape` the device holds (a type with no
    interleaved axis: see block_index)."""
    return tuple(slice(*axis_block(t.mesh, a, n, device)) if a.shard else slice(None) for a, n in zip(t.axes, shape))


def divides(t: TensorType, bindings: Bindings) -> bool:
    """Whether every sharded axis of `t` cuts into equal blocks."""
    return all(len({axis_length(t.mesh, a, extent_value(a.extent, bindings), d) for d in t.mesh.devices}) == 1
               if a.split else extent_value(a.extent, bindings) % parts_of(t.mesh, a) == 0 for a in t.axes if a.shard)


def resolved(t: TensorType, bindings: Bindings) -> TensorType:
    """`t` with every symbol replaced by its global extent."""
    axes = tuple(a if a.broadcast else replace(a, extent=extent_value(a.extent, bindings)) for a in t.axes)
    return replace(t, axes=axes)
