"""Well-formed meshes and tensor types (mesh_c*, type_c*), checked wherever a type is
written: the parser, the builder and the verifier."""

from __future__ import annotations

from collections import Counter
from math import prod

from refir.checks.limits import DEVICES
from refir.errors import Loc, VerifyError
from refir.ir.types import DIDS, FLOATS, PARTIAL_KINDS, RESERVED, ExtentExpr, Mesh, TensorType, shard_text, symbols_of


def check_mesh(mesh: Mesh, loc: Loc) -> None:
    """mesh_c1 (shape) and mesh_c2 (ids); the parser also checks rectangularity."""
    if not 1 <= mesh.ndim <= 3 or 0 in mesh.shape or len(mesh.devices) != prod(mesh.shape):  # mesh_c1
        raise VerifyError(loc, "mesh_c1", f"mesh {mesh.name!r} must be a non-empty 1- to 3-D array")
    if len(set(mesh.devices)) != len(mesh.devices) or min(mesh.devices) < 0:  # mesh_c2
        seen = Counter(mesh.devices)  # one pass: a mesh may have 65,536 ids
        bad = sorted(d for d, n in seen.items() if n > 1 or d < 0)
        raise VerifyError(loc, "mesh_c2", f"mesh {mesh.name!r} device ids must be distinct and >= 0 "
                          f"(offending: {bad})")
    top = max(mesh.devices)
    where = f"{loc}: " if loc.line else ""  # a built mesh may have no place
    DEVICES.check(top + 1, f"{where}mesh {mesh.name!r} names device {top}, which needs a world of")


def check_param_extents(name: str, t: TensorType, loc: Loc, what: str = "parameter") -> None:
    """type_c10: a parameter's type (and iota's, whose extents lowering hands on one by
    one) uses integers and symbols only. An axis binds its symbol from its extent;
    an expression (`E/4`) binds none, so it stands only where values are computed."""
    for i, a in enumerate(t.axes):
        if isinstance(a.extent, ExtentExpr):  # type_c10
            raise VerifyError(loc, "type_c10", f"axis {i} of {what} {name}: {t} is the expression {a.extent}; a "
                              f"{what}'s extents are integers and symbols (bind a symbol instead, and "
                              "reshape to the expression)")


def check_type(t: TensorType, loc: Loc) -> None:
    """Constraints every tensor type meets (type_c2, type_c3, type_c5, type_c6), and its
    mesh's. Any extent may be sharded: uneven blocks follow shard_c1 (type_c4 is retired)."""
    check_mesh(t.mesh, loc)
    used: dict[str, int] = {}
    for i, a in enumerate(t.axes):
        if isinstance(a.extent, int) and a.extent < 0:  # type_c6
            raise VerifyError(loc, "type_c6", f"axis {i} has a negative extent {a.extent}")
        reserved = [s for s in symbols_of(a.extent) if s in RESERVED]
        if reserved:  # type_c6
            raise VerifyError(loc, "type_c6", f"{reserved[0]!r} is reserved and cannot name a symbol")
        if not a.shard:
            continue
        if a.nested and (len(a.dids) < 2 or len(set(a.dids)) < len(a.dids)):  # type_c7
            raise VerifyError(loc, "type_c7", f"axis {i} is sharded on the nest {shard_text(a.shard)}, "
                              "which must name two or more mesh axes, each once")
        if a.split and (len(a.split) != len(a.dids) or min(a.split) < 1):  # type_c8
            raise VerifyError(loc, "type_c8", f"axis {i} has split factors {list(a.split)} for the mesh axes "
                              f"{shard_text(a.shard)}: one integer >= 1 per mesh axis (1: contiguous)")
        for did in a.dids:
            if not t.mesh.has(did):  # type_c2
                raise VerifyError(
                    loc, "type_c2", f"axis {i} is sharded on {did}, but mesh {t.mesh.name!r} "
                    f"has {t.mesh.ndim} dimension{'s' * (t.mesh.ndim > 1)}",
                )
            if did in used:  # type_c3
                raise VerifyError(
                    loc, "type_c3", f"axes {used[did]} and {i} are both sharded on {did}"
                )
            used[did] = i
    if t.layout is not None and sorted(t.layout) != list(range(t.rank)):  # type_c5
        raise VerifyError(
            loc, "type_c5", f"layout {list(t.layout)} is not a permutation of 0..{t.rank - 1}"
        )
    if t.partial or t.partial_kind:
        check_partial(t, used, loc)


def check_partial(t: TensorType, used: dict[str, int], loc: Loc) -> None:
    """partial_c1 (kind and mesh axes) and partial_c2 (dtypes, avg's team)."""
    text = f"partial[{t.partial_kind}@{','.join(t.partial)}]"
    if t.partial_kind not in PARTIAL_KINDS or not t.partial:  # partial_c1
        raise VerifyError(loc, "partial_c1", f"{text}: a partial type names a kind ({', '.join(PARTIAL_KINDS)}) "
                          "and at least one mesh axis")
    for k in t.partial:
        if k not in DIDS or not t.mesh.has(k):  # partial_c1
            raise VerifyError(loc, "partial_c1", f"{text} names {k}, but mesh {t.mesh.name!r} has "
                              f"{t.mesh.ndim} dimension{'s' * (t.mesh.ndim > 1)}")
        if k in used:  # partial_c1
            raise VerifyError(loc, "partial_c1", f"{text}: {k} also shards axis {used[k]}; a mesh axis either "
                              "shards an axis or holds terms of a partial value")
    if len(set(t.partial)) != len(t.partial) or list(t.partial) != sorted(t.partial, key=t.mesh.axis_of):
        raise VerifyError(loc, "partial_c1", f"{text}: name each mesh axis once, in mesh order (DIDz, DIDy, DIDx)")
    if t.dtype == "bool" and t.partial_kind in ("sum", "prod", "avg"):  # partial_c2
        raise VerifyError(loc, "partial_c2", f"{text} on bool: a bool partial is max (any) or min (all)")
    if t.partial_kind == "avg":
        n = prod(t.mesh.size(k) for k in t.partial)
        if t.dtype not in FLOATS or n & (n - 1):  # partial_c2
            raise VerifyError(loc, "partial_c2", f"{text} on {t.dtype} over a team of {n}: avg is exact only "
                              "for a float dtype over a team whose size is a power of two (the division "
                              "by it then rounds nothing)")
