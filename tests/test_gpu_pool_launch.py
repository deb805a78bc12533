"""The gpu backend's device memory pool and launch cache, as logic the simulator
can check (gpu_backend/pool.py, launch.py; on a GPU the bench stage uses them)."""

import numpy as np

from gpu_backend.launch import _dims, _key
from gpu_backend.pool import MIN_CLASS, SizeClassPool, size_class


def test_size_classes_waste_at_most_an_eighth():
    assert size_class(1) == size_class(MIN_CLASS) == MIN_CLASS
    assert size_class(MIN_CLASS + 1) == 2 * MIN_CLASS
    assert size_class(1 << 20) == 1 << 20
    assert size_class((1 << 20) + 1) == (1 << 20) + (1 << 17)
    for nbytes in (700, 5000, 123457, 10 ** 9):
        assert nbytes <= size_class(nbytes) <= nbytes * 9 // 8 + MIN_CLASS


def test_pool_reuses_freed_blocks_and_counts_bytes():
    made = []

    def upstream(nbytes):
        made.append(nbytes)
        return bytearray(nbytes)

    pool = SizeClassPool(upstream)
    a, size_a = pool.take(1000)
    b, size_b = pool.take(3000)
    assert (size_a, size_b) == (1024, 3072) and made == [1024, 3072]
    pool.give(a, size_a)
    again, _ = pool.take(900)  # same class: the freed block comes back
    assert again is a and made == [1024, 3072]
    st = pool.stats()
    assert (st.in_use, st.peak, st.held, st.fresh, st.reused) == (4096, 4096, 4096, 2, 1)
    pool.give(again, 1024)
    pool.give(b, 3072)
    pool.reset_peak()
    assert pool.stats().peak == 0 and pool.trim() == 4096 and pool.stats().held == 0


def test_pool_trims_its_cache_when_the_upstream_fails_once():
    calls = []

    def upstream(nbytes):
        calls.append(nbytes)
        if len(calls) == 3:
            raise MemoryError("out of memory")
        return bytearray(nbytes)

    pool = SizeClassPool(upstream)
    block, size = pool.take(600)
    pool.give(block, size)
    pool.take(5000)
    pool.take(5000)  # fails once: the free 1024-byte block is dropped, then it succeeds
    assert calls == [1024, 5120, 5120, 5120] and pool.stats().held == 10240


def test_launch_keys_and_dimensions():
    assert _dims(4) == (4, 1, 1) and _dims((8, 2)) == (8, 2, 1)
    a = np.zeros(3, np.float32)

    class Dev:  # what the key reads of a device array
        dtype, ndim = a.dtype, 1

        def is_c_contiguous(self):
            return True

    key = _key((Dev(), 3, (1, 2, 3, 4), np.float64(1.0), 2.5))
    assert key == ((np.dtype(np.float32), 1, True), int, (tuple, int, int, int, int), np.dtype(np.float64), float)
    assert _key(((1, np.int64(2)),)) != _key(((1, 2),))
