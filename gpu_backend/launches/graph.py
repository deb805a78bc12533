"""A replayed run's device calls captured once into a CUDA graph (gpu_backend/launches/replay.py).

A replay still makes each recorded call through its host path: cuBLAS's
gemmEx (about 70 µs of host time in a run at the seed-2 sizes, its code and
data cold after the uploads; 17 back to back) and each cuLaunchKernel (10-20
µs). Captured into a graph, they are one cuGraphLaunch. The calls are made
on a stream of this module's own while it captures: each DirectLaunch's
kernel and parameter block through cuLaunchKernel, each device copy through
cuMemcpyDtoDAsync, and the cuBLAS call through cuBLAS itself (ctypes, on
cupy's handle and the very arguments recorded: cupy's wrapper refuses to run
under capture), its stream set to the capturing one and put back after. The
stream is a blocking one, so the legacy default stream, where the uploads
and downloads run, and the graph wait for each other's earlier work.

Whether cuBLAS picks the same kernel under capture is not assumed:
replay.py runs the graph once on the inputs of the replay that captured it
and keeps it only if every result is the same, bit for bit, as the calls
made one by one gave. A graph is only ever launched by its trace, whose
assumptions (the pool's blocks, the key) it shares; it also holds cupy's
per-thread cuBLAS handle's workspace, which lives as long as the process.
REFIR_GPU_GRAPH=0 keeps the calls one by one.

Under MPI the NCCL calls stay outside the graphs by default (each stretch
between them is a graph of its own: gpu_backend/launches/replay.py says why);
REFIR_GPU_GRAPH_NCCL=1 captures them too (`other`), with every rank agreeing
on capturing and keeping, for measuring where two GPUs are lent.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import cache
from typing import Any

from gpu_backend.launches.driver_launch import DirectLaunch, LaunchError, _libcuda, copy_bytes, error_name
from refir import env

ENABLED = env.flag("REFIR_GPU_GRAPH", True)
WITH_NCCL = env.flag("REFIR_GPU_GRAPH_NCCL", False)  # NCCL calls captured too (off: between graphs)
_CAPTURE_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED: other threads' calls are not refused meanwhile


def _checked(what: str, rc: int) -> None:
    if rc:
        raise LaunchError(f"{what}: {error_name(rc)} ({rc})")


@cache
def _driver() -> Any:
    """libcuda with the stream-capture and graph calls typed (None without them)."""
    lib = _libcuda()
    vp, out = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
    calls = {"cuStreamCreate": [out, ctypes.c_uint], "cuStreamDestroy_v2": [vp],
             "cuStreamBeginCapture_v2": [vp, ctypes.c_int], "cuStreamEndCapture": [vp, out],
             "cuGraphInstantiateWithFlags": [out, vp, ctypes.c_ulonglong], "cuGraphLaunch": [vp, vp],
             "cuGraphExecDestroy": [vp], "cuGraphDestroy": [vp]}
    if lib is None or not all(hasattr(lib, name) for name in calls):
        return None
    for name, args in calls.items():
        getattr(lib, name).argtypes = args
        getattr(lib, name).restype = ctypes.c_int
    return lib


@cache
def _cublas() -> Any:
    """The libcublas cupy loaded (found among the process's mappings), with
    cublasGemmEx and the stream calls typed; None where it cannot be found."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/libcublas.so" in line}
        (path,) = paths
        lib = ctypes.CDLL(path)
    except (OSError, ValueError):
        return None
    vp, i = ctypes.c_void_p, ctypes.c_int
    lib.cublasGemmEx.argtypes = [vp, i, i, i, i, i, vp, vp, i, i, vp, i, i, vp, vp, i, i, i, i]
    lib.cublasSetStream_v2.argtypes = [vp, vp]
    lib.cublasGetStream_v2.argtypes = [vp, ctypes.POINTER(vp)]
    for f in (lib.cublasGemmEx, lib.cublasSetStream_v2, lib.cublasGetStream_v2):
        f.restype = ctypes.c_int
    return lib


class Graph:
    """An instantiated graph and the stream it runs on."""

    def __init__(self, lib: Any, stream: ctypes.c_void_p, graph: ctypes.c_void_p, runnable: ctypes.c_void_p) -> None:
        self.lib, self.stream, self.graph, self.runnable = lib, stream, graph, runnable

    def launch(self) -> None:
        _checked("cuGraphLaunch", self.lib.cuGraphLaunch(self.runnable, self.stream))

    def __del__(self) -> None:
        try:
            self.lib.cuGraphExecDestroy(self.runnable)
            self.lib.cuGraphDestroy(self.graph)
            self.lib.cuStreamDestroy_v2(self.stream)
        except Exception:  # at interpreter exit the driver may be gone already
            pass


def capture(calls: list[tuple[Callable[..., Any], tuple[Any, ...]]], gemm_ex: Any,
            other: Callable[[Callable[..., Any], tuple[Any, ...], int | None], bool] | None = None) -> Graph | None:
    """`calls` (each (fn, args) as recording.note noted it) as one graph, or
    None where one of them cannot be captured or the driver refuses.
    `other(fn, args, stream)` queues any other call on the capturing stream
    (an NCCL call: gpu_backend/transports/wires.py's `in_graph`; stream None: only say
    whether it can), True where it did."""
    lib = _driver()
    blas = _cublas() if any(fn is gemm_ex for fn, _ in calls) else None
    if lib is None or (blas is None and any(fn is gemm_ex for fn, _ in calls)):
        return None
    if any(type(fn) is not DirectLaunch and fn is not copy_bytes and fn is not gemm_ex
           and (other is None or not other(fn, args, None)) for fn, args in calls):
        return None
    stream, graph, runnable = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    if lib.cuStreamCreate(ctypes.byref(stream), 0):  # 0: blocking, ordered with the legacy default stream
        return None
    made = Graph(lib, stream, graph, runnable)  # destroys the stream if anything below fails
    if lib.cuStreamBeginCapture_v2(stream, _CAPTURE_RELAXED):
        return None
    ok = True
    try:
        for fn, args in calls:
            if type(fn) is DirectLaunch:
                ok = ok and _launch_on(fn, stream, *args) == 0
            elif fn is copy_bytes:
                copy_bytes(args[0], args[1], args[2], stream.value or 0)
            elif fn is gemm_ex:
                ok = ok and _gemm_on(blas, stream, args) == 0
            else:
                ok = ok and other is not None and other(fn, args, stream.value or 0)
    except Exception:  # a launch, or a library call under capture (NCCL's), refused: no graph
        ok = False
    finally:
        ended = lib.cuStreamEndCapture(stream, ctypes.byref(graph))
    if not ok or ended or not graph.value:
        return None
    if lib.cuGraphInstantiateWithFlags(ctypes.byref(runnable), graph, 0):
        return None
    return made


def _launch_on(fn: DirectLaunch, stream: ctypes.c_void_p, grid: Any, block: Any, values: tuple[Any, ...]) -> int:
    """The DirectLaunch's launch, on `stream` (the driver copies the parameters as it is called)."""
    fn.layout.pack_into(fn.buffer, 0, *values)
    gx, gy, gz = (grid, 1, 1) if type(grid) is int else (*grid, 1, 1)[:3]
    bx, by, bz = (block, 1, 1) if type(block) is int else (*block, 1, 1)[:3]
    return fn.call(fn.function, gx, gy, gz, bx, by, bz, 0, stream, fn.params, None)


def _gemm_on(blas: Any, stream: ctypes.c_void_p, args: tuple[Any, ...]) -> int:
    """The recorded cublasGemmEx (cupy's handle and arguments) on `stream`; the handle's stream put back."""
    handle = ctypes.c_void_p(args[0])
    before = ctypes.c_void_p()
    if blas.cublasGetStream_v2(handle, ctypes.byref(before)) or blas.cublasSetStream_v2(handle, stream):
        return -1
    try:
        return blas.cublasGemmEx(handle, *args[1:])
    finally:
        blas.cublasSetStream_v2(handle, before)
