"""Mutants of the arithmetic the global reference itself runs on.

interp/impls.py is shared: the global reference and the spmd backend compute
every op with it. A bug there makes the reference wrong too, and every
backend that agrees with it passes the comparison; only an expect line, held
to exact arithmetic (docs/spec.md §10, num_x1..num_x9), can catch it. Such a
mutant is declared with `reference=True`: the mutant table makes its
reference with it in place, as the default run would.

Importing this module registers them in the table (conformance/mutants/registry.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from unittest import mock

import numpy as np

import interp.impls
from conformance.mutants.registry import mutant
from refir.ir import ops
from refir.ir.types import as_dtype, finfo, is_float

ROUNDED = ("add", "sub", "mul", "div")


def toward_zero(exact: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`exact` (float32) in a 16-bit float dtype, rounded toward zero instead of
    to nearest: one ulp short wherever the nearest is further from zero."""
    r = np.asarray(as_dtype(exact, dtype))
    away = np.isfinite(exact) & (np.abs(r.astype(np.float32)) > np.abs(exact))
    bits = r.view(np.uint16)  # sign and magnitude: one less is one ulp nearer zero
    return np.where(away, bits - np.uint16(1), bits).astype(np.uint16).view(dtype)


@mutant("bf16 and f16 add, sub, mul and div round toward zero, not to nearest, in the impls the reference "
        "shares", by="expect", needs=(ops.Binary,), reference=True)
def half_precision_rounds_toward_zero() -> Iterator[None]:
    binary = interp.impls.IMPLS[ops.Binary]

    def impl(op: ops.Binary, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        dtype = np.asarray(a).dtype
        if op.name not in ROUNDED or not is_float(dtype) or finfo(dtype).bits != 16:
            return binary(op, a, b)
        wide = interp.impls.BINARY_FNS[op.name](np.asarray(a).astype(np.float32), np.asarray(b).astype(np.float32))
        return toward_zero(np.asarray(wide), dtype)

    with mock.patch.dict(interp.impls.IMPLS, {ops.Binary: impl}):
        yield
