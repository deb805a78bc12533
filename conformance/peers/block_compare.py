"""Two sets of per-rank blocks compared (the sweep's and the known entries' one rule):
offset, shape, dtype and values, where an empty block starts being a convention."""

from __future__ import annotations

import numpy as np

from conformance.peers.spec import Block, Blocks
from refir.ir.types import is_float


def differences(a: Blocks, b: Blocks, left: str, right: str, ulps: int = 0) -> list[str]:
    """Rank by rank: offset, block shape, dtype and values (bit for bit, or within
    `ulps` of the larger magnitude per element: interp.numerics.ulp)."""
    out = []
    for r in sorted(set(a) | set(b)):
        if r not in a or r not in b:
            out.append(f"rank {r}: no block from {left if r not in a else right}")
            continue
        x, y = a[r], b[r]
        if _placed(x) != _placed(y):
            out.append(f"rank {r}: offset {left} {list(x.offset)}, {right} {list(y.offset)}")
        if x.values.shape != y.values.shape:
            out.append(f"rank {r}: block shape {left} {list(x.values.shape)}, {right} {list(y.values.shape)}")
        elif x.values.dtype != y.values.dtype:
            out.append(f"rank {r}: dtype {left} {x.values.dtype}, {right} {y.values.dtype}")
        elif not _same(x.values, y.values, ulps):
            out.append(f"rank {r}: values {left} {x.values.ravel()[:6].tolist()}, {right} "
                       f"{y.values.ravel()[:6].tolist()}")
    return out


def _same(x: np.ndarray, y: np.ndarray, ulps: int) -> bool:
    """Equal (NaN by NaN), or within ulps per element where both are finite; an
    infinity or NaN on one side is matched exactly (num_c5)."""
    from interp.numerics import ulp

    if not ulps or not is_float(x.dtype):
        return np.array_equal(x, y, equal_nan=is_float(x.dtype))

    a, b = x.astype(np.float64), y.astype(np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    special = ~finite & ~((a == b) | (np.isnan(a) & np.isnan(b)))
    with np.errstate(invalid="ignore"):
        far = finite & (np.abs(a - b) > ulps * ulp(np.maximum(np.abs(a), np.abs(b)), x.dtype))
    return not (special.any() or far.any())


def _placed(b: Block) -> tuple[int | None, ...]:
    """The block's offset, None along a dim it holds nothing of: where an empty
    block starts is a convention (DTensor: the global extent; refir: where its
    parent's range ends, docs/peers.md)."""
    return tuple(o if n else None for o, n in zip(b.offset, b.values.shape))
