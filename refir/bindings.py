"""Binding symbols from buffers, and checking inputs against their types."""

from __future__ import annotations

import numpy as np

from refir.errors import InputError
from refir.types import TensorType, dense_strides, global_shape, has_layout
from refir.verify import Checked


def bind_local(t: TensorType, shape: tuple[int, ...], bindings: dict[str, int]) -> None:
    """Bind `t`'s symbols from a local buffer of `shape`: a sharded axis binds
    local size x mesh-axis size, the global extent. Existing bindings win."""
    for a, n in zip(t.axes, shape):
        if isinstance(a.extent, str) and a.extent not in bindings:
            bindings[a.extent] = n * (t.mesh.size(a.shard) if a.shard else 1)


def bind_inputs(checked: Checked, inputs: dict[str, np.ndarray]) -> dict[str, int]:
    """Check global inputs against the parameter types and bind every symbol.
    Each problem is a RunError naming the input, axis and symbol."""
    func = checked.func
    names = [p.name for p in func.params]
    missing = [n for n in names if n not in inputs]
    if missing:
        p = next(p for p in func.params if p.name == missing[0])
        raise InputError(f"missing input {p.name!r}: {func.name} takes {p.name}: {p.type} "
                       f"(inputs given: {', '.join(sorted(inputs)) or 'none'})")
    extra = sorted(set(inputs) - set(names))
    if extra:
        raise InputError(f"unknown input {extra[0]!r}: {func.name} takes {', '.join(names)}")
    bindings: dict[str, int] = {}
    source: dict[str, str] = {}
    for p in func.params:
        x, t = inputs[p.name], p.type
        if not isinstance(x, np.ndarray):
            raise InputError(f"input {p.name!r} is a {type(x).__name__}, not a numpy array")
        if x.dtype != t.np_dtype:
            raise InputError(f"input {p.name!r} has dtype {x.dtype}, but {p.name}: {t} needs {t.np_dtype}")
        if x.ndim != t.rank:
            raise InputError(f"input {p.name!r} has shape {x.shape} (rank {x.ndim}), but {p.name}: {t} "
                           f"has rank {t.rank}")
        for i, (a, n) in enumerate(zip(t.axes, x.shape)):
            where = f"axis {i} of input {p.name!r}"
            if isinstance(a.extent, int) and n != a.extent:
                raise InputError(f"{where} has extent {n}, but {p.name}: {t} declares {a}")
            if isinstance(a.extent, str):
                if a.extent in bindings and bindings[a.extent] != n:
                    raise InputError(f"symbol {a.extent} is {bindings[a.extent]} from {source[a.extent]}, "
                                   f"but {n} from {where}")
                bindings[a.extent], source[a.extent] = n, where
            if a.shard and n % t.mesh.size(a.shard):
                name = f"symbol {a.extent} = {n}" if isinstance(a.extent, str) else f"extent {n}"
                raise InputError(f"{where} ({name}) does not divide evenly over {a.shard} of mesh "
                               f"{t.mesh.name!r} ({t.mesh.size(a.shard)} devices)")
    # Inside the function a symbol may be sharded over other meshes than the inputs'.
    for name, t in checked.types.items():
        for i, a in enumerate(t.axes):
            if a.shard and isinstance(a.extent, str) and bindings[a.extent] % t.mesh.size(a.shard):
                raise InputError(f"symbol {a.extent} = {bindings[a.extent]} does not divide evenly over "
                                 f"{a.shard} of mesh {t.mesh.name!r} ({t.mesh.size(a.shard)} devices), "
                                 f"as axis {i} of {name}: {t} needs")
    return bindings


def check_local_inputs(checked: Checked, inputs: dict[str, dict[int, np.ndarray]]) -> None:
    """Per-device input buffers handed straight to a backend: each of the declared
    dtype, rank and local extents, symbols consistent, and dense in its declared
    layout where the parameter has one (InputError otherwise)."""
    bindings: dict[str, int] = {}
    for p in checked.func.params:
        t = p.type
        for d, x in sorted(inputs.get(p.name, {}).items()):
            where = f"input {p.name!r} on device {d}"
            if not isinstance(x, np.ndarray) or x.dtype != t.np_dtype or x.ndim != t.rank:
                what = f"{x.dtype}{list(x.shape)}" if isinstance(x, np.ndarray) else type(x).__name__
                raise InputError(f"{where} is {what}, but {p.name}: {t} needs a {t.np_dtype} array of rank {t.rank}")
            seen = dict(bindings)
            bind_local(t, x.shape, seen)
            for i, (a, n) in enumerate(zip(t.axes, x.shape)):
                parts = t.mesh.size(a.shard) if a.shard else 1
                extent = seen[a.extent] if isinstance(a.extent, str) else a.extent
                if n * parts != extent:
                    raise InputError(f"{where} has local extent {n} on axis {i}, but {p.name}: {t} "
                                     f"needs {extent // parts}")
            bindings = seen
            if t.layout is not None and not has_layout(x, t.layout):
                want = dense_strides(x.shape, t.layout, x.itemsize)
                raise InputError(f"{where} has strides {x.strides}, but {p.name}: {t} needs a buffer dense "
                                 f"in its layout (strides {want})")


def check_world(checked: Checked, world: int) -> None:
    """Every device a mesh names must be a rank of the world."""
    for t in checked.types.values():
        outside = [d for d in t.mesh.devices if d >= world]
        if outside:
            raise InputError(f"mesh {t.mesh.name!r} names device {outside[0]}, outside a world of "
                           f"{world} rank{'s' * (world != 1)} (run with --world {max(t.mesh.devices) + 1} "
                           f"or mpirun -n {max(t.mesh.devices) + 1})")


def devices_needed(checked: Checked) -> int:
    return 1 + max(d for t in checked.types.values() for d in t.mesh.devices)


def shapes_of(checked: Checked, bindings: dict[str, int]) -> dict[str, tuple[int, ...]]:
    return {name: global_shape(t, bindings) for name, t in checked.types.items()}
