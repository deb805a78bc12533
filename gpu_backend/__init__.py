"""The gpu backend: Numba-CUDA kernels on device buffers with layouts, NCCL
collectives on GPUs and MPI under the CUDA simulator (see backend.py)."""
