"""A politer, cheaper block scheduler for numba's CUDA simulator.

The simulator runs each CUDA thread of a block as a Python thread and, while
they run, polls them in a loop that never lets go of the GIL: every thread
woken from a syncthreads waits for the interpreter's switch interval before it
may run, and the poll burns the CPU meanwhile (a small transpose launch took
2 to 3 times the CPU it takes with this loop; benchmarks/RESULTS.md).
`install()` replaces the block's run loop with one that keeps the simulator's
semantics (one Python thread per CUDA thread, a barrier released when every
live thread waits at it, the first thread's exception aborts the block and is
raised) but yields the GIL on every poll.

Two more costs are cut where no semantics hang on them:
- a kernel that reaches no barrier (most of ours: elementwise, copies) has
  nothing a thread could wait for, so its block's threads run to their ends one
  after another in the launching thread: a schedule the threads could have had,
  with no thread started;
- each device-function call swapped the `cuda` global of the function's module
  for the launch's fake module, scanning that module's globals every call when
  it is not the kernel's own; a launch now swaps every module its kernel reaches
  once, and calls into them go straight through.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba.cuda.simulator import kernel as sim
from numba.cuda.simulator import kernelapi

# What a kernel calls to wait for the other threads of its block (or grid).
_BARRIERS = frozenset({"syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or", "this_grid",
                       "sync", "syncwarp"})


@dataclass(frozen=True)
class _Reach:
    barrier: bool  # the kernel, or a function it reaches, names a barrier
    modules: tuple[dict[str, Any], ...]  # the globals of every function it reaches


_reach: dict[Any, _Reach] = {}  # kernel function -> what it reaches
_swapped: set[int] = set()  # ids of the globals the running launch has swapped


def _run_block(self: Any, grid_point: tuple[int, ...], *args: Any) -> None:
    if not self._debug and not _reached(self._f).barrier:
        _run_in_turn(self, grid_point, args)
        return

    def body() -> None:
        self._f(*args)

    threads = [sim.BlockThread(body, self, grid_point, point, self._debug) for point in np.ndindex(*self._block_dim)]
    for t in threads:
        t.start()
    live = threads
    while live:
        failed = next((t for t in live if t.exception), None)
        if failed is not None:
            _abort(threads)
            raise failed.exception[0].with_traceback(failed.exception[1])
        live = [t for t in live if t.is_alive()]
        if live and all(t.syncthreads_blocked for t in live):
            for t in live:  # every live thread waits at the barrier: release them
                t.syncthreads_blocked = False
                t.syncthreads_event.set()
        else:
            time.sleep(0)  # let the running threads have the GIL now, not a switch interval later
    for t in threads:  # an exception raised just before its thread ended
        if t.exception:
            raise t.exception[0].with_traceback(t.exception[1])


def _abort(threads: list[Any]) -> None:
    for t in threads:
        t.abort = True
        t.syncthreads_blocked = False
        t.syncthreads_event.set()


class _InTurn:
    """What the simulator asks of `threading.current_thread()` while a block's
    threads run one after another in the launching thread."""

    def __init__(self, grid_point: tuple[int, ...]) -> None:
        self.blockIdx = kernelapi.Dim3(*grid_point)
        self.threadIdx = kernelapi.Dim3(0, 0, 0)
        self.thread_id = 0

    def syncthreads(self, *_: Any) -> None:
        raise RuntimeError("a kernel judged free of barriers called one (gpu_backend/simulator.py)")

    syncthreads_count = syncthreads_and = syncthreads_or = syncthreads


class _Threading:
    """kernelapi's `threading`: current_thread() is the thread running in turn, where one is."""

    def __init__(self) -> None:
        self.running: _InTurn | None = None

    def current_thread(self) -> Any:
        return self.running if self.running is not None else threading.current_thread()

    def __getattr__(self, name: str) -> Any:
        return getattr(threading, name)


_threading = _Threading()


def _run_in_turn(self: Any, grid_point: tuple[int, ...], args: tuple[Any, ...]) -> None:
    """A block with no barrier: each thread to its end, in order, in this thread."""
    now = _InTurn(grid_point)
    bx, by = (*self._block_dim, 1, 1)[:2]
    _threading.running = now
    try:
        for point in np.ndindex(*self._block_dim):
            now.threadIdx = kernelapi.Dim3(*point)
            now.thread_id = now.threadIdx.x + bx * (now.threadIdx.y + by * now.threadIdx.z)
            try:
                self._f(*args)
            except Exception as e:  # said as the simulator's threads say it: which thread, which block
                where = f"tid={list(now.threadIdx)} ctaid={list(now.blockIdx)}"
                raise type(e)(f"{where}: {e}" if str(e) else where).with_traceback(e.__traceback__) from None
    finally:
        _threading.running = None


def _reached(f: Any) -> _Reach:
    """What the kernel function reaches through its globals and closures
    (device functions included): a barrier or not, and whose globals."""
    known = _reach.get(f)
    if known is None:
        seen: dict[int, types.FunctionType] = {}
        _walk(f, seen)
        barrier = any(_names(g.__code__) & _BARRIERS for g in seen.values())
        modules = {id(g.__globals__): g.__globals__ for g in seen.values()}
        known = _reach[f] = _Reach(barrier, tuple(modules.values()))
    return known


def _walk(f: Any, seen: dict[int, types.FunctionType]) -> None:
    f = getattr(f, "fn", f) if isinstance(f, sim.FakeCUDAKernel) else f  # a device function: the function it wraps
    if not isinstance(f, types.FunctionType) or id(f) in seen:
        return
    seen[id(f)] = f
    called = [f.__globals__[n] for n in _names(f.__code__) if n in f.__globals__]
    for cell in f.__closure__ or ():
        try:
            called.append(cell.cell_contents)
        except ValueError:  # a cell not yet filled
            pass
    for g in called:
        _walk(g, seen)


def _names(code: types.CodeType) -> set[str]:
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return out


_call = sim.FakeCUDAKernel.__call__
_push = sim._push_kernel_context
_launching: list[Any] = []  # the kernel function being launched, for _pushed


def _launch_or_call(self: Any, *args: Any) -> Any:
    """A device function whose module the launch swapped: called straight."""
    if self._device and id(self.fn.__globals__) in _swapped:
        return self.fn(*args)
    if self._device or sim._kernel_context is not None:
        return _call(self, *args)
    _launching[:] = [self.fn]
    try:
        return _call(self, *args)
    finally:
        _launching.clear()


@contextmanager
def _pushed(fake: Any) -> Iterator[None]:
    """The launch's context (one launch at a time), with every module its kernel
    reaches swapped to the launch's fake `cuda` once, for the whole launch."""
    with _push(fake), ExitStack() as stack:
        modules = _reached(_launching[0]).modules if _launching else ()
        for g in modules:
            stack.enter_context(kernelapi.swapped_cuda_module(_Holder(g), fake))
        _swapped.update(id(g) for g in modules)
        try:
            yield
        finally:
            _swapped.clear()


class _Holder:
    """A stand-in function for swapped_cuda_module, which reads only `__globals__`."""

    def __init__(self, g: dict[str, Any]) -> None:
        self.__globals__ = g


def install() -> None:
    """Use the scheduler above for every block the simulator runs."""
    if hasattr(sim, "BlockManager") and hasattr(sim, "BlockThread"):
        sim.BlockManager.run = _run_block
        kernelapi.threading = _threading
    if hasattr(sim, "_push_kernel_context") and hasattr(kernelapi, "swapped_cuda_module"):
        sim.FakeCUDAKernel.__call__ = _launch_or_call
        sim._push_kernel_context = _pushed
