"""interp/mpi/row_runs.py: pieces of rows copied by vector moves keep every bit,
for every run length around the moves' sizes (1-byte, 8-byte and 32-byte
moves, the last overlapping the one before), any row step, and several
pieces written in one pass; bad shapes are refused."""

import numpy as np
import pytest

from interp.mpi import row_runs
from interp.mpi.row_runs import runs_into, runs_scattered


@pytest.fixture
def compiled_always(monkeypatch):
    """Small pieces through the compiled copy too (not numpy's), so that short runs are checked cheaply."""
    monkeypatch.setattr(row_runs, "RUNS_MIN_BYTES", 0)


def random_bits(shape, dtype, seed):
    g = np.random.default_rng(seed)
    return np.frombuffer(g.bytes(int(np.prod(shape)) * np.dtype(dtype).itemsize), dtype).reshape(shape)


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.float64])
def test_every_run_length_and_offset_keeps_the_bits(compiled_always, dtype):
    itemsize = np.dtype(dtype).itemsize
    cols = 160 // itemsize + 3  # rows of an odd number of elements: unaligned runs
    x = random_bits((37, cols), dtype, itemsize)
    for width in range(0, cols + 1):
        for lo in sorted({0, 1, 3, cols - width}):
            if lo + width > cols:
                continue
            dst = np.full((37, width), 0, dtype)
            runs_into(dst, x[:, lo:lo + width])
            assert dst.tobytes() == np.ascontiguousarray(x[:, lo:lo + width]).tobytes(), (width, lo)


def test_pieces_in_one_pass_keep_the_bits_and_write_nothing_else(compiled_always):
    x = random_bits((1000, 63), np.float32, 0)
    widths = [16, 16, 16, 15]
    los = np.cumsum([0] + widths)[:-1]
    # each destination inside a larger buffer, to see that nothing around it is written
    guards = [np.full(4 * (1000 * w + 16), 0x7F, np.uint8).view(np.float32) for w in widths]
    dsts = [g[2:2 + 1000 * w].reshape(1000, w) for g, w in zip(guards, widths)]
    runs_scattered(x, [(int(lo), d) for lo, d in zip(los, dsts)][1:])
    for k in range(1, 4):
        assert dsts[k].tobytes() == np.ascontiguousarray(x[:, los[k]:los[k] + widths[k]]).tobytes(), k
        assert (guards[k].view(np.uint8)[:8] == 0x7F).all() and (guards[k].view(np.uint8)[-56:] == 0x7F).all()
    assert (guards[0].view(np.uint8) == 0x7F).all()  # piece 0 was not asked for


@pytest.mark.parametrize("step", ["gaps", "negative", "bool"])
def test_rows_any_step_apart(compiled_always, step):
    base = random_bits((300, 130), np.float32, 1)
    x = {"gaps": base[::3, 5:100], "negative": base[::-1, 2:90], "bool": base.view(np.uint8)[::2, 7:400] & 1}[step]
    if step == "bool":
        x = x.astype(np.bool_)[:, 1:]  # a fresh dense array, then a view of its rows
    pieces = [(0, np.empty((x.shape[0], 40), x.dtype)), (41, np.empty((x.shape[0], x.shape[1] - 41), x.dtype))]
    runs_scattered(x, pieces)
    for lo, d in pieces:
        assert d.tobytes() == x[:, lo:lo + d.shape[1]].tobytes(), lo


def test_large_pieces_take_the_compiled_copy_small_ones_numpy():
    x = random_bits((16384, 63), np.float32, 2)  # the uneven all_to_all's rows at 1M elements
    pieces = [(lo, np.empty((16384, w), np.float32)) for lo, w in ((0, 16), (16, 16), (32, 16), (48, 15))]
    small = (3, np.empty((16384, 1), np.float32))  # 64 KiB less 4 bytes: numpy's copy, in the same call
    runs_scattered(x, [*pieces, small])
    for lo, d in [*pieces, small]:
        assert d.tobytes() == np.ascontiguousarray(x[:, lo:lo + d.shape[1]]).tobytes(), lo


def test_bad_shapes_are_refused():
    x = np.zeros((10, 20), np.float32)
    with pytest.raises(ValueError, match="does not fit"):
        runs_scattered(x, [(15, np.empty((10, 6), np.float32))])
    with pytest.raises(ValueError, match="does not fit"):
        runs_scattered(x, [(0, np.empty((10, 6), np.float64))])
    with pytest.raises(ValueError, match="does not fit"):
        runs_scattered(x, [(0, np.empty((6, 10), np.float32).T)])
    with pytest.raises(ValueError, match="rows are contiguous"):
        runs_scattered(x[:, ::2], [(0, np.empty((10, 2), np.float32))])
    with pytest.raises(ValueError, match="destination's shape"):
        runs_into(np.empty((10, 3), np.float32), x[:, :4])
