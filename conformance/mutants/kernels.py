"""Mutants of the gpu backend's kernel paths that only some layouts take: the
corpus has a program chosen for each (docs/conformance.md, "What these tables
count"), with a row-major case, because conform's varied strides mostly send
copies to the element kernels. Each bug lives in one path, and the program
meant for that path kills it (tests/test_conformance_teeth.py):

- row_words (gpu_backend/kernels/row_words.py) reads a shifted row's words as if
  they were aligned: `window_word_rows`;
- where's word kernel (gpu_backend/kernels/where_words.py) takes rows that start
  inside a word as whole words: `masks_long_rows`;
- the per-block and per-thread reductions (gpu_backend/kernels/reduce.py) fold
  only the innermost of reduced axes that do not merge: `reduce_split_dims`;
- the batched transpose (gpu_backend/kernels/transpose.py) leaves the innermost
  batch axis out of the destination's offsets: `permute_five_axes`.

A mutant replaces a piece of the launch plan, or a device function the kernels
call, and forgets every plan and built kernel on entry and exit, so nothing
made with the right piece runs under the wrong one (nor the reverse after).
Importing this module registers them in the table (conformance/mutants/registry.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

from conformance.mutants.patching import fresh_kernels
from conformance.mutants.registry import mutant
from refir.ir import ops


@mutant("the gpu's word copy reads a shifted row's words as if aligned (the shift between the rows dropped)",
        by="values", backend="gpu", needs=(ops.Slice, ops.Pad, ops.Reshape, ops.Permute))
def gpu_words_shift_dropped() -> Iterator[None]:
    import gpu_backend.kernels.row_words as row_words
    from gpu_backend.device import cuda

    right = row_words._word

    @cuda.jit(device=True)
    def aligned(a8: Any, a_e: Any, wa: int, s: int, k: int, mode: int, lo_shift: Any, hi_shift: Any,
                fill: Any) -> Any:
        shifted = mode == 1 or mode == 4
        return right(a8, a_e, wa, s, k, 0 if shifted else mode, lo_shift, hi_shift, fill)

    with fresh_kernels(row_words.row_words_kernel), mock.patch.object(row_words, "_word", aligned):
        yield


@mutant("the gpu's where takes rows that start inside an 8-byte word as whole words (reads from the word's start)",
        by="values", backend="gpu", needs=(ops.Where,))
def gpu_where_words_misaligned() -> Iterator[None]:
    import gpu_backend.kernels.where_words as where_words

    with fresh_kernels(), mock.patch.object(where_words, "_aligned", lambda offset, st, f: True):
        yield


def _patched_plan(module: Any, wrong: Callable[[Any], Any]) -> mock._patch:
    """module._plan, its result passed through `wrong`."""
    right = module._plan
    return mock.patch.object(module, "_plan", lambda *args, **kw: wrong(right(*args, **kw)))


@mutant("the gpu's per-block and per-thread reductions fold only the innermost of reduced axes that do not merge",
        by="values", backend="gpu", needs=(ops.Reduction,))
def gpu_reduce_inner_run_only() -> Iterator[None]:
    import gpu_backend.kernels.reduce as reduce

    def inner_only(plan: Any) -> Any:
        if plan.path not in ("per_block", "per_thread"):
            return plan
        x_args = list(plan.x_args)  # (..., r_in, s_in, r_outer, s_outer, n_red, chunks, chunk)
        n_red = x_args[3]  # the innermost reduced run's length, taken for them all
        x_args[7], x_args[9] = n_red, -(-n_red // plan.chunks)
        return plan._replace(x_args=tuple(x_args))

    with fresh_kernels(), _patched_plan(reduce, inner_only):
        yield


@mutant("the gpu's batched transpose leaves the innermost batch axis out of the destination's offsets "
        "(its entries written over each other)", by="values", backend="gpu", needs=(ops.Permute, ops.Reshape))
def gpu_transpose_batch_axis_dropped() -> Iterator[None]:
    import gpu_backend.kernels.transpose as transpose

    def axis_dropped(plan: Any) -> Any:
        if len(plan.d_args) != 3:  # a batch of at most two axes: the other kernel
            return plan
        batch = plan.d_args[0]
        return plan._replace(d_args=((*batch[:-1], 0), *plan.d_args[1:]))

    with fresh_kernels(), _patched_plan(transpose, axis_dropped):
        yield
