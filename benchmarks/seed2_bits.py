"""The seed-2 run's outputs at issue 15's sizes, saved for a bit-for-bit
comparison between two trees (one GPU, one process):

    python benchmarks/seed2_bits.py OUT.npz      (PYTHONPATH picks the tree)
"""

from __future__ import annotations

import sys

import numpy as np

import refir
from benchmarks.phases import PATTERN

SIZES = [(256, 512, 256), (512, 512, 512), (4096, 4096, 4096)]
# Each size run this often, the runs compared with each other and the last one saved: with
# gpu_backend/launches/replay.py, the first compiles, the second is recorded, the third replayed call by
# call (its graph made and tried), the fourth replayed as the graph.
RUNS = 4


def main(path: str) -> int:
    program = refir.load(PATTERN.format(devices="0"))
    got = {}
    for m, k, n in SIZES:
        rng = np.random.default_rng(2)
        inputs = {"x": rng.random((m, k), np.float32) - 0.5, "w": rng.random((k, n), np.float32) - 0.5,
                  "bias": rng.random(n, np.float32) - 0.5}
        runs = [refir.run(program, inputs, backend="gpu").outputs["out"] for _ in range(RUNS)]
        if any(r.view(np.uint32).tobytes() != runs[0].view(np.uint32).tobytes() for r in runs):
            print(f"{m}, {k}, {n}: the runs of one tree differ")
            return 1
        got[f"{m}_{k}_{n}"] = runs[-1]
    np.savez(path, **got)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
