"""Mutants of interleaved sharding (spec §3.4): a split factor off by one,
killed on the `interleaved_*` corpus programs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from unittest import mock

import interp.collectives
import interp.spmd
import refir.lowering.run_exchange
from conformance.mutants.registry import mutant
from refir.ir import blocks
from refir.ir.blocks import cut_runs
from refir.ir.types import Axis, Mesh, Runs, runs_length


@mutant("a keep_block, an all_to_all or a reduce_scatter of runs cuts an interleaved axis with its split "
        "factor plus one (DIDx:2 cut as DIDx:3)", by="values")
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

    def grown_cut(length: int, parts: int, split: int, k: int) -> Runs:  # the direct rule's runs (spec §6)
        right = cut_runs(length, parts, split, k)
        wrong = cut_runs(length, parts, split + 1, k) if split > 1 else right
        return wrong if runs_length(wrong) == runs_length(right) else right  # as above: never a hang

    def held_runs(length: int, parts: int, split: int | None, k: int) -> Runs:
        return blocks.held_runs(length, parts, split, k) if split is None else grown_cut(length, parts, split, k)

    with (mock.patch.object(interp.spmd, "inner_runs", inner_runs),
          mock.patch.object(interp.collectives, "cut_runs", grown_cut),
          mock.patch.object(refir.lowering.run_exchange, "held_runs", held_runs)):
        yield
