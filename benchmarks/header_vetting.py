"""The cost of refir.run's result-header check when the headers repeat (CPU, one process).

    python -m benchmarks.header_vetting

Under MPI every run's result headers (refir.ranks.gather_to_root) reach
every rank, and refir.runner.vet_headers checks them. Its skip for headers
seen good before used to be a second cache: a key of the bindings and every
header, built and hashed on every call (refir.memo), on top of the headers'
round (refir.mpi.allgather_obj with `reuse`), which already hands back the
very list of its last round for the same bytes. Now it keys on that list's
identity. This times, per call (µs, best of 5): the old way (rebuilt here as it
was), the new way, and vetting afresh, on a 2-rank and a 4-rank seed-2
program's headers.
"""

from __future__ import annotations

import timeit

import numpy as np

import refir
from benchmarks.phases import PATTERN
from refir import runner
from refir.memo import Memo
from refir.ranks import entry

CALLS = 100_000


def two_caches(good: Memo[None]):  # noqa: ANN201
    """vet_headers as it was before (its own Memo of hashed signatures)."""

    def vet(checked, bindings, every):  # noqa: ANN001, ANN202
        signature = (tuple(sorted(bindings.items())), tuple(map(tuple, every)))
        hash(signature)
        if good.has(checked, signature):
            return None
        error = runner._vet_headers(checked, bindings, every)
        if error is None:
            good.put(checked, signature, None)
        return error

    return vet


def main() -> None:
    for ranks in (2, 4):
        checked = runner.verified(refir.load(PATTERN.format(devices=", ".join(map(str, range(ranks))))), None)
        inputs = {"x": np.zeros((8, 16), np.float32), "w": np.zeros((16, 8), np.float32),
                  "bias": np.zeros(8, np.float32)}
        bindings = runner.bind_and_check(checked, inputs)
        every = [[entry("out", 0, np.zeros((8, 8), np.float32))]] + [[] for _ in range(ranks - 1)]
        old = two_caches(Memo())
        assert old(checked, bindings, every) is None and runner.vet_headers(checked, bindings, every) is None
        costs = {
            "two caches (before)": lambda: old(checked, bindings, every),  # noqa: B023
            "the round's reuse alone (after)": lambda: runner.vet_headers(checked, bindings, every),  # noqa: B023
            "vetting afresh": lambda: runner._vet_headers(checked, bindings, every),  # noqa: B023
        }
        print(f"{ranks} ranks, µs per call: " + ", ".join(
            f"{name} {min(timeit.repeat(fn, number=CALLS, repeat=5)) / CALLS * 1e6:.2f}" for name, fn in costs.items()))


if __name__ == "__main__":
    main()
