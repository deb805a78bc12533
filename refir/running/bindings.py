"""Binding symbols from buffers, and checking inputs against their types."""

from __future__ import annotations

import numpy as np

from refir.checks.verifier import Checked
from refir.errors import InputError
from refir.ir.program_cache import Memo, shape_signature
from refir.ir.types import (
    SHARD_C1,
    SHARD_C2,
    TensorType,
    block_number,
    dense_strides,
    extent_value,
    global_shape,
    has_layout,
    local_shape,
    parts_of,
)


def bind_local(t: TensorType, shape: tuple[int, ...], bindings: dict[str, int]) -> None:
    """Bind `t`'s symbols from a local buffer of `shape`, on its unsharded axes
    only: a sharded axis's local extent does not say its global one (blocks are
    uneven, shard_c2), so those symbols must already be bound (segments carry
    them as extents). Existing bindings win."""
    for a, n in zip(t.axes, shape):
        if isinstance(a.extent, str) and not a.shard and a.extent not in bindings:
            bindings[a.extent] = n


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
    return bindings


def check_local_inputs(checked: Checked, inputs: dict[str, dict[int, np.ndarray]],
                       bindings: dict[str, int]) -> None:
    """Per-device input buffers handed straight to a backend: each of the declared
    dtype, rank and local extents (device d's block under the global `bindings`,
    shard_c1), and dense in its declared layout where the parameter has one
    (InputError otherwise). Buffers of dtypes, shapes and strides found right
    before (with the same bindings) are not checked again (refir.ir.program_cache)."""
    signatures = []
    for p in checked.func.params:
        signature = shape_signature(inputs.get(p.name, {}))
        if signature is None:
            _check_local_inputs(checked, inputs, bindings)
            return
        signatures.append(signature)
    _LOCAL_OK.get(checked, (tuple(sorted(bindings.items())), tuple(signatures)),
                  lambda: _check_local_inputs(checked, inputs, bindings))


_LOCAL_OK: Memo[None] = Memo()


def _check_local_inputs(checked: Checked, inputs: dict[str, dict[int, np.ndarray]],
                        bindings: dict[str, int]) -> None:
    bound = dict(bindings)
    for p in checked.func.params:
        t = p.type
        for d, x in sorted(inputs.get(p.name, {}).items()):
            where = f"input {p.name!r} on device {d}"
            if not isinstance(x, np.ndarray) or x.dtype != t.np_dtype or x.ndim != t.rank:
                what = f"{x.dtype}{list(x.shape)}" if isinstance(x, np.ndarray) else type(x).__name__
                raise InputError(f"{where} is {what}, but {p.name}: {t} needs a {t.np_dtype} array of rank {t.rank}")
            bind_local(t, x.shape, bound)  # unsharded axes; the first buffer binds, the others must agree
            missing = sorted(t.symbols() - set(bound))
            if missing:
                raise InputError(f"{where}: symbol {missing[0]} of {p.name}: {t} shards an axis, and its "
                                 f"global extent was not handed in [{SHARD_C2}]")
            want = local_shape(t, bound, d)
            for i, (n, m) in enumerate(zip(x.shape, want)):
                if n != m:
                    a = t.axes[i]
                    block = (f"block {block_number(t.mesh, a, d)} of {extent_value(a.extent, bound)} over "
                             f"{parts_of(t.mesh, a)} devices" if a.shard else f"its extent {a.extent}")
                    raise InputError(f"{where} has local extent {n} on axis {i}, but {p.name}: {t} "
                                     f"needs {m}, {block} [{SHARD_C1}]")
            if t.layout is not None and not has_layout(x, t.layout):
                want_strides = dense_strides(x.shape, t.layout, x.itemsize)
                raise InputError(f"{where} has strides {x.strides}, but {p.name}: {t} needs a buffer dense "
                                 f"in its layout (strides {want_strides})")


def check_world(checked: Checked, world: int) -> None:
    """Every device a mesh names must be a rank of the world."""
    for t in checked.types.values():
        outside = [d for d in t.mesh.devices if d >= world]
        if outside:  # the advice is the world every mesh fits in, not just this one
            need = devices_needed(checked)
            raise InputError(f"mesh {t.mesh.name!r} names device {outside[0]}, outside a world of "
                             f"{world} rank{'s' * (world != 1)} (run with --world {need} or mpirun -n {need})")


def devices_needed(checked: Checked) -> int:
    return 1 + max(d for t in checked.types.values() for d in t.mesh.devices)


def shapes_of(checked: Checked, bindings: dict[str, int]) -> dict[str, tuple[int, ...]]:
    return {name: global_shape(t, bindings) for name, t in checked.types.items()}
