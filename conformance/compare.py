"""The comparator: a backend's buffers against the reference, check by check.

Each problem found is filed under the check that found it, so that a report
(and the mutant table) can say which check caught what.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refir.ir.types import Bindings, TensorType, dense_strides, has_layout, is_float, local_shape
from refir.running.assemble_outputs import assemble as assemble_blocks

CHECKS: dict[str, str] = {
    "error": "the backend returns a buffer for every device, without raising",
    "values": "results agree with the global reference by the numerics model",
    "strides": "every buffer returned has its type's local shape and is dense in its layout",
    "fresh": "every buffer returned is the backend's own: it shares no memory with an input or another buffer returned",
    "replicas": "devices that hold the same block hold the same values",
    "isolation": "run segment by segment, each from its own inputs only, the program gives the same results",
    "inputs": "the caller's input arrays are left unchanged",
    "expect": "the program's # expect: lines hold",
}
SHOWN = 3  # mismatching elements quoted per problem


@dataclass(frozen=True)
class Problem:
    check: str  # a key of CHECKS
    message: str

    def __str__(self) -> str:
        return f"{self.check}: {self.message}"


def bad_elements(got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Where `got` breaks the numerics model (see conformance/bounds.py)."""
    free = ~np.isfinite(bound)
    if got.dtype == want.dtype == np.bool_:  # by their bytes: a bool of byte 0xA5 (the sentinel) is no True
        return ~free & (got.view(np.uint8) != want.view(np.uint8))
    if not is_float(want.dtype):
        return ~free & (got != want)
    g, w = got.astype(np.float64), want.astype(np.float64)
    special = ~np.isfinite(w)
    same_special = (np.isnan(g) & np.isnan(w)) | (g == w)
    with np.errstate(invalid="ignore"):
        close = np.isfinite(g) & (np.abs(g - w) <= bound)
    return ~free & ~np.where(special, same_special, close)


def value_problems(name: str, got: np.ndarray, want: np.ndarray, bound: np.ndarray,
                   check: str = "values", against: str = "global") -> list[Problem]:
    if got.dtype != want.dtype or got.shape != want.shape:
        return [Problem(check, f"{name} is {got.dtype}{list(got.shape)}, {against} gives "
                               f"{want.dtype}{list(want.shape)}")]
    bad = bad_elements(got, want, bound)
    if not bad.any():
        return []
    where = [tuple(int(i) for i in ix) for ix in np.argwhere(bad)[:SHOWN]]
    quoted = ", ".join(f"{name}{list(ix)} = {_quoted(got, ix)} vs {want[ix]!r}"
                       + (f" (bound {bound[ix]:.3g})" if bound[ix] else "") for ix in where)
    return [Problem(check, f"{int(bad.sum())} of {bad.size} elements of {name} differ from {against}: {quoted}")]


def _quoted(x: np.ndarray, ix: tuple[int, ...]) -> str:
    """An element as a message shows it: a bool of a byte other than 0 or 1 (the sentinel) by its byte."""
    if x.dtype == np.bool_ and (byte := int(x.view(np.uint8)[ix])) > 1:
        return f"byte 0x{byte:02x} (no bool: never written)"
    return repr(x[ix])


def layout_problems(name: str, t: TensorType, buffers: dict[int, np.ndarray],
                    bindings: Bindings) -> list[Problem]:
    """Each device's buffer of `name` has its own block's shape (short and empty
    blocks included, shard_c1) and is dense in its layout; an empty block too has
    the strides its extents give (refir.ir.types.dense_strides)."""
    out = []
    for d, buf in sorted(buffers.items()):
        want = local_shape(t, bindings, d)
        if not isinstance(buf, np.ndarray):
            out.append(Problem("error", f"device {d} returned {name} as a {type(buf).__name__}, not a numpy array"))
        elif tuple(buf.shape) != want:
            out.append(Problem("strides", f"device {d} holds {name} with local shape {list(buf.shape)}, "
                                          f"its type {t} gives {list(want)}"))
        elif not has_layout(buf, t.order) or (buf.size == 0 and not _empty_dense(buf, t.order)):
            out.append(Problem("strides", f"device {d} holds {name} with byte strides {list(buf.strides)}, "
                                          f"not dense in order {list(t.order)} as {t} says"))
    return out


def sharing_problems(returned: dict[str, dict[int, np.ndarray]], given: dict[str, list[np.ndarray]]) -> list[Problem]:
    """Every buffer returned is the backend's own: it shares no memory with any
    array the backend was `given` (by name), nor with another buffer returned."""
    out = []
    seen: list[tuple[str, int, np.ndarray]] = []
    for name, buffers in returned.items():
        for d, buf in sorted(buffers.items()):
            if not isinstance(buf, np.ndarray):
                continue  # layout_problems reports it
            inputs = [Problem("fresh", f"device {d} returns {name} in the memory of input {p!r}")
                      for p, arrays in given.items() if any(np.shares_memory(buf, a) for a in arrays)]
            out += inputs or [Problem("fresh", f"device {d} returns {name} in the memory of {other} on device {e}")
                              for other, e, b in seen if np.shares_memory(buf, b)]
            seen.append((name, d, buf))
    return out


def _empty_dense(buf: np.ndarray, order: tuple[int, ...]) -> bool:
    want = dense_strides(buf.shape, order, buf.itemsize)
    return all(s == w or n == 1 for s, w, n in zip(buf.strides, want, buf.shape))


def assemble(name: str, t: TensorType, buffers: dict[int, np.ndarray],
             bindings: Bindings) -> tuple[np.ndarray | None, list[Problem]]:
    """The global array from every device's block (refir.running.assemble_outputs.assemble);
    replicas must agree by the numerics model. A block of the wrong shape is
    left to layout_problems."""
    got = assemble_blocks(t, buffers, bindings, lambda a, b: not bad_elements(a, b, np.zeros(a.shape)).any())
    problems = [Problem("error", f"the backend returned no buffer of {name} for device {d}") for d in got.missing]
    problems += [Problem("replicas", f"devices {first} and {d} hold different values for the same block of {name}")
                 for first, d in got.disagree]
    return got.whole, problems
