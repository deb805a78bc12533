"""`# expect: name = expression`: numpy expressions over the global inputs."""

from __future__ import annotations

import numpy as np

from refir.errors import InputError, MismatchError
from refir.expr import evaluate
from refir.program import Program
from refir.types import as_dtype, finfo, is_float


def tolerance(dtype: np.dtype, terms: int = 1) -> float:
    """Relative slack for a float result built from `terms` rounded terms."""
    return 0.0 if not is_float(dtype) else 4 * max(terms, 1) * float(finfo(dtype).eps)


def agrees(got: np.ndarray, want: np.ndarray, rtol: float) -> bool:
    with np.errstate(all="ignore"):  # inf - inf and the like are judged below, not warned about
        return _agrees(got, want, rtol)


def _agrees(got: np.ndarray, want: np.ndarray, rtol: float) -> bool:
    if got.shape != want.shape:
        return False
    if not is_float(got.dtype) or rtol == 0:
        return np.array_equal(got, as_dtype(want, got.dtype), equal_nan=is_float(got.dtype))
    want = want.astype(np.float64)
    g = got.astype(np.float64)
    scale = max(float(np.nanmax(np.abs(want), initial=0.0)), 1.0)
    same_nan = np.isnan(g) == np.isnan(want)
    close = np.abs(g - want) <= rtol * scale + rtol * np.abs(want)
    return bool(np.all(same_nan & (close | np.isnan(want)) | (g == want)))


def check_expects(program: Program, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray],
                  terms: int = 64, symbols: dict[str, int] | None = None) -> list[str]:
    """The expect lines the outputs fail, as messages (empty when all hold). Each
    line is evaluated by refir.expr's restricted evaluator, never by `eval`."""
    failures = []
    scope = {**(symbols or {}), **{k: np.asarray(v) for k, v in inputs.items()}}
    for e in program.expects:
        if e.name not in outputs:
            failures.append(f"{e.loc}: expect names {e.name!r}, which the function does not return")
            continue
        try:
            want = np.asarray(evaluate(e.expr, scope, e.loc))
        except InputError:
            raise
        except Exception as exc:  # numpy's own complaint about whitelisted operations
            raise MismatchError(f"{e.loc}: cannot evaluate expect line: {type(exc).__name__}: {exc}") from exc
        got = outputs[e.name]
        if not agrees(got, want, tolerance(got.dtype, terms)):
            with np.errstate(all="ignore"):
                bad = "shape " + str(got.shape) + " vs " + str(want.shape) if got.shape != want.shape else (
                    f"max |diff| {np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64)))}")
            failures.append(f"{e.loc}: {e.name} != {e.expr} ({bad})")
    return failures
