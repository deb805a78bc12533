"""What an error class is (conformance/classes.py holds them): a wrong implementation
of an op, where it applies, and its value at one equation of a case (a Site)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from refir.ir.types import TensorType


@dataclass(frozen=True)
class Site:
    """One equation of a case: its op, operand values (scalars in the
    tensors' dtype), resolved operand types (None for a scalar), result dtype."""

    op: object
    args: list[np.ndarray]
    types: list[TensorType | None]
    dtype: np.dtype


@dataclass(frozen=True)
class ErrorClass:
    name: str
    wrong: str  # the implementation its data tells apart from the spec's
    applies: Callable[[str, str], bool]  # (coverage row, operand dtype)
    value: Callable[[Site], np.ndarray | None]  # the wrong implementation's result; None: not at this site
