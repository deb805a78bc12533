"""The gpu backend's device memory pool and launch cache, as logic the simulator
can check (gpu_backend/buffers/pool.py, gpu_backend/launches/launch.py; on a GPU the bench stage uses them)."""

import ctypes

import numpy as np
import pytest

from gpu_backend.buffers.pool import MIN_CLASS, SizeClassPool, size_class
from gpu_backend.launches.launch import _ARRAY, _dims, _flatten, _key


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


def test_launch_keys_values_and_dimensions():
    from gpu_backend.buffers.memory import Memory

    assert _dims(4) == (4, 1, 1) and _dims((8, 2)) == (8, 2, 1)
    m = Memory(1 << 20, 10, np.dtype(np.float32), None)
    key, values = _flatten((m, 3, (1, 2, 3, 4), np.float64(1.0), 2.5, True))
    assert key == ("f", int, (int, int, int, int), np.float64, float, bool)
    assert values == [0, 0, 10, 4, 1 << 20, 10, 4, 3, 1, 2, 3, 4, 1.0, 2.5, True]
    assert _key(((1, np.int64(2)),)) != _key(((1, 2),))
    assert _key((m.view(np.uint8),)) != _key((m,)) and _key((1,)) != _key((1.0,)) != _key((np.float32(1),))
    assert _key((m,)) != _key((np.float32(1),)) and _key(((1, 2),)) != _key(((1, 2, 3),))

    class Layout:
        strides_in_bytes = (8,)

    class View:  # numba's view of its array's memory, as _pack_array reads it
        dtype, size, ptr, shape, _layout = np.dtype(np.float32), 5, 4096, (5,), Layout()

    class Numba:  # a numba device array (every second element of one), as the key reads it
        dtype, ndim, _strided_memory_view_shim = np.dtype(np.float32), 1, View()

        def is_c_contiguous(self):
            return False

    key, values = _flatten((Numba(), 2))
    assert key == ((_ARRAY, np.dtype(np.float32), 1, False), int) and values == [0, 0, 5, 4, 4096, 5, 8, 2]
    with pytest.raises(AttributeError):  # a host array: launch() leaves it to numba
        _flatten((np.zeros(3),))


class _FakeDriver:
    """libcuda's calls as driver_launch makes them: a kernel of declared
    parameter sizes, and launches that read each parameter through its pointer."""

    def __init__(self, sizes):
        self.sizes, self.launches = sizes, []

    def cuKernelGetFunction(self, out, kernel):
        out._obj.value = kernel + 1
        return 0

    def cuFuncGetParamInfo(self, function, index, offset, size):
        if index >= len(self.sizes):
            return 1  # CUDA_ERROR_INVALID_VALUE
        size._obj.value = self.sizes[index]
        return 0

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        read = [ctypes.string_at(slots[i], n) for i, n in enumerate(self.sizes)]
        self.launches.append((function.value, (gx, gy, gz), (bx, by, bz), stream.value, read))
        return 0


class CUkernel(int):  # cuda.core's kernel handle type, by name
    pass


def test_direct_launch_hands_the_driver_numba_s_bytes(monkeypatch):
    """The parameter block holds each value as numba packs it (ints as intptr,
    ctypes scalars at their width, bools as a byte), read through the pointer array."""
    from gpu_backend.launches import driver_launch as dl

    numba_values = [0, 0, 10, 4, 1 << 20, ctypes.c_int32(-3), ctypes.c_float(1.5), ctypes.c_double(-2.25),
                    ctypes.c_uint16(0xBEEF), True, -7]
    ours = [0, 0, 10, 4, 1 << 20, np.int32(-3), np.float32(1.5), -2.25, np.uint16(0xBEEF), True, -7]
    sizes = [8, 8, 8, 8, 8, 4, 4, 8, 2, 1, 8]
    fake = _FakeDriver(sizes)
    monkeypatch.setattr(dl, "_libcuda", lambda: fake)
    direct = dl.direct_launch(CUkernel(4096), numba_values, ours, 0)
    assert direct is not None
    direct((3, 2), 128, ours)
    function, grid, block, stream, read = fake.launches[0]
    assert (function, grid, block, stream) == (4097, (3, 2, 1), (128, 1, 1), None)
    assert read == [dl._raw(v, n) for v, n in zip(numba_values, sizes)]
    assert read[5] == (-3).to_bytes(4, "little", signed=True) and read[9] == b"\x01"
    direct(5, (32, 8), [0, 0, 12, 4, 1 << 21, np.int32(9), np.float32(0), 1.0, np.uint16(1), False, 2**40])
    read = fake.launches[1][4]
    assert read[4] == (1 << 21).to_bytes(8, "little") and read[10] == (2**40).to_bytes(8, "little")


def test_direct_launch_refuses_what_does_not_agree(monkeypatch):
    from gpu_backend.launches import driver_launch as dl

    monkeypatch.setattr(dl, "_libcuda", lambda: _FakeDriver([8, 4]))
    assert dl.direct_launch(CUkernel(1), [5, ctypes.c_int32(1)], [5, 1], 0) is not None
    assert dl.direct_launch(CUkernel(1), [5, ctypes.c_int64(1)], [5, 1], 0) is None  # declared 4 bytes, not 8
    assert dl.direct_launch(CUkernel(1), [5], [5], 0) is None  # the kernel has a parameter more
    assert dl.direct_launch(CUkernel(1), [5, ctypes.c_int32(1)], [5, 2], 0) is None  # our value differs
    assert dl.direct_launch(CUkernel(1), [5, ctypes.c_int32(1)], [5, (1, 2)], 0) is None  # unpackable
    assert dl.direct_launch(object(), [5, ctypes.c_int32(1)], [5, 1], 0) is None  # an unknown handle type
    monkeypatch.setattr(dl, "_libcuda", lambda: None)
    assert dl.direct_launch(CUkernel(1), [5, ctypes.c_int32(1)], [5, 1], 0) is None  # no driver


class _Block:  # what the pool's upstream hands out on a GPU: numba's pointer, its address
    def __init__(self, address):
        self.device_pointer_value = address


def test_memory_views_share_one_lease_and_the_last_gives_the_block_back():
    import gc

    import pytest

    from gpu_backend.buffers import memory
    from gpu_backend.launches.launch import _pack_array

    addresses = iter(range(1 << 20, 1 << 30, 1 << 16))
    pool = SizeClassPool(lambda nbytes: _Block(next(addresses)))
    memory.set_pool(pool)
    try:
        m = memory.empty(10, np.dtype(np.float32))
        assert isinstance(m, memory.Memory) and (m.ptr, m.size, m.nbytes, m.shape) == (1 << 20, 10, 40, (10,))
        part = m[2:6]
        assert (part.ptr, part.size, part.dtype) == ((1 << 20) + 8, 4, np.dtype(np.float32))
        assert m[8:20].size == 2 and m[7:3].size == 0
        raw = part.view(np.uint8)
        assert (raw.ptr, raw.size, raw.dtype) == (part.ptr, 16, np.dtype(np.uint8))
        assert m.view(np.uint64).size == 5
        with pytest.raises(ValueError):
            m[::2]  # only contiguous slices
        with pytest.raises(ValueError):
            m[1:2].view(np.float64)  # half an element
        assert part.__cuda_array_interface__ == {"shape": (4,), "strides": None, "typestr": "<f4",
                                                 "data": ((1 << 20) + 8, False), "version": 3}
        # Packed as numba packs a 1-D C-contiguous array, under the same launch key.
        out = []
        _pack_array(part, out)
        assert out == [0, 0, 4, 4, (1 << 20) + 8, 4, 4]
        assert _key((part,)) == ("f",)
        assert pool.stats().in_use == 512
        del m, part
        gc.collect()
        assert pool.stats().in_use == 512  # `raw` still holds the block
        del raw
        gc.collect()
        assert pool.stats().in_use == 0
        again = memory.empty(100, np.dtype(np.int8))
        assert again.ptr == 1 << 20 and pool.stats().reused == 1
    finally:
        memory.set_pool(None)


def test_a_memory_that_dies_in_a_reference_cycle_gives_back_a_live_block():
    """numba frees an upstream block from a weakref callback once nothing
    reaches it; in a collected cycle those callbacks run before `__del__`, so
    the pool itself must keep lent blocks (seen on the device as ReferenceErrors)."""
    import gc
    import weakref

    from gpu_backend.buffers import memory

    freed: set[int] = set()

    class Owned:  # numba's OwnedPointer: its memory goes when it is collected
        def __init__(self, address):
            self.device_pointer_value = address
            weakref.finalize(self, freed.add, address)

    addresses = iter(range(1 << 20, 1 << 30, 1 << 16))
    pool = SizeClassPool(lambda nbytes: Owned(next(addresses)))
    memory.set_pool(pool)
    try:
        m = memory.empty(10, np.dtype(np.float32))
        cycle: list = [m]
        cycle.append(cycle)
        del m, cycle
        gc.collect()
        assert freed == set() and pool.stats().in_use == 0 and pool.lent == {}
        assert [b.device_pointer_value for b in pool.free[512]] == [1 << 20]
    finally:
        memory.set_pool(None)


def test_a_context_reset_makes_memory_find_the_next_pool_and_current_asks_only_where_installed():
    """The pool imports nothing of the backend: memory's cached pool is
    forgotten through the hook it registers in pool.on_reset (which the
    manager's reset calls), and `current` finds a pool only where `install`
    made it numba's manager (never under the simulator)."""
    from gpu_backend.buffers import memory, pool
    from gpu_backend.device import SIMULATED

    memory.set_pool(SizeClassPool(bytearray))
    try:
        for forget in pool.on_reset:
            forget()
        assert memory._pool is None
    finally:
        memory.set_pool(None)
    if SIMULATED:
        assert not pool._installed and pool.current() is None and pool.stats() is None


def test_memory_falls_back_to_numba_arrays_without_a_pool():
    from gpu_backend.buffers import memory
    from gpu_backend.device import SIMULATED

    if SIMULATED:  # the simulator has no pool: numba's own (simulated) array
        got = memory.empty(3, np.dtype(np.float32))
        assert not isinstance(got, memory.Memory) and got.shape == (3,) and got.dtype == np.float32


def test_a_queued_collective_is_waited_for_before_the_host_blocks(monkeypatch):
    import pytest

    import refir.world.mpi_job
    from gpu_backend.buffers import buffer
    from gpu_backend.transports import pending
    from refir.errors import RunError

    class Event:
        def __init__(self, ready_after):
            self.polls, self.ready_after = 0, ready_after

        def record(self):
            pass

        def query(self):
            self.polls += 1
            return self.polls > self.ready_after

    monkeypatch.setattr(pending, "_event", Event(2))
    pending.queued("an NCCL allreduce")
    pending.queued("an NCCL allgather")
    assert pending.unsettled() == "an NCCL allreduce"  # the first one is named
    host = buffer.to_host(buffer.to_device(np.arange(3, dtype=np.float32)))  # settles first
    assert host.tolist() == [0, 1, 2] and pending.unsettled() is None and pending._event.polls == 3
    pending.settle()  # nothing queued: no poll
    assert pending._event.polls == 3
    monkeypatch.setattr(pending, "_event", Event(10 ** 9))
    monkeypatch.setattr(refir.world.mpi_job, "TIMEOUT_S", 0.05)
    monkeypatch.setattr(refir.world.mpi_job, "STAGGER_S", 0.0)
    pending.queued("an NCCL broadcast")
    with pytest.raises(RunError, match="gave up waiting for an NCCL broadcast on the GPU after 0.05 s"):
        pending.settle()
    assert pending.unsettled() is None  # the next run starts afresh


def test_matmul_reuses_its_cupy_view_of_an_address_seen_before(monkeypatch):
    from gpu_backend.buffers.buffer import DeviceBuffer
    from gpu_backend.buffers.memory import Memory
    from gpu_backend.kernels import matmul

    made = []

    class FakeCupy:
        @staticmethod
        def asarray(obj):
            made.append(obj.__cuda_array_interface__)
            return len(made)

    monkeypatch.setattr(matmul, "_views", {})
    monkeypatch.setattr(matmul, "VIEWS_KEPT", 2)
    data = Memory(4096, 12, np.dtype(np.float32), None)
    b = DeviceBuffer(data, 1, (2, 3), (1, 4))  # a transposed view, one element in
    first = matmul._as_cupy(FakeCupy, b)
    assert made == [{"shape": (2, 3), "strides": (4, 16), "typestr": "<f4", "data": (4100, False), "version": 3}]
    assert matmul._as_cupy(FakeCupy, DeviceBuffer(data, 1, (2, 3), (1, 4))) == first and len(made) == 1
    matmul._as_cupy(FakeCupy, DeviceBuffer(data, 0, (2, 3), (1, 4)))  # another address: another view
    matmul._as_cupy(FakeCupy, DeviceBuffer(data, 0, (3, 2), (4, 1)))  # the cache was full: dropped whole
    assert len(made) == 3 and len(matmul._views) == 1


MANAGER_PROBE = """
from numba.cuda.cudadrv import driver
from gpu_backend.buffers import pool
made = []
class Upstream:  # numba's own manager, as far as the pool's manager uses it
    def __init__(self, context):
        made.append(self)
    def initialize(self):
        pass
driver.NumbaCUDAMemoryManager = Upstream
manager = pool._manager_class()(context=None)
for _ in range(3):  # numba calls it whenever a thread finds the context anew
    manager.initialize()
print(len(made), manager.numba is made[0])
"""


def test_the_pool_manager_keeps_one_upstream_manager_however_often_numba_initializes_it():
    """A second upstream manager would drop the first one's allocations, and
    with them every pooled block (seen on the device as ReferenceErrors). The
    manager needs numba's real driver module: a process without the simulator
    (it touches no GPU)."""
    import os
    import subprocess
    import sys

    from helpers import ROOT

    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", MANAGER_PROBE], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "True"]
