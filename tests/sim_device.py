"""A device function in a module of its own, which reads `cuda` (for
tests/test_gpu_simulator.py: a launch must swap this module's `cuda` too)."""

from gpu_backend.device import cuda


@cuda.jit(device=True)
def lane() -> int:
    return cuda.threadIdx.x + 10 * cuda.blockIdx.x
