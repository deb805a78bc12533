"""How far a backend's value may stray from the global reference.

The rules live in interp/error_bounds.py (one per op, shared with the expect
lines' bounds against exact arithmetic); this is their use by the suite: the
global value of every value of a case's function, and its CONFORM bound
(docs/spec.md §10, `num_c1`..`num_c6`).
"""

from __future__ import annotations

import numpy as np

from interp.error_bounds import every_value, propagate
from interp.numerics import CONFORM
from refir.checks.verifier import Checked
from refir.ir.types import Bindings


def reference(checked: Checked, inputs: dict[str, np.ndarray],
              bindings: Bindings) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The global value and the error bound of every value of the function."""
    values = every_value(checked, inputs, bindings)
    return values, propagate(checked, values, bindings, CONFORM)
