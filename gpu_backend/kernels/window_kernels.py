"""The kernels of the window ops that are not copies: fills. slice and select
are views, cat and pad's interior are copies (gpu_backend/kernels/elementwise.py
copy_into, which takes any strides); pad fills only its border with the constant
(`fill_view`: each border slab a strided view, written once through the
elementwise kernels), so every element of its result is written once."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.device import cuda
from gpu_backend.kernels.elementwise import as_words, elementwise


@cuda.jit(device=True)
def _constant(a: Any, bits: Any) -> Any:  # the one-operand kernels' fn: the scalar, whatever is read
    return bits


def fill_view(out: DeviceBuffer, value: np.ndarray) -> DeviceBuffer:
    """Every element of the view `out` (any strides) set to the 0-d `value`'s bits,
    through the elementwise kernels as unsigned words (the operand they read is
    out's first word at stride 0, ignored: one cached read)."""
    if out.size == 0:
        return out
    word = np.dtype(f"u{out.data.dtype.itemsize}")
    bits = word.type(np.asarray(value).reshape(1).view(word)[0])
    words = as_words(out.data, word)
    target = DeviceBuffer(words, out.offset, out.shape, out.strides)
    elementwise(_constant, target, DeviceBuffer(words, out.offset, out.shape, (0,) * out.ndim), scalar=bits)
    return out
