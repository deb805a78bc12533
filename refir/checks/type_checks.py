"""Well-formed meshes and tensor types (mesh_c*, type_c*), checked wherever a type is
written: the parser, the builder and the verifier."""

from __future__ import annotations

from collections import Counter
from math import prod

from refir.checks.limits import DEVICES
from refir.errors import Loc, VerifyError
from refir.ir.types import RESERVED, Mesh, TensorType, shard_text


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


def check_type(t: TensorType, loc: Loc) -> None:
    """Constraints every tensor type meets (type_c2, type_c3, type_c5, type_c6), and its
    mesh's. Any extent may be sharded: uneven blocks follow shard_c1 (type_c4 is retired)."""
    check_mesh(t.mesh, loc)
    used: dict[str, int] = {}
    for i, a in enumerate(t.axes):
        if isinstance(a.extent, int) and a.extent < 0:  # type_c6
            raise VerifyError(loc, "type_c6", f"axis {i} has a negative extent {a.extent}")
        if isinstance(a.extent, str) and a.extent in RESERVED:  # type_c6
            raise VerifyError(loc, "type_c6", f"{a.extent!r} is reserved and cannot name a symbol")
        if not a.shard:
            continue
        if a.nested and (len(a.dids) < 2 or len(set(a.dids)) < len(a.dids)):  # type_c7
            raise VerifyError(loc, "type_c7", f"axis {i} is sharded on the nest {shard_text(a.shard)}, "
                              "which must name two or more mesh axes, each once")
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
