"""A device memory pool behind every numba allocation, with its byte counts.

numba asks the CUDA driver for every `device_array` and `to_device` (about
66 µs of Python and driver time each on an H200) and frees in deferred
batches. `SizeClassPool` keeps freed blocks in free lists by size class
(eight classes per doubling, so a block is at most 12.5% larger than asked)
and hands them out again; `PoolManager` puts it behind numba's External
Memory Management interface, so that every allocation (buffers, uploads,
reduction partials, wire buffers) goes through it. Reuse is safe without
synchronising: every kernel and copy of the backend is ordered on the legacy
default stream, so a block's next user runs after its last one; NCCL runs on
a stream of its own, which waits for the default stream before each call and
which the default stream waits for after it (gpu_backend/transports/wires.py).

The counts (bytes in use, their peak, bytes held) are what the memory target
of issue 10 is measured with. The simulator has no EMM interface: there the
pool is not installed and `stats()` is None. REFIR_GPU_POOL=0 leaves numba's
own allocator in place (gpu_backend/device.py installs the pool on import).
This module imports nothing of the backend: what must forget a context's pool
when the context goes (buffers/memory.py's cached pool) registers in `on_reset`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from interp import sentinel

MIN_CLASS = 512  # bytes: the driver aligns allocations to 256 anyway
on_reset: list[Callable[[], None]] = []  # called when a context's pool goes (buffers/memory.py registers)
_installed = False  # install() made the pool numba's memory manager (real GPUs only)


def size_class(nbytes: int) -> int:
    """The block size that serves `nbytes`: a multiple of an eighth of the
    power of two below it (at least MIN_CLASS)."""
    if nbytes <= MIN_CLASS:
        return MIN_CLASS
    step = max(MIN_CLASS, 1 << max(0, (nbytes - 1).bit_length() - 4))
    return -(-nbytes // step) * step


@dataclass(frozen=True)
class PoolStats:
    in_use: int  # bytes of blocks handed out and not yet released (class sizes)
    peak: int  # the most in_use has been since the last reset_peak()
    held: int  # in_use plus the free blocks kept for reuse
    fresh: int  # blocks asked of the upstream allocator so far
    reused: int  # allocations served from a free list so far


class SizeClassPool:
    """Free lists of blocks by size class over an upstream allocator.

    `upstream(nbytes)` returns an object that owns device memory for as long
    as it lives; the pool keeps it while its block is in use or free. Lent
    blocks stay referenced here (`lent`), not only by their borrower: when a
    borrower dies in a reference cycle, Python runs the weakref callbacks of
    the cycle's objects before their `__del__`, so a block reachable from the
    cycle alone would be freed by numba's finalizer before the borrower gives
    it back, and the free list would hand out dead memory."""

    def __init__(self, upstream: Callable[[int], Any], clear: Callable[[Any, int], None] | None = None) -> None:
        self.upstream = upstream
        self.clear = clear  # fills a block's bytes with the sentinel (interp/sentinel.py) where it is armed
        self.free: dict[int, list[Any]] = {}
        self.lent: dict[int, Any] = {}  # id -> block handed out and not yet given back
        self.lock = threading.RLock()  # finalizers may release from any thread
        self.in_use = self.peak = self.held = self.fresh = self.reused = 0

    def take(self, nbytes: int) -> tuple[Any, int]:
        """A block of at least `nbytes`, and its class size."""
        size = size_class(nbytes)
        with self.lock:
            spare = self.free.get(size)
            block = spare.pop() if spare else None
            if block is None:
                block = self._fresh(size)
            else:
                self.reused += 1
            self.lent[id(block)] = block
            self.in_use += size
            self.peak = max(self.peak, self.in_use)
        if self.clear is not None and sentinel.armed():  # no block keeps what its last user left in it
            self.clear(block, size)
        return block, size

    def retake(self, blocks: list[tuple[int, int]], order: list[tuple[int, int]], takes: int,
               rise: int) -> Retaken | None:
        """What a recorded run's takes and gives did to the free lists, done at
        once (gpu_backend/launches/replay.py): every (class size, device address) of
        `blocks` must be free; each ends back on its list, in `order` (of
        each block's last give), as the run left them. `takes` counts as
        reused, `rise` (the run's most bytes in use above its start) as the
        peak. None where a block is not free, the pool left exactly as it was
        (its free lists in their order: which block a later take gets depends
        on it). The caller holds `lock` until the work on those blocks is
        queued, or until it undoes the retake (`Retaken.undo`)."""
        with self.lock:
            popped: list[tuple[int, int, Any]] = []  # (class, index it had on its list, block), in popping order
            for size, address in blocks:
                spare = self.free.get(size, [])
                for i in range(len(spare) - 1, -1, -1):  # the most recently given first, as take's pop
                    if spare[i].device_pointer_value == address:
                        popped.append((size, i, spare.pop(i)))
                        break
                else:
                    self._put_back(popped)
                    return None
            found = {block.device_pointer_value: block for _, _, block in popped}
            for size, address in order:
                self.free[size].append(found[address])
            retaken = Retaken(self, popped, order, takes, self.peak)
            self.reused += takes
            self.peak = max(self.peak, self.in_use + rise)
        return retaken

    def _put_back(self, popped: list[tuple[int, int, Any]]) -> None:
        """Blocks popped off their lists, each back at its index (the last popped first)."""
        for size, i, block in reversed(popped):
            self.free[size].insert(i, block)

    def _fresh(self, size: int) -> Any:
        try:
            block = self.upstream(size)
        except Exception:  # out of memory, most likely: give back what is cached, once
            if not self.trim():
                raise
            block = self.upstream(size)
        self.fresh += 1
        self.held += size
        return block

    def give(self, block: Any, size: int) -> None:
        """Return a block taken with `take` (its last user is gone)."""
        with self.lock:
            self.lent.pop(id(block), None)
            self.free.setdefault(size, []).append(block)
            self.in_use -= size

    def trim(self) -> int:
        """Drop every free block (their owners free the memory); bytes dropped."""
        with self.lock:
            dropped = sum(size * len(blocks) for size, blocks in self.free.items())
            self.free.clear()
            self.held -= dropped
        return dropped

    def reset_peak(self) -> None:
        with self.lock:
            self.peak = self.in_use

    def stats(self) -> PoolStats:
        with self.lock:
            return PoolStats(self.in_use, self.peak, self.held, self.fresh, self.reused)


class Retaken:
    """A retake done (SizeClassPool.retake), which `undo` takes back while the
    caller still holds the pool's lock: under MPI every rank must agree to
    replay, and a rank that retook gives its blocks back when one cannot."""

    __slots__ = ("pool", "popped", "order", "takes", "peak")

    def __init__(self, pool: SizeClassPool, popped: list[tuple[int, int, Any]], order: list[tuple[int, int]],
                 takes: int, peak: int) -> None:
        self.pool, self.popped, self.order, self.takes, self.peak = pool, popped, order, takes, peak

    def undo(self) -> None:
        """The pool as it was before the retake (nothing may have been taken or given since)."""
        pool = self.pool
        with pool.lock:
            for size, _ in reversed(self.order):  # appended last: at each list's end
                pool.free[size].pop()
            pool._put_back(self.popped)
            pool.reused -= self.takes
            pool.peak = self.peak


def _memset(block: Any, size: int) -> None:
    """A pool block's bytes set to sentinel.POOL_BYTE, on the default stream (as every kernel of the backend)."""
    from numba.cuda.cudadrv import driver

    driver.device_memset(block, sentinel.POOL_BYTE, size)


def _manager_class() -> type:
    """numba's EMM plugin over SizeClassPool (real GPUs only)."""
    from numba import cuda
    from numba.cuda.cudadrv import driver

    class PoolManager(driver.GetIpcHandleMixin, cuda.HostOnlyCUDAMemoryManager):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.numba: Any = None
            self.pool = SizeClassPool(self._upstream, _memset)

        def initialize(self) -> None:
            # numba calls this again whenever a thread finds the context anew
            # (prepare_for_use): a second upstream manager would drop the
            # first one's allocations, and with them every block of the pool.
            if self.numba is None:
                self.numba = driver.NumbaCUDAMemoryManager(context=self.context)
            self.numba.initialize()

        def _upstream(self, size: int) -> Any:
            try:
                return self.numba.memalloc(size)
            except driver.CudaAPIError:
                self.numba.deallocations.clear()  # numba frees in deferred batches
                return self.numba.memalloc(size)

        def memalloc(self, size: int) -> Any:
            block, klass = self.pool.take(size)
            pool = self.pool
            # numba's own pattern: an auto-freeing pointer whose reference count
            # falls to zero when the last array or view of it is gone; we keep
            # the pointer alive meanwhile and hand out an owned reference.
            kept: dict[str, Any] = {}

            def release() -> None:
                kept.clear()
                pool.give(block, klass)

            mem = driver.AutoFreePointer(self.context, block.device_pointer, size, finalizer=release)
            kept["mem"] = mem
            return mem.own()

        def get_memory_info(self) -> Any:
            free, total = driver.driver.cuMemGetInfo()
            return cuda.MemoryInfo(free=free, total=total)

        def reset(self) -> None:
            super().reset()
            self.pool.trim()
            for forget in on_reset:  # the context is gone: raw allocations find the next one's pool
                forget()
            if self.numba is not None:
                self.numba.reset()

        @property
        def interface_version(self) -> int:
            return 1

    return PoolManager


def install() -> None:
    """Make the pool numba's memory manager (before numba makes its context)."""
    global _installed
    from numba import cuda

    cuda.set_memory_manager(_manager_class())
    _installed = True


def current() -> SizeClassPool | None:
    """The pool of the current CUDA context, if it has one (none unless
    install() made the pool numba's manager: never under the simulator)."""
    if not _installed:
        return None
    from numba import cuda

    return getattr(cuda.current_context().memory_manager, "pool", None)


def stats() -> PoolStats | None:
    pool = current()
    return pool.stats() if pool is not None else None
