"""The kernel of the window ops that is not a copy: pad's fill. slice and select
are views, cat and pad's interior are copies (gpu_backend/kernels.py copy_into,
which takes any strides); pad first fills its fresh result with the constant."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.device import blocks_for, cuda, fitted
from gpu_backend.kernels.elementwise import as_words
from gpu_backend.kernels.strides import Arr
from gpu_backend.launches.launch import launch


@cache
def _fill_kernel() -> Any:
    @cuda.jit
    def fill(out: Arr, start: int, size: int, bits: Any) -> None:  # a grid-stride loop over the words
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        while i < size:
            out[start + i] = bits
            i += step

    return fill


def fill(out: DeviceBuffer, value: np.ndarray) -> DeviceBuffer:
    """Every element of `out` (dense, fresh: data[offset:offset+size]) set to the
    0-d `value`'s bits: a copy of bits, never of a value (bf16 and bool alike)."""
    if out.size == 0:
        return out
    word = np.dtype(f"u{out.data.dtype.itemsize}")
    bits = word.type(np.asarray(value).reshape(1).view(word)[0])
    threads = fitted(out.size)
    launch(_fill_kernel(), blocks_for(out.size, threads), threads, as_words(out.data, word), out.offset,
           out.size, bits)
    return out
