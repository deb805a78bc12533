"""Where the one-operand general kernel's compile time goes (no GPU: libnvvm only, as kernel_ptx.py).

    python -m benchmarks.walk_compile [ROUNDS] [BEFORE_DIR]

`map_kernel(fn, 1)` (gpu_backend/elementwise_kernels.py) is a kernel that calls
the general walk, `_walk(fn, False)`, as a device function. This times, in
turns in one process, the CPU time of compiling to PTX for sm_90 (median and
quartiles of ROUNDS fresh functions, default 15, after one round to warm up):
the one-operand kernel; its walk alone, compiled as a device function (the
rest of the kernel's time is the call: a second function through numba's
pipeline, linked, and a larger module for NVVM); the two-operand kernel (the
walk itself); and, given BEFORE_DIR (`git archive c28ab1a | tar -x -C DIR`:
before the builders became one), that checkout's one-operand kernel, loaded
from its gpu_backend/elementwise_kernels.py under another name.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# kernel_ptx sets numba up for compiling without a GPU before it is imported
from benchmarks.kernel_ptx import ARR, AXES, INT, MAP, WALK, T, _function, cuda
from gpu_backend import elementwise_kernels as ek

ONE = (*MAP, AXES, WALK, INT, T.float32)
TWO = (*MAP, ARR, INT, AXES, INT, INT, AXES, WALK, INT)
WALK_ONE = (*MAP, T.float32, INT, AXES, INT, INT, AXES, WALK, INT)  # the scalar in b's place


def _before(directory: str) -> Any:
    """The one-operand builder of another checkout's elementwise_kernels.py."""
    path = Path(directory) / "gpu_backend" / "elementwise_kernels.py"
    spec = importlib.util.spec_from_file_location("before_elementwise_kernels", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return (lambda fn: module.map_kernel(fn, 1)) if hasattr(module, "map_kernel") else module.map1_kernel


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    compiles: dict[str, tuple[Any, tuple[Any, ...], bool]] = {
        "one-operand kernel": (lambda fn: ek.map_kernel(fn, 1).py_func, ONE, False),
        "  its walk alone (device function)": (lambda fn: ek._walk(fn, False), WALK_ONE, True),
        "two-operand kernel (the walk)": (lambda fn: ek.map_kernel(fn, 2).py_func, TWO, False),
    }
    if len(sys.argv) > 2:
        before = _before(sys.argv[2])
        compiles["one-operand kernel before"] = (lambda fn: before(fn).py_func, ONE, False)
    seconds: dict[str, list[float]] = {name: [] for name in compiles}
    for k in range(rounds + 1):
        for name, (make, signature, device) in compiles.items():
            pyfunc = make(_function())
            start = time.process_time()
            cuda.compile_ptx(pyfunc, signature, device=device, cc=(9, 0))
            if k:
                seconds[name].append(time.process_time() - start)
    for name, times in seconds.items():
        low, _, high = statistics.quantiles(times, n=4)
        print(f"{name:40s} {statistics.median(times) * 1e3:5.0f} ms  ({low * 1e3:.0f}-{high * 1e3:.0f})")


if __name__ == "__main__":
    main()
