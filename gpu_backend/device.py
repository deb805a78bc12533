"""Which CUDA target the kernels run on, and how large their launches are.

The choice must be made before `numba.cuda` is first imported (numba reads
NUMBA_ENABLE_CUDASIM once, at that import), so this module makes it on import
and every module of the package takes `cuda` from here. A real GPU is used when
the CUDA driver loads and reports a device (numba's own test), or when
NUMBA_ENABLE_CUDASIM=0 says so; otherwise the simulator.
"""

from __future__ import annotations

import ctypes
import os
import sys
import warnings
from functools import cache
from typing import Any

from refir import env
from refir.errors import RunError


def _driver_sees_a_gpu() -> bool:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return lib.cuInit(0) == 0 and lib.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0


def _choose() -> bool:
    """True for the simulator. An explicit NUMBA_ENABLE_CUDASIM wins."""
    if "numba.cuda" in sys.modules:  # too late to choose: follow what was imported
        from numba import cuda

        return bool(cuda.config.ENABLE_CUDASIM)
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "").strip() not in ("", "0"):
        return True
    if "NUMBA_ENABLE_CUDASIM" in os.environ or _driver_sees_a_gpu():
        return False
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    return True


SIMULATED: bool = _choose()
if SIMULATED:
    # Simulated kernels compute with numpy scalars, which warn where a GPU
    # silently wraps, overflows or makes a NaN (numpy is silenced so in interp).
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"gpu_backend\.")

from numba import cuda  # noqa: E402  (only after the choice above)

if SIMULATED:
    from gpu_backend.simulator import install

    install()
elif env.flag("REFIR_GPU_POOL", True):  # device memory through gpu_backend/buffers/pool.py
    from gpu_backend.buffers.pool import install as install_pool

    install_pool()

_announced = False


def announce(rank: int) -> None:
    """Say once, on rank 0, that the kernels run on the simulator."""
    global _announced
    if SIMULATED and not _announced and rank == 0:
        sys.stderr.write("refir: no CUDA GPU in use; the gpu backend runs its kernels on numba's CUDA simulator\n")
        sys.stderr.flush()
    _announced = True


_chosen = False
_usable: list[bool] = []  # [True] once cuda.is_available() said so


def use_device(comm: Any = None) -> None:
    """Check that the GPU is usable; under MPI (`comm`), give each rank its own,
    once per process: the rank's index on its node, modulo the GPUs it sees
    (with CUDA_VISIBLE_DEVICES set per rank, always device 0)."""
    global _chosen
    if SIMULATED or _chosen:
        return
    if not _usable:
        if not cuda.is_available():
            raise RunError("numba finds no usable CUDA GPU (set NUMBA_ENABLE_CUDASIM=1 to use the simulator)")
        _usable.append(True)  # asked once per process: numba's answer does not change
    if comm is None:
        return
    from mpi4py import MPI

    from refir.world.mpi_job import barrier

    barrier(comm)  # splitting blocks until every rank calls it: first wait, within the timeout
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)  # the machine's node (its GPUs), whatever REFIR_MPI_NODE_RANKS says
    index = node.rank % len(cuda.gpus)
    node.Free()
    cuda.select_device(index)
    from cuda.core import Device  # nccl4py places its communicators on cuda.core's current device

    Device(index).set_current()
    _chosen = True


# ---- launch shapes ------------------------------------------------------------------
# Kernels loop grid-stride, so launch sizes only tune speed. The simulator runs
# each thread as a Python thread and each block in turn: it gets tiny launches.

THREADS = 8 if SIMULATED else 256  # threads of a 1-D block; a power of two (tree reductions)
TILE = 4 if SIMULATED else 64  # side of a transpose tile
TILE_ROWS = 2  # thread rows of a transpose block (each thread moves TILE / TILE_ROWS)
MATMUL_TILE = 4 if SIMULATED else 16
UNROLL = 4  # elements a thread loads before it stores or folds any (loads in flight hide latency)
ITEM_ROWS = UNROLL if SIMULATED else 4 * UNROLL  # an elementwise work item: this many block widths of elements


@cache
def max_blocks() -> int:
    if SIMULATED:
        return 2
    return cuda.get_current_device().MULTIPROCESSOR_COUNT * 16


def blocks_for(work: int, per_block: int) -> int:
    """Enough blocks to cover `work` items at `per_block` each, within the cap."""
    return max(1, min(max_blocks(), -(-work // max(per_block, 1))))


def fitted(work: int, cap: int = THREADS) -> int:
    """Threads of a block for `work` items: the cap on a GPU; under the
    simulator, where every thread costs a Python thread, the smallest power of
    two that covers the work (within the cap)."""
    if not SIMULATED:
        return cap
    n = 1
    while n < work and n < cap:
        n *= 2
    return n


def jit_options(min_blocks: int) -> dict[str, Any]:
    """cuda.jit's options for a kernel of THREADS-thread blocks asked to fit `min_blocks` an SM
    (launch bounds: the compiler caps its registers to fit); none for 0 or the simulator."""
    return {} if SIMULATED or not min_blocks else {"launch_bounds": (THREADS, min_blocks)}


def rows_block(inner: int, least: int = 32) -> tuple[int, int]:
    """A 2-D block for `rows x inner` loops: x along the inner extent (enough
    for UNROLL elements a thread, at least `least` threads on a GPU (a warp
    unless asked), at most a block wide), y over rows, THREADS threads in all."""
    x = 1 if SIMULATED else least
    while x * UNROLL < inner and x < THREADS:
        x *= 2
    return x, THREADS // x
