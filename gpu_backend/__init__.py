"""The gpu backend: Numba-CUDA kernels on device buffers with layouts, NCCL
collectives on GPUs and MPI under the CUDA simulator.

Here: the backend itself (backend: a lowered program's steps as kernels and
communications), every compute op on device buffers (impls), the choice of
CUDA target and the launch shapes (device), the simulator's block scheduler
(simulator). By job, below: device buffers and memory (buffers), the kernels
and their planning (kernels), communications (transports), launches and
replayed runs (launches), and refir against torch DTensor on real GPUs
(checks).

Op families beyond today's register their impls into impls' table from modules of
their own, imported here so that the table is whole wherever the backend is used."""

from gpu_backend.kernels import masks, partition, window  # noqa: F401, E402  (comparisons, where, iota; partition; slice, select, pad, cat)
