"""Tables keyed by op class, filled by a decorator: how each layer (type
inference, numpy semantics, communications, GPU kernels, error bounds)
attaches its rule for an op."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)


def registrar(table: dict[type, F]) -> Callable[..., Callable[[F], F]]:
    """`rule = registrar(TABLE)`; then `@rule(ops.Permute)` puts a function in TABLE."""

    def register(*classes: type) -> Callable[[F], F]:
        def add(fn: F) -> F:
            for cls in classes:
                table[cls] = fn
            return fn

        return add

    return register
