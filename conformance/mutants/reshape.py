"""Mutants of `reshape` (docs/spec.md §5.10), each a wrong local reshape the suite
must kill by the values it gives:

- the block reshaped in Fortran order (numpy's order="F");
- the sharded axis split as if the device index were its inner part: within a
  group whose outer axis is sharded, the block's elements land in Fortran order;
- the operand's memory read as if it were row-major, whatever its strides (a
  view where the layout needs a copy).

Importing this module registers them in conformance.mutants.MUTANTS.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import numpy as np

import interp.spmd
from conformance.mutants.patching import as_row_major
from conformance.mutants.registry import mutant
from refir.checks.rules_reshape import groups
from refir.ir import ops
from refir.lowering.lower import Step

Wrong = Callable[[Step, np.ndarray, tuple[int, ...], Any], np.ndarray]


def _patched(wrong: Wrong) -> Iterator[None]:
    call = interp.spmd.NumpyLocal.__call__

    def local(self: interp.spmd.NumpyLocal, step: Step, device: int, args: list) -> np.ndarray:
        if not isinstance(step.op, ops.Reshape):
            return call(self, step, device, args)
        want = interp.spmd.reshape_block(step, device, args)
        out = wrong(step, args[0], want, self.types[step.tensor_args()[0]])
        return interp.spmd.materialize(out, step.type.order)

    with mock.patch.object(interp.spmd.NumpyLocal, "__call__", local):
        yield


@mutant("a reshape reshapes each block in Fortran order, not C order", by="values", needs=(ops.Reshape,))
def reshape_fortran_order() -> Iterator[None]:
    yield from _patched(lambda step, x, want, src: np.reshape(x, want, order="F"))


def _sharded_as_inner(step: Step, x: np.ndarray, want: tuple[int, ...], src: Any) -> np.ndarray:
    """C order, except that each split of a sharded axis is filled in Fortran
    order: the device's elements taken as the inner part of the split."""
    op: ops.Reshape = step.op  # type: ignore[assignment]
    out = np.reshape(x, want)
    for g in groups(src, op.shape):
        if not g.src or len(g.dst) < 2 or not src.axes[g.src[0]].shard:
            continue
        lo, hi = g.dst[0], g.dst[-1] + 1
        head, part, tail = out.shape[:lo], out.shape[lo:hi], out.shape[hi:]
        backwards = out.reshape((*head, *part[::-1], *tail))  # the same elements, the split's axes reversed
        perm = [*range(lo), *(lo + hi - 1 - k for k in range(lo, hi)), *range(hi, out.ndim)]
        out = backwards.transpose(perm)
    return out


@mutant("a reshape splits a sharded axis as if the device index were the split's inner part", by="values",
        needs=(ops.Reshape,))
def reshape_sharded_as_inner() -> Iterator[None]:
    yield from _patched(_sharded_as_inner)


@mutant("a reshape reads its operand's memory as if it were row-major (a view where a copy is needed)",
        by="values", needs=(ops.Reshape,))
def reshape_memory_as_row_major() -> Iterator[None]:
    yield from _patched(lambda step, x, want, src: np.reshape(as_row_major(x), want))
