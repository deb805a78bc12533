"""Index arithmetic every kernel module shares: shapes and strides as padded
int tuples, a row-major index unravelled over them, and the coalescing of
axes that every buffer steps through as through one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpu_backend.device import cuda

Ints = tuple[int, ...]  # shapes and strides travel to kernels as int tuples
Arr = Any  # a 1-D device array


@cuda.jit(device=True)
def unravel(index: int, shape: Ints, strides: Ints) -> int:
    """The offset of row-major `index` over `shape`, walked with `strides`."""
    offset = 0
    for d in range(len(shape) - 1, -1, -1):
        if index == 0:  # the leading axes, padding included, add nothing
            break
        offset += (index % shape[d]) * strides[d]
        index //= shape[d]
    return offset


def padded(values: Sequence[int], fill: int) -> tuple[int, ...]:
    """Leading `fill`s up to a multiple of four entries (at least four)."""
    n = max(4, -(-len(values) // 4) * 4)
    return (fill,) * (n - len(values)) + tuple(values)


def coalesce(shape: Sequence[int], strides: Sequence[Ints], lead: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """Axes in order of decreasing |lead stride|, extent-1 axes dropped, and
    neighbours merged where every buffer steps through them as through one axis."""
    axes = sorted((a for a in range(len(shape)) if shape[a] != 1), key=lambda a: -abs(lead[a]))
    out_shape: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for a in axes:
        if out_shape and all(st[-1] == s[a] * shape[a] for st, s in zip(out_strides, strides)):
            out_shape[-1] *= shape[a]
            for st, s in zip(out_strides, strides):
                st[-1] = s[a]
        else:
            out_shape.append(shape[a])
            for st, s in zip(out_strides, strides):
                st.append(s[a])
    if not out_shape:
        return [1], [[0] for _ in strides]
    return out_shape, out_strides
