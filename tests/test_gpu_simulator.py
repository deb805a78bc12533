"""The block scheduler gpu_backend/simulator.py gives numba's CUDA simulator:
barriers still hold every thread of a block, and a thread's exception still
ends the launch (the others, waiting at a barrier, are let go)."""

import numpy as np
import pytest

from gpu_backend.device import SIMULATED, cuda
from gpu_backend.kernels.strides import unravel
from tests.sim_device import lane

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


@cuda.jit
def _offsets(out, shape, strides):  # noqa: ANN001 (a kernel)
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    out[i] = unravel(i, shape, strides) * 100 + lane()


def test_a_kernel_with_no_barrier_runs_its_threads_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """No thread is started for it, each thread still sees its own indices, and a
    device function of another module still reaches the launch's fake `cuda`."""
    import threading

    from gpu_backend import simulator

    assert not simulator._reached(_offsets.py_func).barrier
    started: list[object] = []
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append(self))
    out = np.full(8, -1, np.int64)
    _offsets[2, 4](out, (0, 0, 2, 4), (0, 0, 1, 2))  # column-major offsets of a 2x4 block
    assert started == []
    assert out.tolist() == [0, 201, 402, 603, 110, 311, 512, 713]


@cuda.jit
def _lanes_after_a_barrier(out):  # noqa: ANN001 (a kernel)
    cuda.syncthreads()
    out[cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x] = lane()


def test_a_device_function_of_another_module_sees_each_thread_of_a_threaded_block() -> None:
    out = np.full(8, -1, np.int64)
    _lanes_after_a_barrier[2, 4](out)
    assert out.tolist() == [0, 1, 2, 3, 10, 11, 12, 13]


@cuda.jit(device=True)
def _wait():  # noqa: ANN202 (a device function)
    cuda.syncthreads()


def _closing_over(wait):  # noqa: ANN001, ANN202 (a kernel factory, as gpu_backend's)
    @cuda.jit
    def kernel(out):  # noqa: ANN001
        wait()
        out[cuda.threadIdx.x] = 1

    return kernel


@cuda.jit
def _calling_global(out):  # noqa: ANN001 (a kernel)
    for _ in range(1):
        _wait()
    out[cuda.threadIdx.x] = 1


def test_barriers_are_found_through_closures_and_device_functions() -> None:
    from gpu_backend import simulator

    assert simulator._reached(_rotate.py_func).barrier  # its own syncthreads
    assert simulator._reached(_calling_global.py_func).barrier  # in a global device function, in a loop
    closing = _closing_over(_wait)
    assert "syncthreads" not in closing.py_func.__code__.co_names
    assert simulator._reached(closing.py_func).barrier  # in the device function it closes over
    assert not simulator._reached(_closing_over(cuda.jit(device=True)(lambda: None)).py_func).barrier
    out = np.zeros(4, np.int64)
    closing[1, 4](out)
    assert out.tolist() == [1, 1, 1, 1]


@cuda.jit
def _fail_in_turn(out):  # noqa: ANN001 (a kernel)
    t = cuda.threadIdx.x
    if t == 2:
        raise ValueError("thread 2 fails")
    out[t] = 1


def test_an_exception_in_turn_names_its_thread_and_block() -> None:
    out = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match=r"^tid=\[2, 0, 0\] ctaid=\[0, 0, 0\]: thread 2 fails$"):
        _fail_in_turn[1, 4](out)


def test_a_barrier_missed_by_the_scan_is_an_error_not_a_wrong_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_backend import simulator

    monkeypatch.setitem(simulator._reach, _rotate.py_func, simulator._Reach(False, ()))
    with pytest.raises(RuntimeError, match="judged free of barriers"):
        _rotate[1, 4](np.zeros(4, np.int64), 1)


@cuda.jit
def _votes(out):  # noqa: ANN001 (a kernel)
    t = cuda.threadIdx.x
    out[0, t] = cuda.syncthreads_count(t % 2)
    out[1, t] = cuda.syncthreads_and(t < 4)
    out[2, t] = cuda.syncthreads_or(t == 3)
    if t == 0:
        return  # ends early: the barrier below waits for the live threads only
    cuda.syncthreads()
    out[3, t] = t


def test_votes_and_an_early_end_in_a_block_with_barriers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each thread of a block with barriers is a greenlet, not a started thread."""
    import threading

    started: list[object] = []
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append(self))
    out = np.full((4, 4), -1, np.int64)
    _votes[1, 4](out)
    assert started == []
    assert out.tolist() == [[2, 2, 2, 2], [1, 1, 1, 1], [1, 1, 1, 1], [-1, 1, 2, 3]]
