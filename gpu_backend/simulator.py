"""A cheaper block scheduler for numba's CUDA simulator.

The simulator runs each CUDA thread of a block as a Python thread and polls
them in a loop: every barrier costs thread switches under the GIL, and the
threads of our kernels spent most of the gpu backend's CPU in them (a default
run took 19 s of it with the simulator's loop, 9 s with this one;
benchmarks/HISTORY.md). `install()` replaces the block's run loop with one that
keeps the simulator's semantics (a barrier released when every live thread of
the block waits at it; the first failing thread's exception, naming its thread
and block, ends the launch) with one thread of a block running at a time:

- a kernel that reaches no barrier (most of ours: elementwise, copies) has
  nothing a thread could wait for, so its block's threads run to their ends one
  after another in the launching thread;
- a kernel with barriers runs each CUDA thread as a greenlet, and each phase
  (the code between two barriers) thread after thread: a schedule the threads
  could have had, with a switch of a microsecond at each barrier. One thread at
  a time also makes the simulator's unlocked check-then-create of a block's
  shared array hand every thread the same array;
- each device-function call swapped the `cuda` global of the function's module
  for the launch's fake module, scanning that module's globals every call when
  it is not the kernel's own; a launch now swaps every module its kernel reaches
  once, and calls into them go straight through.

A launch in the simulator's debug mode keeps the simulator's own threads.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import greenlet
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
    if self._debug:
        _simulators_run(self, grid_point, *args)
    elif _reached(self._f).barrier:
        _run_in_phases(self, grid_point, args)
    else:
        _run_in_turn(self, grid_point, args)


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

    def at(self, point: tuple[int, ...], block_dim: tuple[int, ...]) -> None:
        bx, by = (*block_dim, 1, 1)[:2]
        self.threadIdx = kernelapi.Dim3(*point)
        self.thread_id = self.threadIdx.x + bx * (self.threadIdx.y + by * self.threadIdx.z)

    def located(self, e: Exception) -> Exception:
        """The error as the simulator's threads say it: which thread, which block."""
        where = f"tid={list(self.threadIdx)} ctaid={list(self.blockIdx)}"
        return type(e)(f"{where}: {e}" if str(e) else where).with_traceback(e.__traceback__)


class _InPhase(_InTurn):
    """A CUDA thread of a block with barriers: a greenlet that hands control back
    to the block's scheduler at each barrier (one runs at a time, in order)."""

    def __init__(self, manager: Any, grid_point: tuple[int, ...], point: tuple[int, ...], body: Any) -> None:
        super().__init__(grid_point)
        self.at(point, manager._block_dim)
        self._manager = manager
        self.green = greenlet.greenlet(body)

    def syncthreads(self, *_: Any) -> None:
        self.green.parent.switch()

    def _gathered(self, value: Any, judge: Any) -> int:
        state = self._manager.block_state
        state[self.threadIdx.x, self.threadIdx.y, self.threadIdx.z] = value
        self.syncthreads()
        out = judge(state)
        self.syncthreads()
        return out

    def syncthreads_count(self, value: Any) -> int:
        return self._gathered(value, np.count_nonzero)

    def syncthreads_and(self, value: Any) -> int:
        return self._gathered(value, lambda s: 1 if np.all(s) else 0)

    def syncthreads_or(self, value: Any) -> int:
        return self._gathered(value, lambda s: 1 if np.any(s) else 0)


def _run_in_phases(self: Any, grid_point: tuple[int, ...], args: tuple[Any, ...]) -> None:
    """A block with barriers, in phases: each live thread in turn up to its next
    barrier or its end; a barrier is released when every live thread waits at it."""

    def body() -> None:
        self._f(*args)

    live = [_InPhase(self, grid_point, point, body) for point in np.ndindex(*self._block_dim)]
    try:
        while live:
            for t in live:
                _threading.running = t
                try:
                    t.green.switch()
                except Exception as e:
                    raise t.located(e) from None
            live = [t for t in live if not t.green.dead]
    finally:
        _threading.running = None


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
    _threading.running = now
    try:
        for point in np.ndindex(*self._block_dim):
            now.at(point, self._block_dim)
            try:
                self._f(*args)
            except Exception as e:
                raise now.located(e) from None
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
_simulators_run = sim.BlockManager.run  # its own threads: kept for debug launches (np.seterr per thread)
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
