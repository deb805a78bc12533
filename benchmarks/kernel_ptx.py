"""The elementwise kernels' PTX, for comparing two checkouts (no GPU needed: libnvvm only).

    python -m benchmarks.kernel_ptx OUT_DIR [ROUNDS]   (then: diff -r OUT_DIR_before OUT_DIR_after)

A refactor of a kernel's source that must not change its speed can be held
to compiling to the same PTX. This compiles the general, dense and row
kernels of gpu_backend/kernels/elementwise_kernels.py for sm_90 (float32 buffers, an
add-multiply as the function) and writes one file each, the mangled names
(which carry the Python names) replaced by NAME, and prints the CPU time
of compiling each (the median of ROUNDS, default 9, each for a function of
its own, after one to warm up the shared device functions). numba asks a GPU for its
compute capability and looks for NVRTC to choose the architecture; both are
told here instead (NUMBA_FORCE_CUDA_CC=9.0, CUDA_HOME of the toolkit's libnvvm).
Checkouts before the general kernels became one builder (`map_kernel`) are
read through their old names.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
os.environ["NUMBA_FORCE_CUDA_CC"] = "9.0"
os.environ.setdefault("CUDA_HOME", "/usr/local/cuda-13.0")

import numba.cuda.cuda_paths as cuda_paths  # noqa: E402
import numba.cuda.dispatcher as dispatcher  # noqa: E402
from numba import cuda  # noqa: E402
from numba import types as T  # noqa: E402

dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=(9, 0))  # device functions ask
cuda_paths._get_nvrtc_path = lambda: None  # only consulted to choose the architecture, which is forced

from gpu_backend.kernels import elementwise_kernels as ek  # noqa: E402

ARR, INT = T.Array(T.float32, 1, "C"), T.int64
AXES, WALK = T.UniTuple(T.int64, 4), T.UniTuple(T.int64, 6)
MAP = (ARR, INT, AXES, INT, INT, ARR, INT, AXES, INT, INT)


def _function() -> Any:
    """An add-multiply, a new function each call (the kernels are built and kept per function)."""

    @cuda.jit(device=True)
    def fn(a: Any, c: Any) -> Any:
        return a * c + a

    return fn


def kernels(fn: Any) -> dict[str, tuple[Any, tuple[Any, ...]]]:
    new = hasattr(ek, "map_kernel")
    map1, map2 = (ek.map_kernel(fn, 1), ek.map_kernel(fn, 2)) if new else (ek.map1_kernel(fn), ek.map2_kernel(fn))
    return {
        "map1": (map1, (*MAP, AXES, WALK, INT, T.float32)),
        "map2": (map2, (*MAP, ARR, INT, AXES, INT, INT, AXES, WALK, INT)),
        "dense1": (ek.dense1_kernel(fn), (ARR, INT, ARR, INT, INT, T.float32)),
        "dense2": (ek.dense2_kernel(fn), (ARR, INT, ARR, INT, ARR, INT, INT)),
        "rows1": (ek.rows1_kernel(fn), (ARR, INT, INT, INT, ARR, INT, INT, INT, INT, INT, INT, T.float32)),
    }


def main() -> None:
    out = Path(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    out.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, list[float]] = {}
    for k in range(rounds + 1):
        for name, (kernel, signature) in kernels(_function()).items():
            start = time.process_time()
            ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0))
            if k:
                seconds.setdefault(name, []).append(time.process_time() - start)
            else:
                (out / f"{name}.ptx").write_text(re.sub(r"_Z\w+", "NAME", ptx))
    for name, times in seconds.items():
        print(f"{name}: compiled in {statistics.median(times) * 1e3:.0f} ms (CPU, median of {rounds})")


if __name__ == "__main__":
    main()
