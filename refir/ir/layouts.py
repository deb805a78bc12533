"""Memory layouts of local buffers: dense strides in a memory order, fresh
buffers in an order, and buffers as bytes with their strides kept (how
refir.world.exchange moves them between processes). refir.ir.types re-exports
every name here.
"""

from __future__ import annotations

import numpy as np


def axis_first(ndim: int, axis: int) -> tuple[int, ...]:
    """The memory order (outermost first) that puts `axis` outermost and keeps
    the others as they were: how a gathered or split axis travels."""
    return (axis, *(a for a in range(ndim) if a != axis))


def dense_strides(shape: tuple[int, ...], order: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a buffer dense in `order` (outermost axis first)."""
    strides = [0] * len(shape)
    step = itemsize
    for axis in reversed(order):
        strides[axis] = step
        step *= max(shape[axis], 1)
    return tuple(strides)


def empty_in_order(shape: tuple[int, ...], dtype: np.dtype, order: tuple[int, ...]) -> np.ndarray:
    """An uninitialized array of logical `shape`, dense in memory `order`. An
    empty block too has the strides dense_strides gives (numpy would zero them)."""
    if 0 in shape:
        return np.ndarray(shape, dtype, np.empty(0, dtype), strides=dense_strides(shape, order, dtype.itemsize))
    inverse = _INVERSE.get(order)
    if inverse is None:
        if len(_INVERSE) >= 1024:
            _INVERSE.clear()
        inverse = _INVERSE[order] = tuple(int(a) for a in np.argsort(order))
    return np.empty([shape[a] for a in order], dtype).transpose(inverse)


_INVERSE: dict[tuple[int, ...], tuple[int, ...]] = {}  # a layout's inverse permutation (asked per device and step)


def materialize(x: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """A fresh copy of `x` laid out dense in `order`."""
    out = empty_in_order(x.shape, x.dtype, order)
    out[...] = x
    return out


def has_layout(x: np.ndarray, order: tuple[int, ...]) -> bool:
    """Whether `x` is dense in `order` (axes of extent 1 may have any stride)."""
    if x.size == 0:
        return True
    want = dense_strides(x.shape, order, x.itemsize)
    return all(s == w or n == 1 for s, w, n in zip(x.strides, want, x.shape))


# ---- buffers as bytes, strides kept (how refir.world.exchange moves them between processes) ----

def memory_order(x: np.ndarray) -> tuple[int, ...]:
    """Axes from the largest stride to the smallest. An extent-1 axis goes inside
    an axis of equal stride, so that a dense buffer comes back with its very strides."""
    return tuple(sorted(range(x.ndim), key=lambda a: (-abs(x.strides[a]), x.shape[a] == 1, a)))


def wire_bytes(x: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """`x`'s elements dense in `order`, as bytes (no copy when already so)."""
    return np.ascontiguousarray(np.transpose(x, order)).reshape(-1).view(np.uint8)


def receive_into(shape: tuple[int, ...], dtype: np.dtype, order: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """An array dense in `order`, and its bytes to receive into."""
    x = empty_in_order(shape, dtype, order)
    return x, np.transpose(x, order).reshape(-1).view(np.uint8)
