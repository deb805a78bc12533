"""The host cost of a kept launch (CPU, one process, no GPU: the driver call stubbed).

    NUMBA_ENABLE_CUDASIM=1 python -m benchmarks.kept_launch_host

Between pooled Memory, elementwise, copy_into and reduce_into keep a launch
per layout (gpu_backend/launch.py `keep_launch`); a repeated call then costs
a dict lookup, the filling of its parameters and the driver call. This times
that Python, per call (µs, the best of many short runs: on a busy machine a
short run more often goes unpreempted), with the driver call replaced by a
function that does nothing, over memory at made-up addresses (the same stubs
as tests/test_gpu_kernels.py's kept-launch test), for each kind of kept
launch: the device time is not measured here, only what the host adds.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable

import numpy as np

from gpu_backend import functions, kernels, launch, reduce
from gpu_backend.buffer import DeviceBuffer
from gpu_backend.memory import Memory

CALLS, ROUNDS = 2_000, 150
F32 = np.dtype(np.float32)


def _memory(base: int, offset: int, shape: tuple[int, ...], perm: tuple[int, ...] | None = None) -> DeviceBuffer:
    b = DeviceBuffer.dense(Memory(base, int(np.prod(shape)) + offset + 3, F32, None), shape)
    b = DeviceBuffer(b.data, offset, b.shape, b.strides)
    return b.transpose(perm) if perm else b


def _stub() -> list[int]:
    """Launches recorded instead of made; every kept launch goes to a driver call that does nothing."""
    calls: list[int] = []
    nothing = lambda grid, block, values: None  # noqa: E731
    for module in (launch, kernels, reduce):  # where `prepared` is looked up, before and after KeptLaunches
        if hasattr(module, "prepared"):
            module.prepared = lambda kernel, args: nothing
    for module in (kernels, reduce):
        module.launch = lambda kernel, grid, block, *args: calls.append(1)
    for scratch in ("_scratch", "_unused"):  # the kernels' own buffers, pooled on a GPU
        setattr(reduce, scratch, lambda *shape: Memory(1 << 40, 64, np.dtype(np.float64), None))
    reduce._counter = lambda: Memory(1 << 41, 1, np.dtype(np.int32), None)
    kernels.SIMULATED = False
    return calls


def cases() -> dict[str, Callable[[], object]]:
    add, relu = functions.binary("add", F32), functions.unary("relu", F32)
    a, b = _memory(16 << 20, 0, (4, 16)), _memory(64 << 20, 5, (4, 16))
    bias = DeviceBuffer(Memory(96 << 20, 17, F32, None), 1, (1, 16), (16, 1))
    out3, rows = _memory(16 << 20, 3, (4, 6, 16)), _memory(64 << 20, 24, (6, 4, 16), (1, 0, 2))
    dense = [_memory((16 + 16 * i) << 20, i, (96,)) for i in range(3)]
    transposed = _memory(64 << 20, 24, (4, 6, 16), (2, 0, 1))
    copy_out = _memory(16 << 20, 8, (16, 4, 6))
    red_out, red_in = _memory(16 << 20, 2, (4, 8)), _memory(64 << 20, 4, (4, 8, 32))
    return {
        "elementwise, broadcast add (walk)": lambda: kernels.elementwise(add, a, b, bias),
        "elementwise, strided relu (rows)": lambda: kernels.elementwise(relu, out3, rows),
        "elementwise, dense add": lambda: kernels.elementwise(add, *dense),
        "elementwise, dense add of a scalar": lambda: kernels.elementwise(add, dense[0], dense[1], scalar=1.5),
        "copy_into, rows": lambda: kernels.copy_into(out3, rows),
        "copy_into, tiles": lambda: kernels.copy_into(copy_out, transposed),
        "reduce_into, inner sum": lambda: reduce.reduce_into(red_out, red_in, (2,), "sum"),
    }


def main() -> None:
    calls = _stub()
    for name, call in cases().items():
        call()  # the full path, its launch kept
        before = len(calls)
        best = min(timeit.repeat(call, number=CALLS, repeat=ROUNDS)) / CALLS * 1e6
        assert len(calls) == before, f"{name}: not a kept launch"
        print(f"{name:38s} {best:.2f} µs")


if __name__ == "__main__":
    main()
