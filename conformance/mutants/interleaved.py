"""Mutants of interleaved sharding (spec §3.4): a split factor off by one,
killed on the `interleaved_*` corpus programs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from unittest import mock

import interp.spmd
from conformance.mutants.registry import mutant
from refir.ir.types import Axis, Mesh, Runs, runs_length


@mutant("a keep_block cuts an interleaved axis with its split factor plus one (DIDx:2 cut as DIDx:3)",
        by="values")
def split_factor_off_by_one() -> Iterator[None]:
    original = interp.spmd.inner_runs

    def inner_runs(mesh: Mesh, have: Axis, want: Axis, length: int, device: int) -> Runs:
        right = original(mesh, have, want, length, device)
        kept = len(have.dids)  # the mesh axes the keep_block leaves as they are
        grown = replace(want, split=tuple(f + 1 if f > 1 and i >= kept else f for i, f in enumerate(want.split)))
        wrong = original(mesh, have, grown, length, device)
        # Only where the runs are as long: a buffer of another length fails the step on some
        # ranks only, which under MPI is a hang rather than a bug.
        return wrong if runs_length(wrong) == runs_length(right) else right

    with mock.patch.object(interp.spmd, "inner_runs", inner_runs):
        yield
