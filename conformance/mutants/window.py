"""Mutants of the window ops (slice, select, pad, cat): wrong implementations the
suite must kill. The impl mutants break the spmd backend's local steps only
(interp.spmd's `compute`), so the global reference stays right and the values
tell them apart; the lowering mutant windows a sharded axis on each device's own
block as if it were the whole axis.

Importing this module registers them in conformance.mutants.MUTANTS."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from unittest import mock

import numpy as np

import interp.impls
import interp.spmd
import refir.lowering.window
import refir.running.prepare
from conformance.mutants.registry import mutant
from refir.ir import ops


def _spmd_op(kind: type, wrong: Callable[..., np.ndarray | None]) -> mock._patch:
    """interp.spmd's compute, with `wrong(op, *args)` in place of ops of `kind` (None: as it was)."""
    compute = interp.spmd.compute

    def patched(op: object, args: list[object], dtype: np.dtype) -> np.ndarray:
        got = wrong(op, *args) if isinstance(op, kind) else None
        return compute(op, args, dtype) if got is None else got

    return mock.patch.object(interp.spmd, "compute", patched)


@mutant("a slice's bounds read one past (x[b+1:e+1:s]) where the axis has room", by="values", needs=(ops.Slice,))
def slice_off_by_one() -> Iterator[None]:
    def wrong(op: ops.Slice, x: np.ndarray) -> np.ndarray | None:
        if not any(e < x.shape[a] for a, e in zip(op.axes, op.stops)):
            return None
        index = [slice(None)] * x.ndim
        for a, b, e, s in zip(op.axes, op.starts, op.stops, op.steps):
            index[a] = slice(b + 1, e + 1, s) if e < x.shape[a] else slice(b, e, s)
        return x[tuple(index)]

    with _spmd_op(ops.Slice, wrong):
        yield


@mutant("a slice ignores its step (x[b:b+n], n elements in a row)", by="values", needs=(ops.Slice,))
def slice_step_ignored() -> Iterator[None]:
    def wrong(op: ops.Slice, x: np.ndarray) -> np.ndarray:
        index = [slice(None)] * x.ndim
        for a, b, e, s in zip(op.axes, op.starts, op.stops, op.steps):
            index[a] = slice(b, b + len(range(b, e, s)))
        return x[tuple(index)]

    with _spmd_op(ops.Slice, wrong):
        yield


@mutant("a cat joins its operands last first (where that keeps the shape)", by="values", needs=(ops.Cat,))
def cat_order_swapped() -> Iterator[None]:
    def wrong(op: ops.Cat, *xs: np.ndarray) -> np.ndarray | None:
        if [x.shape for x in xs] != [x.shape for x in reversed(xs)]:
            return None  # another shape: a crash, not a wrong value
        return np.concatenate(xs[::-1], axis=op.axis)

    with _spmd_op(ops.Cat, wrong):
        yield


@mutant("a select counts its index from the end (x[..., -1-i, ...])", by="values", needs=(ops.Select,))
def select_from_the_end() -> Iterator[None]:
    def wrong(op: ops.Select, x: np.ndarray) -> np.ndarray:
        return np.asarray(x[(slice(None),) * op.axis + (x.shape[op.axis] - 1 - op.index,)])

    with _spmd_op(ops.Select, wrong):
        yield


@mutant("pad writes 0 wherever its value is other", by="values", needs=(ops.Pad,))
def pad_value_zero() -> Iterator[None]:
    pad = interp.impls.IMPLS[ops.Pad]

    def wrong(op: ops.Pad, x: np.ndarray) -> np.ndarray | None:
        return None if op.value == 0 else pad(ops.Pad(op.low, op.high, 0), x)

    with _spmd_op(ops.Pad, wrong):
        yield


@mutant("a window along a sharded axis is lowered as a local step: each device windows its own block as if "
        "it were the whole axis", by="values", needs=ops.WINDOWS)
def window_on_the_local_block() -> Iterator[None]:
    # Blocks come out with the wrong extents (shard_c1 at the step) or wrong values; lowering is redone.
    with mock.patch.object(refir.lowering.window, "needs_gather", lambda op, operands: ()), \
            mock.patch.dict(refir.running.prepare._LOWERED, clear=True):
        yield
