"""The block scheduler gpu_backend/simulator.py gives numba's CUDA simulator:
barriers still hold every thread of a block, and a thread's exception still
ends the launch (the others, waiting at a barrier, are let go)."""

import numpy as np
import pytest

from gpu_backend.device import SIMULATED, cuda

pytestmark = pytest.mark.skipif(not SIMULATED, reason="the scheduler serves the simulator only")


def test_scheduler_is_installed() -> None:
    from numba.cuda.simulator import kernel as sim

    from gpu_backend.simulator import _run_block

    assert sim.BlockManager.run is _run_block


@cuda.jit
def _rotate(out, rounds):  # noqa: ANN001 (a kernel)
    t = cuda.threadIdx.x
    for _ in range(2):  # the simulator's shared arrays: the second ask is the block's one
        shared = cuda.shared.array(4, np.int64)
        cuda.syncthreads()
    shared[t] = t
    cuda.syncthreads()
    for _ in range(rounds):  # each round reads a neighbour's value written before the barrier
        v = shared[(t + 1) % 4]
        cuda.syncthreads()
        shared[t] = v
        cuda.syncthreads()
    out[cuda.blockIdx.x * 4 + t] = shared[t]


def test_barriers_hold_every_thread() -> None:
    out = np.full(8, -1, np.int64)
    _rotate[2, 4](out, 3)
    assert out.tolist() == [3, 0, 1, 2, 3, 0, 1, 2]


@cuda.jit
def _fail_in_one(out):  # noqa: ANN001 (a kernel)
    t = cuda.threadIdx.x
    if t == 2:
        raise ValueError("thread 2 fails")
    cuda.syncthreads()
    out[t] = 1


def test_an_exception_ends_the_launch() -> None:
    out = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match=r"tid=\[2, 0, 0\].*thread 2 fails"):
        _fail_in_one[1, 4](out)
