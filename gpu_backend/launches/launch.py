"""Kernel launches without numba's per-call work where the signature repeats.

`kernel[grid, block](*args)` makes numba type every argument (device arrays
through Python), find the compiled overload, convert every argument for the
driver one by one through its type, and build a cuda.core launch
configuration: tens of microseconds of Python per launch, more than the small
kernels themselves take. `launch(kernel, grid, block, *args)` does the same
launch, but keeps, per kernel and per cheap key of the argument kinds (array
dtype and rank, tuple element types, scalar type), the compiled overload and
a prebuilt argument block for cuLaunchKernel (gpu_backend/launches/driver_launch.py):
one pass over the arguments gives both the key and the parameter values,
which one `pack_into` writes into the block before the driver call. The
first launch of a signature goes through numba (compiling it), and the block
is built only where its bytes equal what numba's own conversion packs and
the kernel's declared parameters agree; otherwise the signature keeps a
checked packing plan through cuda.core's launch (the path before), or
numba's own conversion.

Under the simulator it is the plain numba launch (the switches that turned
the cached and the direct launches off went once both had won: docs/switches.md).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from gpu_backend.buffers.memory import Memory
from gpu_backend.device import SIMULATED
from gpu_backend.launches.driver_launch import direct_launch

Dims = int | tuple[int, ...]
FAST = not SIMULATED  # cached signatures; tests set it to launch on a fake device


def _dims(d: Dims) -> tuple[int, int, int]:
    t = (d,) if isinstance(d, int) else tuple(d)
    return (*t, *(1,) * (3 - len(t)))  # type: ignore[return-value]


def _flatten(args: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[Any]]:
    """One pass over the arguments: the key of what numba's choice of overload
    and its packing depend on (array dtype and rank, tuple element types,
    scalar types), and the values as the kernel's parameters take them, in order.
    A pooled Memory is keyed by its dtype's character (no other entry is a str)."""
    key: list[Any] = []
    values: list[Any] = []
    for a in args:
        t = type(a)
        if t is int:
            key.append(int)
            values.append(a)
        elif t is Memory:  # typed by numba as a 1-D C-contiguous array, as numba's own
            dtype = a.dtype
            key.append(dtype.char)
            n, itemsize = a.size, dtype.itemsize
            values += (0, 0, n, itemsize, a.ptr, n, itemsize)
        elif t is tuple:
            key.append(tuple(map(type, a)))
            values += a
        elif t is float or t is bool or isinstance(a, np.generic):
            key.append(t)
            values.append(a)
        else:  # a device array: 1-D and contiguous here, but let the key say so
            key.append((_ARRAY, a.dtype, a.ndim, a.is_c_contiguous()))
            _pack_array(a, values)
    return tuple(key), values


def _key(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return _flatten(args)[0]


def values(args: tuple[Any, ...]) -> list[Any]:
    """The kernel parameters `args` pass (arrays as numba's seven each), as a DirectLaunch takes them."""
    return _flatten(args)[1]


def prepared(kernel: Any, args: tuple[Any, ...]) -> Any:
    """The DirectLaunch of `kernel` for arguments of the kinds of `args`, once
    `launch` has launched that signature (None before, or where it launches
    otherwise): a caller that keeps a plan per layout calls it with the plan's
    parameter values, `direct(grid, block, values)`, and skips `launch`'s pass
    over the arguments. Those launches are counted in counts["prepared"]."""
    if not FAST:
        return None
    try:
        sig = _signatures.get((kernel, _key(args)))
    except AttributeError:
        return None
    return None if sig is None else sig.direct


# Launches kept ready to go again (elementwise, copy_into, reduce_into keep one
# such cache each), by the caller's key (a layout and dtypes): the DirectLaunch
# (`prepared`), its grid and block, then the caller's constant parameters,
# around which it fills in each call's memory and offsets itself (that filling
# differs between callers). A hit is the caller's own lookup in a plain dict: a
# dict subclass with a `keep` method, or a class around a dict, measured 10 ns
# a lookup slower alone and 20-30 ns on a kept launch of 0.7-2.4 µs
# (benchmarks/HISTORY.md, branch `tidy`, times the kept launches).
KeptLaunches = dict[Any, tuple[Any, ...]]
LAUNCHES_KEPT = 4096  # entries of one cache; then it starts again (programs of many shapes)


def keep_launch(kept: KeptLaunches, key: Any, kernel: Any, args: tuple[Any, ...], grid: Any, block: Any,
                constants: Callable[[], tuple[Any, ...]]) -> None:
    """Keep in `kept` the launch `launch` just made of `kernel` with `args`,
    with the parameters `constants()` gives, where it can go to the driver
    directly (else nothing is kept, and `constants` is not called)."""
    direct = prepared(kernel, args)
    if direct is None:
        return
    if len(kept) >= LAUNCHES_KEPT:
        kept.clear()
    kept[key] = (direct, grid, block, *constants())


_ARRAY = object()  # marks an array's entries in a key


class _Signature:
    """One compiled overload and how to pack its arguments for the driver."""

    def __init__(self, kernel: Any, args: tuple[Any, ...]) -> None:
        from numba.cuda import types

        self.kernel = kernel
        self.function = kernel._codelibrary.get_cufunc().kernel
        packers: list[Callable[[Any, list[Any]], None]] = []

        def plan(ty: Any) -> Callable[[Any, list[Any]], None] | None:
            if isinstance(ty, types.Array):
                return _pack_array
            if isinstance(ty, types.BaseTuple):
                inner = [plan(t) for t in ty]
                if any(p is None for p in inner):
                    return None
                return lambda v, out: [p(x, out) for p, x in zip(inner, v)]  # type: ignore[misc]
            if isinstance(ty, types.Integer):
                c = getattr(ctypes, f"c_{ty}")
                return lambda v, out: out.append(c(v))
            if ty == types.float64:
                return lambda v, out: out.append(ctypes.c_double(v))
            if ty == types.float32:
                return lambda v, out: out.append(ctypes.c_float(v))
            if ty == types.boolean:
                return lambda v, out: out.append(v)
            return None  # anything else keeps numba's conversion

        for ty in kernel.argument_types:
            p = plan(ty)
            packers.append(p)  # type: ignore[arg-type]
        plain = not kernel.extensions and not kernel.debug and not kernel.cooperative
        self.packers = packers if plain and all(p is not None for p in packers) else None
        if self.packers is not None and not self._agrees(args):
            self.packers = None
        self.direct = None
        if plain:
            want, _ = self._numba_pack(args)
            try:
                handle = kernel._codelibrary.get_cufunc().handle
                self.direct = direct_launch(handle, want, _flatten(args)[1], int(_stream.handle))
            except (AttributeError, TypeError, ValueError, OSError) as e:  # another numba or cuda.core
                refused.append(f"{type(e).__name__}: {e}")

    def pack(self, args: tuple[Any, ...]) -> list[Any]:
        out: list[Any] = []
        for p, a in zip(self.packers, args):  # type: ignore[arg-type]
            p(a, out)
        return out

    def _numba_pack(self, args: tuple[Any, ...]) -> tuple[list[Any], list[Any]]:
        out: list[Any] = []
        keep: list[Any] = []
        for t, v in zip(self.kernel.argument_types, args):
            self.kernel._prepare_args(t, v, 0, keep, out)
        return out, keep

    def _agrees(self, args: tuple[Any, ...]) -> bool:
        """Whether the plan packs what numba's _prepare_args packs, value for value."""
        want, _ = self._numba_pack(args)
        got = self.pack(args)

        def plain(v: Any) -> Any:
            return (type(v), v.value) if isinstance(v, ctypes._SimpleCData) else (int, int(v))

        return len(want) == len(got) and all(plain(w) == plain(g) for w, g in zip(want, got))


def _pack_array(a: Any, out: list[Any]) -> None:
    """A device array as numba passes it: meminfo, parent, size, itemsize,
    pointer, shape, strides in bytes."""
    if type(a) is Memory:
        out += a.packed()
        return
    view = a._strided_memory_view_shim
    itemsize = view.dtype.itemsize
    out += (0, 0, view.size, itemsize, view.ptr)
    out += view.shape
    strides = view._layout.strides_in_bytes
    if strides is None:  # contiguous: numba derives them the same way
        from numba.cuda.np import numpy_support

        strides = numpy_support.strides_from_shape(shape=view.shape, itemsize=itemsize,
                                                   c_contiguous=view._layout.is_contiguous_c,
                                                   f_contiguous=view._layout.is_contiguous_f)
    out += strides


_signatures: dict[tuple[Any, ...], _Signature] = {}
_configs: dict[tuple[Any, ...], Any] = {}
_stream: Any = None
counts = {"direct": 0, "fast": 0, "numba": 0, "prepared": 0}  # launches by path, for the benchmark
refused: list[str] = []  # why a signature could not be launched directly, for the benchmark


def _config(grid: tuple[int, int, int], block: tuple[int, int, int]) -> Any:
    cfg = _configs.get((grid, block))
    if cfg is None:
        from numba.cuda.dispatcher import LaunchConfig

        cfg = _configs[(grid, block)] = LaunchConfig(grid=grid, block=block, shmem_size=0)
    return cfg


def launch(kernel: Any, grid: Dims, block: Dims, *args: Any) -> None:
    """kernel[grid, block](*args), through the cached overload where it can."""
    global _stream
    if not FAST:
        kernel[grid, block](*args)
        return
    try:
        parts, values = _flatten(args)
    except AttributeError:  # an argument that is no device array (a host array): numba's own launch
        counts["numba"] += 1
        kernel[grid, block](*args)
        return
    key = (kernel, parts)
    sig = _signatures.get(key)
    if sig is not None:
        if sig.direct is not None:  # through cuLaunchKernel (gpu_backend/launches/driver_launch.py)
            counts["direct"] += 1
            sig.direct(grid, block, values)
            return
        counts["fast" if sig.packers is not None else "numba"] += 1
        if sig.packers is not None:
            from cuda.core import launch as core_launch

            core_launch(_stream, _config(_dims(grid), _dims(block)), sig.function, *sig.pack(args))
        else:  # its packing differs from ours: numba's, without the typing
            sig.kernel.launch(args, _dims(grid), _dims(block), _stream, 0)
        return
    counts["numba"] += 1
    kernel[grid, block](*args)  # compiles the overload on first use
    if _stream is None:
        from numba.cuda.cudadrv import driver

        _stream = driver._to_core_stream(0)
    argtypes = tuple(kernel.typeof_pyval(a) for a in args)
    compiled = kernel.overloads.get(argtypes)
    if compiled is not None:
        _signatures[key] = _Signature(compiled, args)
