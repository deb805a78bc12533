"""The cost of refir.run's result-header check when the headers repeat (CPU, one process).

    python -m benchmarks.header_vetting

Under MPI every run's result headers (refir.ranks.gather_to_root) reach
every rank, and refir.result_headers.vet_headers checks them. Its skip for headers
seen good before used to be a second cache: a key of the bindings and every
header, built and hashed on every call (refir.memo), on top of the headers'
round (refir.mpi.allgather_obj with `reuse`), which already hands back the
very list of its last round for the same bytes. Now it keys on that list's
identity. This times, per call (µs, the best of 100 short runs taken in
turns, so that every way meets the same load on the machine): the old way (rebuilt here as it
was), the new way, and vetting afresh, on a 2-rank and a 4-rank seed-2
program's headers; and the new way's check through a refir.memo.Memo given a
`peek` (the value kept, without the Memo's bookkeeping), to see whether the
hand-made cache could be a Memo at no cost.
"""

from __future__ import annotations

import timeit

import numpy as np

import refir
from benchmarks.phases import PATTERN
from refir import result_headers
from refir.memo import Memo
from refir.prepare import bind_and_check, verified
from refir.ranks import entry

CALLS, ROUNDS = 2_000, 100


def two_caches(good: Memo[None]):  # noqa: ANN201
    """vet_headers as it was before (its own Memo of hashed signatures)."""

    def vet(checked, bindings, every):  # noqa: ANN001, ANN202
        signature = (tuple(sorted(bindings.items())), tuple(map(tuple, every)))
        hash(signature)
        if good.has(checked, signature):
            return None
        error = result_headers._vet_headers(checked, bindings, every)
        if error is None:
            good.put(checked, signature, None)
        return error

    return vet


class PeekMemo(Memo):
    def peek(self, owner: object, signature: object) -> object:
        """The value kept for (owner, signature), else None; no order or hit kept."""
        got = self.entries.get((id(owner), signature))
        return got[1] if got is not None and got[0] is owner else None


def through_memo(good: PeekMemo):  # noqa: ANN201
    """vet_headers with its cache a Memo, checked by `peek`."""

    def vet(checked, bindings, every):  # noqa: ANN001, ANN202
        signature = tuple(bindings.items())
        if good.peek(checked, signature) is every:
            return None
        error = result_headers._vet_headers(checked, bindings, every)
        if error is None:
            good.put(checked, signature, every)
        return error

    return vet


def main() -> None:
    for ranks in (2, 4):
        checked = verified(refir.load(PATTERN.format(devices=", ".join(map(str, range(ranks))))), None)
        inputs = {"x": np.zeros((8, 16), np.float32), "w": np.zeros((16, 8), np.float32),
                  "bias": np.zeros(8, np.float32)}
        bindings = bind_and_check(checked, inputs)
        every = [[entry("out", 0, np.zeros((8, 8), np.float32))]] + [[] for _ in range(ranks - 1)]
        old, memo = two_caches(Memo()), through_memo(PeekMemo())
        assert old(checked, bindings, every) is None and result_headers.vet_headers(checked, bindings, every) is None
        assert memo(checked, bindings, every) is None
        costs = {
            "two caches (before)": lambda: old(checked, bindings, every),  # noqa: B023
            "the round's reuse alone (after)": lambda: result_headers.vet_headers(checked, bindings, every),  # noqa: B023
            "the same through a Memo's peek": lambda: memo(checked, bindings, every),  # noqa: B023
            "vetting afresh": lambda: result_headers._vet_headers(checked, bindings, every),  # noqa: B023
        }
        best = dict.fromkeys(costs, float("inf"))
        for _ in range(ROUNDS):
            for name, fn in costs.items():
                best[name] = min(best[name], timeit.timeit(fn, number=CALLS) / CALLS * 1e6)
        print(f"{ranks} ranks, µs per call: " + ", ".join(f"{name} {t:.2f}" for name, t in best.items()))


if __name__ == "__main__":
    main()
