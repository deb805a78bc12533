"""`conform --coverage`'s reshape rows (docs/spec.md §5.10): every reshape of the
run's programs, by what it does to its groups (a split, a merge, or only axes of
extent 1 added or dropped) and by its extents: static, symbolic, with an extent expression (§3), a -1
(and whether the verifier inferred an expression for it), and a sharded group."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rich.table import Table

from conformance.cases import Case
from refir.checks.rules_reshape import INFERRED, extents_of, groups
from refir.ir import ops
from refir.ir.extents import ExtentExpr

ROWS = ("split", "merge", "axes kept, extent-1 added or dropped")
COLUMNS = ("static", "symbolic", "expression", "-1", "-1 is an expression", "sharded group")


def cells_of(case: Case) -> set[tuple[str, str]]:
    """The (row, column) cells the case's reshapes reach, as the program wrote them."""
    checked = case.checked
    written = {e.out: e.op for f in checked.program.funcs if f.name == checked.func.name for e in f.eqns}
    out: set[tuple[str, str]] = set()
    for e in checked.func.eqns:
        if not isinstance(e.op, ops.Reshape):
            continue
        x = checked.types[e.tensor_args()[0]]
        extents = (*extents_of(x), *e.op.shape)
        gs = groups(x, e.op.shape)
        row = ("split" if any(len(g.src) == 1 and len(g.dst) > 1 for g in gs) else
               "merge" if any(len(g.src) > 1 and len(g.dst) == 1 for g in gs) else ROWS[2])
        inferred = INFERRED in getattr(written.get(e.out), "shape", ())
        at = written[e.out].shape.index(INFERRED) if inferred else -1  # type: ignore[union-attr]
        on = {"static": all(isinstance(v, int) for v in extents),
              "symbolic": any(isinstance(v, str) for v in extents),
              "expression": any(isinstance(v, ExtentExpr) for v in extents),
              "-1": inferred, "-1 is an expression": inferred and isinstance(e.op.shape[at], ExtentExpr),
              "sharded group": any(g.src and x.axes[g.src[0]].shard for g in gs)}
        out |= {(row, c) for c, hit in on.items() if hit}
    return out


def table(cells: set[tuple[str, str]], make: Callable[[str, Iterable[str]], Table]) -> Table:
    t = make("reshape (spec §5.10): what it does x its extents", COLUMNS)
    for row in ROWS:
        t.add_row(row, *("✓" if (row, c) in cells else "✗" for c in COLUMNS))
    return t


def missing(cells: set[tuple[str, str]], why: str) -> list[str]:
    return [f"reshape, {row}, {c}: {why}" for row in ROWS for c in COLUMNS if (row, c) not in cells]
