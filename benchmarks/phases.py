"""What the whole-run benchmarks (run_overhead, gpu_runs) share: the seed-2
program, and where a call's time goes (the functions it calls, each wrapped
with a timer for the measurement only)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

# The second seed bug's pattern: matmul over a sharded K, its allreduce, bias, relu.
PATTERN = """mesh m = [{devices}]
func main(x: f32[M, K@DIDx], w: f32[K@DIDx, N], bias: f32[N]) {{
  c: f32[M, N] = matmul(x, w)
  bb: f32[b, N] = unsqueeze(bias, dims=[0])
  y = add(c, bb)
  out = relu(y)
  return out
}}
"""


def phase_medians(fn: Callable[[], object], barrier: Callable[[], object], spots: list[tuple[object, str, str]],
                  repeats: int) -> tuple[dict[str, float], float]:
    """Median seconds spent in each (owner, attribute, label) spot per call of
    `fn` (labels may repeat: their times add up), and the median call, over
    `repeats` calls after the caller's warm-up. The originals are put back."""
    spent: dict[str, list[float]] = {label: [] for _, _, label in spots}
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in spots]

    def timed(f: Callable, label: str) -> Callable:
        def inner(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                spent[label][-1] += time.perf_counter() - start
        return inner

    for (owner, name, label), (_, _, f) in zip(spots, originals):
        setattr(owner, name, timed(f, label))
    total: list[float] = []
    try:
        for _ in range(repeats):
            for times in spent.values():
                times.append(0.0)
            barrier()
            start = time.perf_counter()
            fn()
            total.append(time.perf_counter() - start)
    finally:
        for owner, name, f in originals:
            setattr(owner, name, f)
    return {label: float(np.median(t)) for label, t in spent.items()}, float(np.median(total))


def nested(label: str) -> bool:
    """A label in parentheses names part of another phase: it is not added to the whole."""
    return label.startswith("(") or label.endswith(")")
