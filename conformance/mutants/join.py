"""Mutants of expand and of matmul of different ranks (issue 27): wrong
implementations the corpus must kill (conformance/corpus/expand_sharded.rir,
matmul_mixed_ranks.rir). Importing this module registers them in
conformance.mutants.MUTANTS."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np

import gpu_backend.impls
import interp.impls
from conformance.mutants.registry import mutant
from refir.ir import ops


@mutant("spmd's expand reads an axis its operand keeps backwards (a view with a negated stride)", by="values",
        needs=(ops.Expand,))
def expand_kept_axis_reversed() -> Iterator[None]:
    expand = interp.impls.IMPLS[ops.Expand]

    def impl(op: ops.Expand, x: np.ndarray, *extents: int) -> np.ndarray:
        kept = tuple(i for i, n in enumerate(x.shape) if n != 1)
        return expand(op, np.flip(x, kept) if kept else x, *extents)

    with mock.patch.dict(interp.impls.IMPLS, {ops.Expand: impl}):
        yield


@mutant("the gpu's expand reads every axis with stride 0, kept ones too (every element the operand's first)",
        by="values", backend="gpu", needs=(ops.Expand,))
def gpu_expand_all_strides_zero() -> Iterator[None]:
    def impl(op: ops.Expand, order: tuple[int, ...], x: Any, *extents: int) -> Any:
        shape = tuple(int(n) if m == 1 else m for n, m in zip(extents, x.shape))
        first = x[tuple(slice(0, 1) for _ in x.shape)]
        return gpu_backend.impls.laid_out_view(first.broadcast_to(shape), order)

    with mock.patch.dict(gpu_backend.impls.GPU_IMPLS, {ops.Expand: impl}):
        yield


@mutant("matmul of a batched operand and a 2-D weight multiplies the first batch only and repeats it",
        by="values", needs=(ops.Matmul,))
def matmul_first_batch_repeated() -> Iterator[None]:
    matmul = interp.impls.IMPLS[ops.Matmul]

    def impl(op: ops.Matmul, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.ndim <= 2 or b.ndim != 2 or a.shape[0] < 2:
            return matmul(op, a, b)
        return np.broadcast_to(matmul(op, a[:1], b), (*a.shape[:-1], b.shape[-1])).copy()

    with mock.patch.dict(interp.impls.IMPLS, {ops.Matmul: impl}):
        yield
