"""The kernels of the window ops that are not copies: fills. slice and select
are views, cat and pad's interior are copies (gpu_backend/kernels/elementwise.py
copy_into, which takes any strides); pad fills only its border with the constant
(`fill_view`: each border slab a strided view, written once through the
elementwise kernels), so every element of its result is written once. Where its
rows are narrow elements along the result's last axis, pad's interior copy writes
the border along that axis too (`copy_framed`: row_words' kernel with a frame), so
the elements either side of each row, which share a word and a 32-byte sector with
it, are written with it, not by a second kernel of 4-byte stores two a row."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.buffers.memory import Memory
from gpu_backend.device import cuda
from gpu_backend.kernels import row_words
from gpu_backend.kernels.elementwise import _whole_words, as_words, elementwise, word_copy_params
from gpu_backend.kernels.row_words import words_plan
from gpu_backend.kernels.strides import coalesce
from gpu_backend.launches.launch import KeptLaunches, counts, keep_launch, launch, values

FRAME_MAX = 8  # pad's frame along the rows: at most this many elements a side (one a thread at the row's ends)


@cuda.jit(device=True)
def _constant(a: Any, bits: Any) -> Any:  # the one-operand kernels' fn: the scalar, whatever is read
    return bits


def fill_view(out: DeviceBuffer, value: np.ndarray) -> DeviceBuffer:
    """Every element of the view `out` (any strides) set to the 0-d `value`'s bits,
    through the elementwise kernels as unsigned words (the operand they read is
    out's first word at stride 0, ignored: one cached read)."""
    if out.size == 0:
        return out
    bits = _bits(np.asarray(value).tobytes(), out.data.dtype.itemsize)
    words = as_words(out.data, bits.dtype)
    target = DeviceBuffer(words, out.offset, out.shape, out.strides)
    elementwise(_constant, target, DeviceBuffer(words, out.offset, out.shape, (0,) * out.ndim), scalar=bits)
    return out


@lru_cache(maxsize=256)
def _bits(value: bytes, size: int) -> np.generic:
    """A value's first `size` bytes as an unsigned word (numpy's conversions: µs a call)."""
    word = np.dtype(f"u{size}")
    return np.frombuffer(value[:size], word)[0]


def copy_framed(dst: DeviceBuffer, src: DeviceBuffer, lo: int, hi: int, value: np.ndarray,
                rows: tuple[int, int] = (0, 0)) -> bool:
    """dst[...] = src, and the lo elements before and hi after each of dst's rows (along its
    last axis, unit stride) set to the 0-d `value`'s bits, in one row_words launch (True);
    False, nothing done, where that kernel does not take the copy (wide elements, short
    rows, more than two outer axes, a frame wider than FRAME_MAX). `rows`: (before, after),
    whole rows along dst's axis -2 either side of it set too, frame and all (pad's border
    along that axis; dst a view into a buffer that holds them), for dst of 2 or 3 axes."""
    if dst.size == 0 or dst.strides[-1] != 1 or max(lo, hi) > FRAME_MAX or dst.data.dtype.itemsize > 4:
        return False
    if any(rows) and dst.ndim not in (2, 3):
        return False
    dd, sd = dst.data, src.data
    size = dd.dtype.itemsize
    bits = int(_bits(np.asarray(value).tobytes(), size))
    pooled = type(dd) is Memory and type(sd) is Memory
    key = (dst.shape, dst.strides, src.shape, src.strides, size, dst.offset % 8, src.offset % 8,
           dd.size % 8, sd.size % 8, lo, hi, bits, row_words.WORDS_WIDE, row_words.WORDS_MIN_BLOCKS,
           row_words.WORDS_PAIRS, row_words.WORDS_BY_STEP, rows)  # copy_into's key, the knobs
    if pooled:
        ready = _ready_framed.get(key)
        if ready is not None:  # launched before: the memories and offsets are all a call adds
            direct, grid, block, consts = ready
            counts["prepared"] += 1
            direct(grid, block, word_copy_params(dd, sd, dst.offset, src.offset, consts))  # type: ignore[operator]
            return True
    plan = _framed_plans.get(key, False)
    if plan is False:
        if len(_framed_plans) >= 1024:
            _framed_plans.clear()
        plan = _framed_plans[key] = _framed_plan(dst, src, lo, hi, bits, rows)
    if plan is None:
        return False
    _, kernel, elem, f, grid, block, consts = plan
    args = (as_words(dd, elem), _whole_words(dd, f), as_words(sd, elem), _whole_words(sd, f), dst.offset, src.offset,
            *consts)
    launch(kernel, grid, block, *args)
    if pooled:
        if len(_ready_framed) >= 1024:
            _ready_framed.clear()
        keep_launch(_ready_framed, key, kernel, args, grid, block, lambda: (tuple(values(consts)),))
    return True


_ready_framed: KeptLaunches = {}  # copy_framed's launches between pooled Memory, ready to go again, by its key
_framed_plans: dict[tuple[object, ...], tuple[object, ...] | None] = {}  # copy_framed's, by layout and frame


def _framed_plan(dst: DeviceBuffer, src: DeviceBuffer, lo: int, hi: int, bits: int,
                 rows: tuple[int, int]) -> tuple[object, ...] | None:
    """row_words' plan for copy_framed: the outer axes coalesced, the rows (last axis) kept apart;
    with `rows`, the axes as they are (the blank rows are axis -2's neighbours)."""
    if any(rows):
        outer, ds, ss = list(dst.shape[:-1]), list(dst.strides[:-1]), list(src.strides[:-1])
    elif dst.shape[:-1]:
        outer, (ds, ss) = coalesce(dst.shape[:-1], [dst.strides[:-1], src.strides[:-1]], dst.strides[:-1])
    else:
        outer, ds, ss = [], [], []
    return words_plan([*outer, dst.shape[-1]], [*ds, 1], [*ss, src.strides[-1]], dst.data.dtype.itemsize,
                      src.data.size, (lo, hi, bits), rows)
