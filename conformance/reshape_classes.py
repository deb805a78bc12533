"""reshape's error classes (conformance/classes.py): the wrong implementations of a
C-order reshape that only some data tells apart, added to CLASSES by classes.py."""

from __future__ import annotations

import numpy as np

from conformance.error_class import ErrorClass, Site
from interp.impls import reshape_extents
from refir.ir import ops


def _shape(s: Site) -> tuple[int, ...]:
    """The result's extents: a reshape site's scalars are its symbols' values (integers, in no tensor dtype)."""
    return reshape_extents(s.op, [int(round(float(v))) for v in s.args[1:]])  # type: ignore[arg-type]


def _fortran(s: Site) -> np.ndarray | None:
    return np.reshape(s.args[0], _shape(s), order="F") if isinstance(s.op, ops.Reshape) else None


def _memory_order(s: Site) -> np.ndarray | None:
    """The elements taken in the order a transposed (column-major) buffer holds them."""
    if not isinstance(s.op, ops.Reshape):
        return None
    return np.reshape(np.ascontiguousarray(s.args[0].T).reshape(-1), _shape(s))


RESHAPE_CLASSES = (
    ErrorClass("C order", "the elements taken in Fortran order (numpy's order='F')",
               lambda row, d: row == "reshape", _fortran),
    ErrorClass("logical order", "the elements taken in a column-major buffer's memory order, not logical "
               "C order (a view of a buffer no view can reshape)", lambda row, d: row == "reshape", _memory_order),
)
