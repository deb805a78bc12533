"""Error messages that reprint the failing equation with its neighbours."""

from __future__ import annotations

from typing import TYPE_CHECKING

from refir.ir.program import Eqn
from refir.text.printer import format_eqn

if TYPE_CHECKING:  # a type only: the checks import the text layer
    from refir.checks.verifier import Checked


def describe_eqn(checked: Checked, eqn: Eqn, message: str, rank: int | None = None,
                 context: int = 2) -> str:
    eqns = list(checked.func.eqns)
    # A returned parameter's copy has no equation of its own: it stands after the last.
    i = next((k for k, e in enumerate(eqns) if e.out == eqn.out), len(eqns))
    on = f" on rank {rank}" if rank is not None else ""
    what = format_eqn(eqn) if i < len(eqns) else f"return {eqn.out}"
    lines = [f"while running {what}{on} ({eqn.loc}):", f"  {message}"]
    for k in range(max(0, i - context), min(len(eqns), i + context + 1)):
        mark = "->" if k == i else "  "
        lines.append(f"  {mark} {format_eqn(eqns[k], checked.types.get(eqns[k].out))}")
    return "\n".join(lines)
