"""Host <-> device copies of a run's inputs and results, several ways, one GPU.

    python -m benchmarks.transfer_probe        (a real GPU; TRANSFER_KIB="1 256 512 1024 4096 16384")

Per size, µs per copy (median of 50, each copy followed by a synchronize, as a
run's first upload and its download are): the gpu backend's own path
(gpu_backend/buffer.py: to_device, to_host), the driver's pageable copy into
pooled memory alone, a copy through a pinned staging buffer (numpy's copy into
it, then an asynchronous driver copy), and torch's `.cuda()` / `.cpu()` as
the peer. The pageable source is the same array every time, as in a benchmark
that runs one program on one input again and again.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import numpy as np

SIZES_KIB = [int(s) for s in os.environ.get("TRANSFER_KIB", "1 256 512 1024 4096 16384").split()]
REPEATS = 50


def median_us(fn: Callable[[], object], sync: Callable[[], object]) -> float:
    """NaN where this way fails here (its error printed)."""
    try:
        fn()
    except Exception as exc:  # a probe: report the way that does not work and go on
        print(f"  failed: {type(exc).__name__}: {exc}", flush=True)
        return float("nan")
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e6


def main() -> int:
    from gpu_backend.device import SIMULATED, cuda

    if SIMULATED:
        sys.stderr.write("transfer_probe needs a real GPU\n")
        return 1
    import torch
    from numba.cuda.cudadrv.driver import driver, host_pointer

    from gpu_backend import memory
    from gpu_backend.buffer import to_device, to_host

    sync = cuda.synchronize
    print(f"{'KiB':>6} {'up: ours':>9} {'driver':>7} {'pinned':>7} {'torch':>7} | "
          f"{'down: ours':>10} {'driver':>7} {'pinned':>7} {'torch':>7}   (µs per copy + sync, median of {REPEATS})")
    for kib in SIZES_KIB:
        n = kib * 1024 // 4
        host = np.random.default_rng(0).random(n, np.float32)
        dev = memory.empty(n, np.dtype(np.float32))
        pinned = cuda.pinned_array(n, np.float32)

        def driver_up() -> None:
            driver.cuMemcpyHtoD(dev.ptr, host_pointer(host, readonly=True), host.nbytes)  # noqa: B023

        def pinned_up() -> None:
            np.copyto(pinned, host)  # noqa: B023
            driver.cuMemcpyHtoDAsync(dev.ptr, pinned.ctypes.data, host.nbytes, 0)  # noqa: B023

        def driver_down() -> np.ndarray:
            out = np.empty(n, np.float32)  # noqa: B023
            driver.cuMemcpyDtoH(host_pointer(out), dev.ptr, out.nbytes)  # noqa: B023
            return out

        def pinned_down() -> np.ndarray:
            driver.cuMemcpyDtoHAsync(pinned.ctypes.data, dev.ptr, host.nbytes, 0)  # noqa: B023
            sync()
            return pinned.copy()  # noqa: B023

        on_torch = torch.from_numpy(host).cuda()
        up = [median_us(lambda: to_device(host), sync), median_us(driver_up, sync), median_us(pinned_up, sync),  # noqa: B023
              median_us(lambda: torch.from_numpy(host).cuda(), torch.cuda.synchronize)]  # noqa: B023
        down = [median_us(lambda: to_host(dev), sync), median_us(driver_down, sync),  # noqa: B023
                median_us(pinned_down, sync), median_us(lambda: on_torch.cpu(), torch.cuda.synchronize)]  # noqa: B023
        print(f"{kib:>6} {up[0]:>9.1f} {up[1]:>7.1f} {up[2]:>7.1f} {up[3]:>7.1f} | "
              f"{down[0]:>10.1f} {down[1]:>7.1f} {down[2]:>7.1f} {down[3]:>7.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
