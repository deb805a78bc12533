"""interp/mpi/host_copy.py: strided arrays copied into C order keep every byte, on
the tiled paths (the source's contiguous axis is not the last: 32-bit words
through vector shuffles, taller or wider than tall, others a word at a time),
the in-order
path (runs along the last axis, other axes out of memory order, widened to
8-byte words where they allow) and numpy's, edges of odd sizes included."""

import ml_dtypes
import numpy as np
import pytest

from interp.mpi import host_copy

BASE = np.random.default_rng(0).standard_normal((37, 130, 29)).astype(np.float32)  # 550 KiB, odd extents
# Every 32-bit pattern is possible, signalling NaNs with payloads among them: moved, never computed.
WORDS = np.random.default_rng(2).integers(0, 2**32, (300, 77), dtype=np.uint32)
WORDS[::7, ::3] = 0x7FA00001


def _cases():
    f = np.asfortranarray(BASE)
    return {
        "column-major": (f, "tiled32"),  # 37 x 29 slices: taller than wide
        "permuted": (BASE.transpose(2, 0, 1), "tiled32"),  # 29 x 130 slices: wider than tall
        "float32 bit patterns": (np.asfortranarray(WORDS.view(np.float32)), "tiled32"),
        "int32": (np.asfortranarray((BASE * 1e6).astype(np.int32)), "tiled32"),
        "negative strides": (f[::-1, :, ::-1], "tiled"),  # the source's contiguous axis reversed
        "gaps": (f[:, ::2], "tiled32"),
        "tall and narrow": (np.asfortranarray(WORDS.view(np.float32)[:, :61].repeat(9, axis=0)), "tiled32"),  # bands
        "float16": (np.asfortranarray(BASE.astype(np.float16)), "tiled"),
        "bfloat16": (BASE.astype(ml_dtypes.bfloat16).transpose(0, 2, 1), "tiled"),
        "float64": (np.asfortranarray(BASE.astype(np.float64)), "tiled"),
        "bool": (np.asfortranarray(BASE > 0), "tiled"),
        "complex128": (np.asfortranarray(BASE.astype(np.complex128)), "numpy"),  # no 16-byte integer to move
        "pieces stacked": (BASE.reshape(37, 130, 29)[:, :128].reshape(37, 4, 32, 29).transpose(1, 0, 2, 3), "in order"),
        "small": (np.asfortranarray(BASE[:4, :5]), "numpy"),
        "row-major": (BASE, "numpy"),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_copy_into_keeps_every_byte(name, monkeypatch):
    x, path = _cases()[name]
    ran = []
    for kernel in ("_tiled", "_tiled32", "_in_order"):
        compiled = getattr(host_copy, kernel)
        monkeypatch.setattr(host_copy, kernel, lambda *a, compiled=compiled, kernel=kernel: (
            ran.append(kernel), compiled(*a)))
    got = np.full(x.shape, 3, x.dtype)
    host_copy.copy_into(got, x)
    assert got.tobytes() == np.ascontiguousarray(x).tobytes()
    assert got.strides == np.ascontiguousarray(x).strides
    assert set(ran) == ({"tiled": {"_tiled"}, "tiled32": {"_tiled32"}, "in order": {"_in_order"}, "numpy": set()}[path])


def test_in_order_copies_widen_runs_to_8_byte_words(monkeypatch):
    seen = []
    compiled = host_copy._in_order
    monkeypatch.setattr(host_copy, "_in_order", lambda to, frm: (seen.append((to.dtype, to.shape)), compiled(to, frm)))
    rng = np.random.default_rng(1)
    # Four pieces of columns of a (37, 4 * c, r) array, one after another: runs of c * r float32.
    for c, r, want in ((32, 28, (np.uint64, (37, 4, 32 * 28 // 2))), (31, 27, (np.uint32, (37, 4, 31 * 27)))):
        x = rng.standard_normal((37, 4 * c, r)).astype(np.float32).reshape(37, 4, c, r).transpose(1, 0, 2, 3)
        got = np.empty(x.shape, x.dtype)
        host_copy.copy_into(got, x)
        assert got.tobytes() == np.ascontiguousarray(x).tobytes()
        assert seen[-1] == (np.dtype(want[0]), want[1])  # 3584 bytes a run: 448 words; 3348: not whole words


@pytest.mark.parametrize("dtype, run", [(np.float32, 32), (np.float16, 33), (np.int8, 7), (np.float64, 3)])
def test_piece_into_copies_one_piece_of_rows(dtype, run):
    rng = np.random.default_rng(3)
    for rows in (5, 4000):  # under and over the compiled copy's threshold
        src = (rng.standard_normal((rows, 3, run)) * 50).astype(dtype)
        for k in range(3):
            got = np.full((rows, run), 7, dtype)
            host_copy.piece_into(got, src, k)
            assert got.tobytes() == np.ascontiguousarray(src[:, k]).tobytes()


@pytest.mark.parametrize("name", ["column-major", "permuted", "negative strides", "float16", "row-major", "small"])
def test_copy_into_writes_a_second_array_alike(name):
    x, _ = _cases()[name]
    got, also = np.full(x.shape, 3, x.dtype), np.full(x.shape, 5, x.dtype)
    host_copy.copy_into(got, x, also)
    assert got.tobytes() == also.tobytes() == np.ascontiguousarray(x).tobytes()
