"""A kernel launch as one `cuLaunchKernel` call on a prebuilt argument block.

cuda.core's `launch` converts every argument through its own handler and
builds a launch configuration per call (~20 µs of Python for our kernels'
dozen or two parameters). Here each compiled signature gets, once: the
CUfunction of its kernel in the current context, a `struct` layout with one
8-byte slot per kernel parameter, and the `void*` array the driver reads
the parameters through. A launch writes the argument values into the slots
(one `pack_into`) and calls the driver through ctypes.

A wrong layout would not fail but corrupt memory, so a layout is only built
from the values numba itself packs for the same arguments (ints as intptr,
ctypes scalars at their size, bools as one byte), its slots are checked byte
for byte against them, and, where the driver can say (cuFuncGetParamInfo,
CUDA 12.4+), the kernel's parameter count and every parameter's size must
agree. Anything else returns None: the caller keeps cuda.core's launch.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from functools import cache
from typing import Any

from gpu_backend.launches import recording

SLOT = 8  # bytes per parameter slot: numba's widest scalar and every pointer
_CUDA_ERROR_INVALID_VALUE = 1


class LaunchError(RuntimeError):
    """The driver refused a launch (its CUresult and name)."""


@cache
def _libcuda() -> Any:
    """The driver library numba's bindings already loaded, with the calls used here typed."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    vp, ui = ctypes.c_void_p, ctypes.c_uint
    lib.cuLaunchKernel.argtypes = [vp, ui, ui, ui, ui, ui, ui, ui, vp, vp, vp]
    lib.cuLaunchKernel.restype = ctypes.c_int
    lib.cuKernelGetFunction.argtypes = [ctypes.POINTER(vp), vp]
    lib.cuKernelGetFunction.restype = ctypes.c_int
    lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.cuGetErrorName.restype = ctypes.c_int
    lib.cuMemcpyDtoDAsync_v2.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, vp]
    lib.cuMemcpyDtoDAsync_v2.restype = ctypes.c_int
    if hasattr(lib, "cuFuncGetParamInfo"):
        size_p = ctypes.POINTER(ctypes.c_size_t)
        lib.cuFuncGetParamInfo.argtypes = [vp, ctypes.c_size_t, size_p, size_p]
        lib.cuFuncGetParamInfo.restype = ctypes.c_int
    return lib


def error_name(code: int) -> str:
    name = ctypes.c_char_p()
    lib = _libcuda()
    if lib is None or lib.cuGetErrorName(code, ctypes.byref(name)) or name.value is None:
        return f"CUresult {code}"
    return name.value.decode()


def function_of(kernel_handle: Any) -> int | None:
    """The CUfunction (address) of cuda.core's kernel handle in the current
    context: a CUkernel (library-loaded code) is resolved by the driver; a
    CUfunction is itself. None for anything else."""
    kind = type(kernel_handle).__name__
    if kind == "CUfunction":
        return int(kernel_handle)
    lib = _libcuda()
    if kind != "CUkernel" or lib is None:
        return None
    function = ctypes.c_void_p()
    if lib.cuKernelGetFunction(ctypes.byref(function), int(kernel_handle)) or not function.value:
        return None
    return function.value


def _slot_code(value: Any) -> tuple[str, int] | None:
    """The struct code and size of one value as numba hands it to cuda.core."""
    if type(value) is bool:
        return "?", 1
    if type(value) is int:
        return "q", SLOT  # cuda.core passes a Python int as intptr_t
    kind = getattr(type(value), "_type_", None) if isinstance(value, ctypes._SimpleCData) else None
    if kind in ("f", "d"):
        return kind, ctypes.sizeof(value)
    if kind is None or kind not in "bBhHiIlLqQ":
        return None
    size = ctypes.sizeof(value)
    code = {1: "b", 2: "h", 4: "i", 8: "q"}[size]
    return (code.upper() if kind.isupper() else code), size


def _raw(value: Any, size: int) -> bytes:
    """numba's packed value as the driver would read it (independent of struct)."""
    if type(value) is bool:
        return bytes([value])
    if type(value) is int:
        return value.to_bytes(SLOT, "little", signed=True)
    return bytes(value)


def _declared_sizes(lib: Any, function: int, count: int) -> list[int] | None:
    """The kernel's parameter sizes as compiled, if it has exactly `count`
    parameters ([] if it has another number); None if the driver cannot say."""
    if not hasattr(lib, "cuFuncGetParamInfo"):
        return None
    offset, size = ctypes.c_size_t(), ctypes.c_size_t()
    sizes = []
    for i in range(count):
        if lib.cuFuncGetParamInfo(function, i, ctypes.byref(offset), ctypes.byref(size)):
            return []
        sizes.append(size.value)
    past = lib.cuFuncGetParamInfo(function, count, ctypes.byref(offset), ctypes.byref(size))
    return sizes if past == _CUDA_ERROR_INVALID_VALUE else []


class DirectLaunch:
    """One signature's prebuilt launch: `launch(grid, block, values)`."""

    def __init__(self, function: int, codes: Sequence[tuple[str, int]], stream: int) -> None:
        self.layout = struct.Struct("<" + "".join(c + "x" * (SLOT - n) for c, n in codes))
        self.buffer = ctypes.create_string_buffer(SLOT * max(1, len(codes)))
        base = ctypes.addressof(self.buffer)
        self.slots = (ctypes.c_void_p * max(1, len(codes)))(*(base + SLOT * i for i in range(len(codes))))
        self.params = ctypes.c_void_p(ctypes.addressof(self.slots))  # the void** the driver reads
        self.function = ctypes.c_void_p(function)
        self.stream = ctypes.c_void_p(stream)
        self.call = _libcuda().cuLaunchKernel

    def __call__(self, grid: Any, block: Any, values: Sequence[Any]) -> None:
        if recording.active is not None:  # gpu_backend/launches/replay.py: launched again as it is
            recording.note(self, grid, block, tuple(values))
        self.layout.pack_into(self.buffer, 0, *values)
        gx, gy, gz = (grid, 1, 1) if type(grid) is int else (*grid, 1, 1)[:3]
        bx, by, bz = (block, 1, 1) if type(block) is int else (*block, 1, 1)[:3]
        rc = self.call(self.function, gx, gy, gz, bx, by, bz, 0, self.stream, self.params, None)
        if rc:
            raise LaunchError(f"cuLaunchKernel: {error_name(rc)} ({rc})")


def direct_launch(kernel_handle: Any, numba_values: Sequence[Any], values: Sequence[Any],
                  stream: int) -> DirectLaunch | None:
    """A DirectLaunch for a signature whose arguments numba packs as
    `numba_values` and we as `values`, or None where anything disagrees."""
    lib = _libcuda()
    if lib is None:
        return None
    codes = [_slot_code(v) for v in numba_values]
    if any(c is None for c in codes) or len(values) != len(codes):
        return None
    function = function_of(kernel_handle)
    if function is None:
        return None
    declared = _declared_sizes(lib, function, len(codes))
    if declared is not None and declared != [n for _, n in codes]:
        return None
    direct = DirectLaunch(function, codes, stream)  # type: ignore[arg-type]
    try:
        direct.layout.pack_into(direct.buffer, 0, *values)
    except (struct.error, TypeError):
        return None
    packed = direct.buffer.raw
    for i, ((_, n), want) in enumerate(zip(codes, numba_values)):  # type: ignore[misc]
        if packed[SLOT * i:SLOT * i + n] != _raw(want, n):
            return None
    return direct


def copy_bytes(dst: int, src: int, nbytes: int, stream: int = 0) -> None:
    """`nbytes` from device address `src` to `dst`, queued on `stream` (0: the
    legacy default stream, the kernels' own): the driver's cuMemcpyDtoDAsync."""
    if recording.active is not None:
        recording.note(copy_bytes, dst, src, nbytes, stream)
    rc = _libcuda().cuMemcpyDtoDAsync_v2(dst, src, nbytes, stream)
    if rc:
        raise LaunchError(f"cuMemcpyDtoDAsync: {error_name(rc)} ({rc})")
