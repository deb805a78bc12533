"""What a run of a program works out again and again, kept between runs.

`refir.run` in a loop hands the same program (and its verified, lowered forms,
kept by identity) inputs of the same shapes every time. What follows from the
program and the inputs' shapes, dtypes and strides alone (the bindings, which
block of each input each device takes, that per-device buffers fit their
types) is kept here, keyed by the owning object's identity and such a
signature; never anything that depends on an array's values, which the caller
may change between runs. Each entry holds its owner, so that an id is never
reused for another object while the entry lives, and is checked against it.
`by_identity` does the same for a pure function of frozen values, keyed by the
identities of all its arguments.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from functools import wraps
from typing import Any, Generic, TypeVar

import numpy as np

V = TypeVar("V")


class Memo(Generic[V]):
    """At most `size` values, each for one (owner, signature), the last used kept."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.entries: OrderedDict[tuple[int, Hashable], tuple[object, V]] = OrderedDict()
        self.hits = 0

    def get(self, owner: object, signature: Hashable, make: Callable[[], V]) -> V:
        """The value kept for (owner, signature), else `make()`'s, kept (an
        exception from `make` keeps nothing)."""
        key = (id(owner), signature)
        got = self.entries.get(key)
        if got is not None and got[0] is owner:
            try:
                self.entries.move_to_end(key)
            except KeyError:  # another thread dropped it meanwhile: the value is still good
                pass
            self.hits += 1
            return got[1]
        value = make()
        self.put(owner, signature, value)
        return value

    def has(self, owner: object, signature: Hashable) -> bool:
        """Whether a value is kept for (owner, signature) (counted as a hit if so)."""
        got = self.entries.get((id(owner), signature))
        if got is not None and got[0] is owner:
            self.hits += 1
            return True
        return False

    def put(self, owner: object, signature: Hashable, value: V) -> None:
        self.entries[(id(owner), signature)] = (owner, value)
        while len(self.entries) > self.size:
            self.entries.popitem(last=False)

    def clear(self) -> None:
        self.entries.clear()
        self.hits = 0


def shape_signature(arrays: dict[Any, Any]) -> tuple | None:
    """The names, dtypes, shapes and strides of numpy arrays (None if any value
    is not one: such inputs are checked afresh, and refused, every time)."""
    out = []
    for name, x in arrays.items():
        if type(x) is not np.ndarray:
            return None
        out.append((name, x.dtype, x.shape, x.strides))
    return tuple(out)


F = TypeVar("F", bound=Callable[..., Any])


def by_identity(fn: F) -> F:
    """`fn` remembered by the identity of its arguments, for pure functions of
    frozen values asked again and again with the very same objects (a run's ops
    and types, at every communication): hashing a frozen type walks all its
    fields, several µs a call, where comparing identities takes nanoseconds. The
    arguments are kept with the value, so their ids cannot be reused meanwhile."""
    memo: dict[tuple[int, ...], tuple[tuple[Any, ...], Any]] = {}

    @wraps(fn)
    def remembered(*args: Any) -> Any:
        key = tuple(map(id, args))
        hit = memo.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], args)):
            return hit[1]
        value = fn(*args)
        if len(memo) >= 1024:  # a long-lived process runs many programs
            memo.clear()
        memo[key] = (args, value)
        return value

    return remembered  # type: ignore[return-value]
