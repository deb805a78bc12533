"""copy_into's word copies (gpu_backend/kernels/row_words.py): rows of narrow elements that
align differently on the two sides, or a source broadcast along them, moved as 8-byte words.
Every case checks the bits against numpy and that the word kernel (not another) ran."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_backend.buffers.buffer import DeviceBuffer, download, upload
from gpu_backend.device import SIMULATED, max_blocks
from gpu_backend.kernels import elementwise
from gpu_backend.kernels.elementwise import copy_into
from gpu_backend.kernels.row_words import MIN_INNER, words_geometry

R = np.random.default_rng(7)


def _values(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    bits = R.integers(0, 256, size=(*shape, np.dtype(dtype).itemsize), dtype=np.uint8)
    return bits.view(dtype).reshape(shape)  # every bit pattern, NaNs included


def _plan(dst: DeviceBuffer, src: DeviceBuffer) -> str:
    elementwise.clear_plans()
    copy_into(dst, src)
    (plan,) = elementwise._copies.values()
    return plan[0]  # type: ignore[return-value]


def _copied(host: np.ndarray, view: tuple, dst_index: tuple | None = None, dst_shape=None):
    """copy_into of host[view] into a fresh row-major buffer (or into a view of a bigger one)."""
    src = upload(host)[view]
    want = np.ascontiguousarray(host[view])
    if dst_index is None:
        dst = DeviceBuffer.empty(want.shape, want.dtype)
        how = _plan(dst, src)
        return how, download(dst), want
    big = DeviceBuffer.empty(dst_shape, want.dtype)
    dst = big[dst_index]
    how = _plan(dst, src)
    return how, download(big)[dst_index], want


# The word copy's variants (row_words' knobs, which benchmarks/kernel_probe.py `words` times): the defaults,
# rounds of four, shifted 4-byte elements as two joined words (not loaded each), one kernel for every
# source stride (the launch bounds are a no-op under the simulator).
VARIANTS = [{}, {"WORDS_WIDE": False}, {"WORDS_PAIRS": False}, {"WORDS_PAIRS": False, "WORDS_WIDE": False},
            {"WORDS_BY_STEP": False, "WORDS_MIN_BLOCKS": 0}]


@pytest.fixture(params=VARIANTS, ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) or "defaults")
def variant(request, monkeypatch):
    from gpu_backend.kernels import row_words

    for k, x in request.param.items():
        monkeypatch.setattr(row_words, k, x)
    elementwise.clear_plans()
    yield request.param
    elementwise.clear_plans()


@pytest.mark.parametrize("dtype", ["f4", "i2", "u1", "f2"])
@pytest.mark.parametrize("view", [
    (slice(None), slice(1, -1)),        # shifted by one element, rows of even stride
    (slice(None), slice(3, None)),      # shifted by three (a quarter word of u1)
    (slice(None, None, -1), slice(1, -2)),  # rows walked backwards
    (slice(1, None, 2), slice(5, 77)),
])
def test_shifted_rows_copy_bit_for_bit(dtype, view, variant):
    if variant and dtype != "f4" and not SIMULATED:
        pytest.skip("each variant compiles per element width: f4's alone on a GPU (the kernels stage's time)")
    how, got, want = _copied(_values((5, 80), dtype), view)
    assert how == "words"
    assert got.tobytes() == want.tobytes()


def test_rows_of_odd_stride_change_alignment_row_by_row(variant):
    host = _values((6, 83), "f4")  # row stride 83: every other row starts mid-word
    how, got, want = _copied(host.reshape(-1)[:6 * 83].reshape(6, 83), (slice(None), slice(0, 82)))
    assert how == "words" and got.tobytes() == want.tobytes()


def test_long_shifted_rows_take_rounds_of_eight_four_and_a_ragged_end(variant):
    host = _values((3, 1204), "f4")  # 601 words a row: many rounds of each size at the simulator's 8 threads
    how, got, want = _copied(host, (slice(None), slice(1, 1203)))
    assert how == "words" and got.tobytes() == want.tobytes()


def test_into_a_misaligned_interior_like_pad():
    host = _values((4, 70), "f4")
    how, got, want = _copied(host, (slice(None), slice(None)), (slice(1, 5), slice(1, 71)), (6, 72))
    assert how == "words" and got.tobytes() == want.tobytes()


def test_a_three_axis_copy_with_a_gap_and_a_shift():
    host = _values((3, 4, 70), "i2")
    how, got, want = _copied(host, (slice(None), slice(0, 4, 2), slice(1, 69)))
    assert how == "words" and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", ["f4", "i2", "u1"])
def test_a_broadcast_along_the_rows_repeats_each_value(dtype):
    col = _values((5, 1), dtype)
    src = upload(col).broadcast_to((5, 67))
    dst = DeviceBuffer.empty((5, 67), col.dtype)
    assert _plan(dst, src) == "words"
    assert download(dst).tobytes() == np.ascontiguousarray(np.broadcast_to(col, (5, 67))).tobytes()


def test_one_long_row_is_cut_into_chunks():
    # on a GPU one row's slice is contiguous (a memcpy): two rows keep the kernel, and its
    # grid room for chunks; the simulator's two blocks leave room for one row only
    rows = 2 if max_blocks() >= 4 else 1
    (_, _, chunks), _, chunk = words_geometry(1, rows, 4000, 2)
    assert chunks > 1 and chunk * chunks >= 2001
    how, got, want = _copied(_values((rows, 4002), "f4"), (slice(None), slice(1, -1)))
    assert how == "words" and got.tobytes() == want.tobytes()


def test_many_rows_take_a_block_a_row_not_a_grid_stride():
    (gi, gj, gc), (_, by), _ = words_geometry(1, 1000, 100, 2)  # not max_blocks()' grid
    assert (gi, gc) == (1, 1) and gj == -(-1000 // by)
    (gi, gj, gc), _, _ = words_geometry(3, 100_000, 100, 2)  # two outer axes keep the capped grid
    assert gi * gj * gc <= max_blocks()
    how, got, want = _copied(_values((300, 130), "f4"), (slice(None), slice(1, -1)))
    assert how == "words" and got.tobytes() == want.tobytes()
    x = upload(_values((1000, 200), "f4"))[:, :100]  # the row kernel's rows: the same grid
    kernel, grid, (_, by), _, _ = elementwise._plan(elementwise._same, DeviceBuffer.empty((1000, 100), x.dtype,
                                                    (0, 1)), (x,), False)
    assert kernel is elementwise.rows1_kernel(elementwise.ignoring_scalar(elementwise._same))
    assert grid == (1, -(-1000 // by))


def test_short_rows_and_aligned_rows_keep_the_row_kernel():
    how, got, want = _copied(_values((4, MIN_INNER + 1), "f4"), (slice(None), slice(1, None)))
    assert how == "words"
    how, got, want = _copied(_values((4, MIN_INNER), "f4"), (slice(None), slice(1, None)))
    assert how == "rows" and got.tobytes() == want.tobytes()  # MIN_INNER - 1 elements a row
    how, got, want = _copied(_values((4, 80), "f4"), (slice(None), slice(2, None)))
    assert how == "rows" and got.tobytes() == want.tobytes()  # aligned alike: the 8-byte row kernel


@pytest.mark.parametrize("view", [
    (slice(None), slice(None, None, 2)),     # the even elements: the low halves
    (slice(None), slice(1, None, 2)),        # the odd ones: the high halves
    (slice(None, None, -1), slice(3, 151, 2)),
])
def test_every_other_element_gathers_halves_of_words(view):
    host = _values((5, 150), "f4")
    how, got, want = _copied(host, view)
    assert how == "words" and got.tobytes() == want.tobytes()
    how, got, want = _copied(host, view, (slice(None), slice(1, 1 + want.shape[1])), (want.shape[0], 80))
    assert how == "words" and got.tobytes() == want.tobytes()  # into rows that start mid-word


def test_other_steps_and_wider_elements_keep_the_other_kernels():
    how, got, want = _copied(_values((5, 150), "i2"), (slice(None), slice(None, None, 2)))
    assert how == "rows" and got.tobytes() == want.tobytes()
    how, got, want = _copied(_values((5, 150), "f4"), (slice(None), slice(None, None, 3)))
    assert how == "rows" and got.tobytes() == want.tobytes()
    how, got, want = _copied(_values((5, 150), "f8"), (slice(None), slice(1, None)))
    assert how == "rows" and got.tobytes() == want.tobytes()


def test_the_row_kernel_stores_its_ragged_ends_whole():
    host = _values((3, 4, 45), "f4")  # rows of 45: four elements a thread, then a ragged end of 13
    src = upload(host).transpose((1, 0, 2))
    dst = DeviceBuffer.empty((4, 3, 45), host.dtype)
    assert _plan(dst, src) == "rows"
    assert download(dst).tobytes() == np.ascontiguousarray(host.transpose(1, 0, 2)).tobytes()


@pytest.mark.parametrize("swap", [False, True])
def test_a_heads_reshape_copies_alike_with_its_outer_axes_in_either_order(swap, monkeypatch):
    """elementwise.ROWS1_SWAP (a kernel_probe variant): the row kernel's two outer axes swapped where the
    source's inner one is the farther apart; the same bits, the plan's axes as asked."""
    monkeypatch.setattr(elementwise, "ROWS1_SWAP", swap)
    host = _values((4, 6, 8), "f4")  # [H, S, D] -> [S, H, D]: rows of D from H places
    src = upload(host).transpose((1, 0, 2))
    dst = DeviceBuffer.empty((6, 4, 8), np.dtype("f4"))
    elementwise.clear_plans()
    copy_into(dst, src)
    assert download(dst).tobytes() == np.ascontiguousarray(host.transpose(1, 0, 2)).tobytes()
    (plan,) = elementwise._plans.values()
    kernel, grid, block, per_buffer, tail = plan
    assert tail[:2] == ((4, 6) if swap else (6, 4))  # (ni, nj): heads outer when swapped
    assert per_buffer[1] == ((24, 4) if swap else (4, 24))  # the source's (i, j) strides in words
    elementwise.clear_plans()
