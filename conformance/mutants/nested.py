"""Mutants of nested sharding (spec §3.2): a nest's mesh axes cut in the
other order, killed on the `nested_*` corpus programs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from unittest import mock

import numpy as np

import interp.spmd
from conformance.mutants.registry import mutant
from refir.ir.types import TensorType
from refir.lowering.lower import Step


@mutant("a keep_block cuts a nest's mesh axes inner first (a nested order swapped: (DIDy,DIDx) cut as "
        "(DIDx,DIDy))", by="values")
def nest_order_swapped() -> Iterator[None]:
    original = interp.spmd.slice_block

    def slice_block(step: Step, device: int, x: np.ndarray, src: TensorType) -> np.ndarray:
        t, right = step.type, original(step, device, x, src)
        if any(src.axes[i].shard for i, a in enumerate(t.axes) if a.nested):  # only a nest cut from whole
            return right
        swapped = {i: tuple(reversed(ks)) for i, ks in t.nests().items() if len(ks) > 1}
        wrong = original(replace(step, type=t.with_sharding({**t.sharding(), **swapped})), device, x, src)
        # Only where the blocks have one shape: a short block where a long one belongs
        # fails the step on some ranks only, which under MPI is a hang rather than a bug.
        return wrong if wrong.shape == right.shape else right

    with mock.patch.object(interp.spmd, "slice_block", slice_block):
        yield
