"""kernel_probe's `layer` section: issue 27's rows below 90% of the copy, under each variant of
the knobs of the kernels they take, so that one GPU run tells which wins
(`python -m benchmarks.kernel_probe layer`; GPU_BENCH_MIB: the size, default 1024).

Each row is benchmarks/gpu_layer_ops.py's case (the same operands, its values checked
against torch's under every variant before it is timed), as % of a device copy of the
bytes it counts, one call and piped, then the kernels' registers:

- slice [:, 1:-1], reshape [:, 1:-1] -> 1-D, pad: row_words' WORDS_WIDE (eight words a
  round or four), WORDS_PAIRS (shifted f32 rows by their 4-byte elements); pad also window.FRAMED
  (its border along the rows written by the interior's copy, or by fills after it) and
  window.PAD_ROWS (its top and bottom rows written by that copy too: one launch, not two);
- where mask: masks.WHERE_WORDS (8-byte words, or the element row kernel);
- reshape heads: elementwise.ROWS1_LEAST (the row kernel's narrowest rows of threads),
  ROWS1_SWAP (its outer axes swapped: a block's rows neighbours in the source) and
  ROWS1_MIN_BLOCKS (launch bounds: 6 or 8 blocks an SM, against 5 at 48 registers, some spilled);
- reshape column-major: the tiled transpose's side, rows, walk and grid;
- the matmuls of different ranks: refir (cuBLAS) against torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks import gpu_layer_ops as layer
from benchmarks.gpu_ops import copy_ceiling
from benchmarks.gpu_timing import NONE, median_time, say
from gpu_backend.device import cuda
from gpu_backend.kernels import elementwise, masks, matmul_ranks, row_words, transpose, window

# each a kernel compiled (seconds each: the stage's 240 s); launch bounds, one kernel for every stride and
# shifted rows staged through shared memory, which lost (HISTORY.md), left out
WORDS = [{}, {"WORDS_PAIRS": False}, {"WORDS_WIDE": False}]
# (module, knob values) variants per row, by the start of the row's name; the first: the defaults
VARIANTS: dict[str, list[tuple[Any, dict[str, Any]]]] = {
    "slice [:, 1:-1]": [(row_words, v) for v in WORDS],
    "reshape [:, 1:-1]": [(row_words, v) for v in WORDS],
    "pad 1": [(row_words, v) for v in WORDS] + [(window, {"FRAMED": False}), (window, {"PAD_ROWS": True})],
    "where mask": [(masks, {}), (masks, {"WHERE_WORDS": False})],
    "reshape heads": [(elementwise, {"ROWS1_LEAST": least, "ROWS1_SWAP": swap, "ROWS1_MIN_BLOCKS": blocks})
                      for least, swap, blocks in [(8, True, 0), (16, True, 0), (32, True, 0), (8, False, 0),
                                                  (8, True, 6), (8, True, 8)]],
    "reshape column-major": [(transpose, {"TRANSPOSE_SIDE": s, "TRANSPOSE_ROWS": r, "TRANSPOSE_WALK": w,
                                          "TRANSPOSE_BLOCKS": b})
                             for s, r, w, b in [(64, 2, 1, 2), (64, 2, 0, 1), (64, 2, 1, 1), (64, 2, 0, 2),
                                                (64, 4, 1, 2)]],
    "linear": [(matmul_ranks, {})],
    "matmul": [(matmul_ranks, {})],
}


def layer_section(torch: Any, n: int, knobs: Callable[..., Any], row: Callable[..., Any],
                  regs: Callable[[Any], str]) -> None:
    """kernel_probe's knobs (a context: a module's values set, plans forgotten), row (a timed
    row) and regs (a kernel's registers), for n elements of f32 in each case's largest operand."""
    say("issue 27's rows below 90%: variants of their kernels' knobs (first: the defaults)")
    made = layer.Operands(torch)
    for case in layer.cases(n):
        variants = next((v for start, v in VARIANTS.items() if case.name.startswith(start)), None)
        if variants is None:
            continue
        p = layer.prepare(case, made)
        ceiling = copy_ceiling(torch, case.nbytes, NONE)
        theirs = None if p.theirs is None else median_time(p.theirs, torch.cuda.synchronize, NONE)
        say(f" {case.name}: torch {'-' if theirs is None else f'{100 * ceiling / theirs:.0f}%'}")
        for module, values in variants:
            label = f"{module.__name__.rsplit('.', 1)[-1]} {values or 'defaults'}"
            try:
                with knobs(module, **values):
                    layer.check(p, torch, n)  # values first, under this variant
                    row(label, case.nbytes, ceiling, p.ours)
            except Exception as e:  # noqa: BLE001  (a variant that fails is said; the others still run)
                say(f"  {label}: {type(e).__name__}: {e}")
    cuda.synchronize()
    for wide, pairs in [(True, True), (True, False), (False, True)]:  # WORDS' kernels, as compiled
        say(f"  regs row_words f32 wide {wide} pairs {pairs}: {regs(row_words.row_words_kernel(2, wide, 0, pairs, 1))}")
    blank = row_words.row_words_kernel(2, True, 0, True, 1, True)
    say(f"  regs row_words f32 with pad's blank rows: {regs(blank)}")
    from gpu_backend.kernels.elementwise_kernels import ignoring_scalar, rows1_kernel
    from gpu_backend.kernels.where_words import where_words_kernel

    copy = ignoring_scalar(elementwise._same)
    say("  regs row kernel copy, launch bounds 0, 6, 8: "
        + ", ".join(regs(rows1_kernel(copy, blocks)) for blocks in (0, 6, 8)))

    say(f"  regs where_words f32 (mask, x, scalar): {regs(where_words_kernel(2, 1, 1, 0))}, "
        f"where rows: {regs(masks.where_rows_kernel(1, 1, 0))}")
