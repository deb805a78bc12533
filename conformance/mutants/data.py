"""Mutants that only the right data kills: each puts one wrong implementation
of conformance/classes.py into the spmd backend's compute table
(interp/impls.py). On small integers every one of them agrees with the spec;
the `edge` data of the corpus files edge_*.rir (conformance/data.py) shows
each. Importing this module registers them in the table (conformance/mutants/registry.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np

import interp.impls
from conformance.classes import exp2_exp, recip_div, reduced_log, rsqrt_sqrt, ties_away
from conformance.data import _narrower
from conformance.mutants.registry import mutant
from refir.ir import ops
from refir.ir.types import DTYPES, is_float


def _unary(name: str, wrong: Any) -> Iterator[None]:
    with mock.patch.dict(interp.impls.UNARY_FNS, {name: wrong}):
        yield


@mutant("division computed as a * (1 / b), a fast-math kernel (spec section 10: div is correctly rounded)",
        by="values", needs=(ops.Binary,))
def div_as_reciprocal() -> Iterator[None]:
    with mock.patch.dict(interp.impls.BINARY_FNS, {"div": recip_div}):
        yield


@mutant("a cast to a narrower float rounds ties away from zero (bf16 as (bits + 0x8000) >> 16), "
        "not to nearest even", by="values", needs=(ops.Cast,))
def cast_ties_away() -> Iterator[None]:
    original = interp.impls.IMPLS[ops.Cast]

    def impl(op: ops.Cast, x: np.ndarray) -> np.ndarray:
        if is_float(x.dtype) and op.dtype in _narrower(x.dtype):
            return np.asarray(ties_away(x, DTYPES[op.dtype]))
        return original(op, x)

    with mock.patch.dict(interp.impls.IMPLS, {ops.Cast: impl}):
        yield


class _KeepsUnlessGreater:
    """max or min across devices as `p > acc ? p : acc` (`<` for min): a NaN
    partial after the first is dropped. Local reductions stay right."""

    def __init__(self, kind: str) -> None:
        self.right = interp.impls.COMBINE[kind]
        self.kind = kind

    def __call__(self, acc: np.ndarray, p: np.ndarray, out: np.ndarray | None = None, **_: Any) -> np.ndarray:
        r = np.where(p > acc if self.kind == "max" else p < acc, p, acc)
        if out is None:
            return r
        np.copyto(out, r, casting="unsafe")
        return out

    def reduce(self, *args: Any, **kwargs: Any) -> np.ndarray:
        return self.right.reduce(*args, **kwargs)


@mutant("max and min partials are combined across devices as p > acc ? p : acc, dropping a NaN that a device "
        "after the first holds", by="values", needs=(ops.Allreduce, ops.Reduce, ops.ReduceScatter))
def combine_drops_later_nan() -> Iterator[None]:
    with mock.patch.dict(interp.impls.COMBINE, {k: _KeepsUnlessGreater(k) for k in ("max", "min")}):
        yield


@mutant("sqrt computed as x * (1 / sqrt(x)) (an rsqrt kernel): inexact, and NaN at 0", by="values",
        needs=(ops.Unary,))
def sqrt_via_rsqrt() -> Iterator[None]:
    yield from _unary("sqrt", rsqrt_sqrt)


@mutant("exp computed as exp2(x * log2(e)) with the product rounded in the dtype (fast-math __expf)",
        by="values", needs=(ops.Unary,))
def exp_via_exp2() -> Iterator[None]:
    yield from _unary("exp", exp2_exp)


@mutant("log range-reduced to [1, 2) as log(m) + e * ln 2, which cancels just below 1", by="values",
        needs=(ops.Unary,))
def log_range_reduced() -> Iterator[None]:
    yield from _unary("log", reduced_log)


@mutant("a float to integer cast rounds down (floor), not toward zero", by="values", needs=(ops.Cast,))
def float_to_int_floor() -> Iterator[None]:
    original = interp.impls.IMPLS[ops.Cast]

    def impl(op: ops.Cast, x: np.ndarray) -> np.ndarray:
        if is_float(x.dtype) and DTYPES[op.dtype].kind in "iu":
            return original(op, np.floor(x.astype(np.float64)))
        return original(op, x)

    with mock.patch.dict(interp.impls.IMPLS, {ops.Cast: impl}):
        yield
