"""The broken tree of the gpu_tree_skips_last_level mutant (conformance/hidden_mutants.py).

A module of its own, imported only when that mutant runs: it needs numba, and
the CUDA simulator finds `cuda` among a kernel's module globals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpu_backend.device import THREADS, cuda
from gpu_backend.functions import BINARY, COMBINE


def short_tree(kind: str) -> Callable:
    """gpu_backend.reduce._tree without its last level: partial[1] is never folded in."""
    combine = BINARY[COMBINE[kind]]

    @cuda.jit(device=True)
    def tree(partial: Any, tid: int) -> None:
        s = THREADS // 2
        while s > 1:
            if tid < s:
                partial[tid] = combine(partial[tid], partial[tid + s])
            cuda.syncthreads()
            s //= 2

    return tree
