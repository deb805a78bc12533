"""A mutant of partial values (docs/spec.md §3.3): a partial consumed as if it were
reduced. The resharding of a `set` whose operand is a partial value skips the
reduction: each device takes its own term for the value (and keeps its block of
it where the target is sharded). The suite must kill it by the values.

Importing this module registers it in conformance.mutants.MUTANTS.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from unittest import mock

from conformance.mutants.registry import mutant
from refir.ir import ops
from refir.lowering import lower as lowering


@mutant("a set from a partial value skips its reduction: each device's term is taken as the value",
        by="values", needs=(ops.Allreduce, ops.ReduceScatter))
def partial_as_reduced() -> Iterator[None]:
    reshard = lowering._Lowerer.reshard

    def wrong(self: lowering._Lowerer, src: str, s: object, out: str, d: object, e: object) -> None:
        if isinstance(e.op, ops.Set) and s.partial:  # type: ignore[attr-defined]
            s = replace(s, partial=(), partial_kind="")  # type: ignore[type-var]
        reshard(self, src, s, out, d, e)  # type: ignore[arg-type]

    with mock.patch.object(lowering._Lowerer, "reshard", wrong):
        yield
