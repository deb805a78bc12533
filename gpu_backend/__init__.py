"""The gpu backend: Numba-CUDA kernels on device buffers with layouts, NCCL
collectives on GPUs and MPI under the CUDA simulator.

Here: the backend itself (backend: a lowered program's steps as kernels and
communications), every compute op on device buffers (impls), the choice of
CUDA target and the launch shapes (device), the simulator's block scheduler
(simulator). By job, below: device buffers and memory (buffers), the kernels
and their planning (kernels), communications (transports), launches and
replayed runs (launches), and refir against torch DTensor on real GPUs
(checks)."""
