"""The seed-2 run's outputs at issue 15's small sizes, saved for a bit-for-bit
comparison between two trees (one GPU, one process):

    python benchmarks/seed2_bits.py OUT.npz      (PYTHONPATH picks the tree)
"""

from __future__ import annotations

import sys

import numpy as np

import refir
from benchmarks.phases import PATTERN

SIZES = [(256, 512, 256), (512, 512, 512), (4096, 4096, 4096)]


def main(path: str) -> int:
    program = refir.load(PATTERN.format(devices="0"))
    got = {}
    for m, k, n in SIZES:
        rng = np.random.default_rng(2)
        inputs = {"x": rng.random((m, k), np.float32) - 0.5, "w": rng.random((k, n), np.float32) - 0.5,
                  "bias": rng.random(n, np.float32) - 0.5}
        got[f"{m}_{k}_{n}"] = refir.run(program, inputs, backend="gpu").outputs["out"]
    np.savez(path, **got)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
