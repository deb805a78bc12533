"""`# expect: name = expression`: numpy expressions over the global inputs.

A result agrees with its expect line element by element within the numerics
model's bound against exact arithmetic (docs/spec.md §10, `num_x1`..`num_x9`):
how far a conforming backend may be from the reference, plus how far the
reference is from exact, plus how far the expression, in the precision it
computed in, is. An expression that computes in the result's own bf16 or f16
states the program's roundings: it must match exactly wherever every backend
gives the same bits (`num_x9`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from refir.checks.expect_eval import evaluate_rounded
from refir.checks.verifier import Checked
from refir.errors import InputError, MismatchError
from refir.ir.program import Program
from refir.ir.types import DTYPES, as_dtype, finfo, is_float


class _Slack:
    """The program's bounds, computed once for all its expect lines (interp owns the rules)."""

    def __init__(self, checked: Checked, inputs: dict[str, np.ndarray], bindings: dict[str, int]) -> None:
        from interp.error_bounds import every_value, propagate
        from interp.numerics import CONFORM, REFERENCE

        self.checked, self.bindings = checked, bindings
        self.values = every_value(checked, inputs, bindings)
        self.conform = propagate(checked, self.values, bindings, CONFORM)
        self.reference = propagate(checked, self.values, bindings, REFERENCE)
        self.expressions: dict[np.dtype, dict[str, np.ndarray]] = {}

    def bound(self, name: str, got: np.dtype, precision: np.dtype | None) -> np.ndarray:
        from interp.error_bounds import propagate
        from interp.numerics import expression

        with np.errstate(all="ignore"):
            total = self.conform[name] + self.reference[name]
            if precision is not None:
                if precision not in self.expressions:
                    self.expressions[precision] = propagate(self.checked, self.values, self.bindings,
                                                            expression(precision), self.reference)
                total = total + self.expressions[precision][name]
        if precision is not None and precision == got and is_float(got) and finfo(got).nmant < 23:
            total = np.where(self.conform[name] == 0, 0.0, total)  # num_x9: bf16 or f16 rounded as the program does
        return total


def check_expects(program: Program, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray],
                  symbols: dict[str, int] | None = None, checked: Checked | None = None) -> list[str]:
    """The expect lines the outputs fail, as one-line messages (empty when all
    hold). Each line is evaluated by refir.checks.expect_eval's restricted evaluator, never
    by `eval`; `symbols` are the run's bindings (else read off the inputs)."""
    from refir.running.bindings import bind_inputs
    from refir.running.prepare import verified

    failures = []
    scope = {**(symbols or {}), **{k: np.asarray(v) for k, v in inputs.items()}}
    slack: _Slack | None = None
    for e in program.expects:
        if e.name not in outputs:
            failures.append(f"{e.loc}: expect names {e.name!r}, which the function does not return")
            continue
        try:
            value, precision = evaluate_rounded(e.expr, scope, e.loc)
            want = np.asarray(value)
        except InputError:
            raise
        except Exception as exc:  # numpy's own complaint about whitelisted operations
            raise MismatchError(f"{e.loc}: cannot evaluate expect line: {type(exc).__name__}: {exc}") from exc
        got = np.asarray(outputs[e.name])
        if want.dtype.kind == "V" and want.dtype.itemsize == 2 and got.dtype == DTYPES["bf16"]:
            want = want.view(got.dtype)  # np.savez keeps a bf16 as raw 2-byte records (|V2): bit for bit
        if got.shape != want.shape:
            failures.append(f"{e.loc}: {e.name} != {e.expr} (shape {got.shape} vs {want.shape})")
            continue
        if slack is None:
            checked = checked or verified(program, None)
            slack = _Slack(checked, inputs, {**bind_inputs(checked, inputs), **(symbols or {})})
        bound = slack.bound(e.name, got.dtype, precision)
        bad = outside(got, want, bound)
        if bad.any():
            failures.append(f"{e.loc}: {e.name} != {e.expr} ({_worst(e.name, got, want, bound, bad)})")
    return failures


def outside(got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Where `got` is further from `want` than `bound` allows: a finite bound
    applies to finite values, a non-finite want must be matched exactly (NaN by
    NaN), an infinite bound leaves the element free."""
    free = ~np.isfinite(bound)
    if not is_float(got.dtype):
        with np.errstate(all="ignore"):
            return ~free & (got != as_dtype(want, got.dtype))
    with np.errstate(all="ignore"):
        g, w = got.astype(np.float64), want.astype(np.float64)
        special = ~np.isfinite(w)
        same_special = (np.isnan(g) & np.isnan(w)) | (g == w)
        close = np.isfinite(g) & (np.abs(g - w) <= bound)
    return ~free & ~np.where(special, same_special, close)


def _worst(name: str, got: np.ndarray, want: np.ndarray, bound: np.ndarray, bad: np.ndarray) -> str:
    """How many elements fail, and the one furthest past its bound."""
    with np.errstate(all="ignore"):
        excess = np.where(bad, np.abs(got.astype(np.float64) - want.astype(np.float64)) - bound, -np.inf)
    excess = np.where(np.isnan(excess) & bad, np.inf, excess)
    ix = np.unravel_index(int(np.argmax(excess)), got.shape) if got.ndim else ()
    at = f"{name}[{', '.join(str(int(i)) for i in ix)}]" if got.ndim else name
    return (f"{int(bad.sum())} of {bad.size} elements outside the bound; worst {at} = {_num(got[ix])} "
            f"vs {_num(want[ix])}, bound {float(bound[ix]):.3g}")


def _num(x: Any) -> str:
    return repr(float(x)) if np.ndim(x) == 0 and np.asarray(x).dtype.kind not in "biu" else repr(x.item())
