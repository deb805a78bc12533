"""A launch worked out once per layout and made again for each call's buffers: a plan's
kernel arguments as a recipe per buffer (its memory seen as some words, its offset in
them, its constants), so that a repeated call neither plans again nor rebuilds views.

`Recipe` per buffer: (word dtypes, divisor, constants): the buffer's memory as each of
the word dtypes (to its last whole word), its offset divided by the divisor, then the
constants; the plan's tail follows the last buffer's. Kept for the driver
(gpu_backend/launches/launch.py keep_launch), each word is its byte size and the
constants their packed values: a call's parameters are then made from each buffer's
address, byte count and offset alone (`kept_params`), as numba would pack the views."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.kernels.elementwise import as_words
from gpu_backend.kernels.strides import Arr
from gpu_backend.launches.launch import values

Recipe = tuple[tuple[np.dtype, ...], int, tuple[Any, ...]]
KeptRecipe = tuple[tuple[int, ...], int, tuple[Any, ...]]


def words_of(data: Arr, word: np.dtype) -> Arr:
    """`data` (1-D) as `word`s (as wide as its elements or wider), to its last whole word."""
    k = word.itemsize // data.dtype.itemsize
    if k > 1 and data.size % k:
        data = data[:data.size // k * k]
    return as_words(data, word)


def recipe_args(buffers: Sequence[DeviceBuffer], recipes: Sequence[Recipe], tail: tuple[Any, ...]) -> tuple:
    """The kernel's arguments for these buffers."""
    args: list[Any] = []
    for b, (words, div, consts) in zip(buffers, recipes):
        args += [words_of(b.data, w) for w in words]
        args.append(b.offset // div)
        args += consts
    args += tail
    return tuple(args)


def kept(recipes: Sequence[Recipe], tail: tuple[Any, ...]) -> tuple[tuple[KeptRecipe, ...], tuple[Any, ...]]:
    """The recipes and tail as `kept_params` takes them (words by size, constants packed)."""
    return (tuple((tuple(w.itemsize for w in words), div, tuple(values(tuple(consts))))
                  for words, div, consts in recipes), tuple(values(tuple(tail))))


def kept_params(buffers: Sequence[DeviceBuffer], recipes: Sequence[KeptRecipe], tail: tuple[Any, ...]) -> list:
    """The driver's parameter values for these buffers (pooled Memory each): every word view
    as numba packs a 1-D array (meminfo, parent, size, itemsize, pointer, shape, strides)."""
    params: list[Any] = []
    for b, (sizes, div, consts) in zip(buffers, recipes):
        d = b.data
        nbytes, ptr = d.size * d.dtype.itemsize, d.ptr
        for w in sizes:
            n = nbytes // w
            params += (0, 0, n, w, ptr, n, w)
        params.append(b.offset // div)
        params += consts
    params += tail
    return params
