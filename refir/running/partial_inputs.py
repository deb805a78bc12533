"""What each device holds of a partial input (docs/spec.md §3.3): terms that reduce
to the global input exactly, in any order of the fold.

An input `x: T partial[K@A]` is handed to a run as its global value X, like every
input; device k of each team along A (k its place in the team) holds term k:

- sum: integers, pseudo-random terms (the same on every rank) and term 0 the
  rest, wrapping; floats, slices of X's significand: term k keeps the bits
  between two cuts, so every term has X's sign and every partial sum is X
  truncated, exact. A non-finite X stays with term 0, the others 0; a zero X
  (either sign) is every term.
- avg (floats): the sum's terms of n X (n the team's size, a power of two), so
  that their sum divided by n is X; an X whose n X overflows has no such terms
  (InputError).
- prod: term 0 is X times the other terms, each 1 or -1 (1 for unsigned), so
  the product of the terms is X (the signs square away).
- max (min): each element's owner (its flat index mod n) holds X, the others
  the minimum (maximum) of X and a small random value: never above (below) X
  (a float zero is every term: the sign of zero would depend on the order).
"""

from __future__ import annotations

import zlib

import numpy as np

from refir.errors import InputError
from refir.ir.types import TensorType, finfo, is_float


def partial_term(t: TensorType, x: np.ndarray, k: int, n: int, name: str = "") -> np.ndarray:
    """Term k of n of the partial input `x` (global shape) of type `t`."""
    seed = zlib.crc32(name.encode())  # the same on every rank, and another for each input
    rng = np.random.default_rng([seed, k, n])
    with np.errstate(all="ignore"):
        if t.partial_kind in ("sum", "avg"):
            if t.partial_kind == "avg":
                y = (x * x.dtype.type(n)).astype(x.dtype)
                if np.any(np.isfinite(x) & ~np.isfinite(y)):
                    raise InputError(f"{name}: an avg-partial input of {n} terms holds a value whose {n}-fold "
                                     "overflows, which no terms sum to")
                x = y
            return _float_slice(x, k, n) if is_float(x.dtype) else _int_term(x, k, n, seed)
        if t.partial_kind == "prod":
            signs = [_signs(x, j, n, seed) for j in range(1, n)]
            if k:
                return signs[k - 1]
            out = x.copy()
            for s in signs:
                out = (out * s).astype(x.dtype)
            return out
        owner = (np.arange(x.size).reshape(x.shape) % n) == k
        r = rng.integers(0, 2, x.shape) if x.dtype.kind == "b" else rng.integers(-4, 5, x.shape)
        r = r.astype(x.dtype) if x.dtype.kind != "u" else np.abs(r).astype(x.dtype)
        other = np.minimum(x, r) if t.partial_kind == "max" else np.maximum(x, r)
        if is_float(x.dtype):  # a zero is every term: max(-0.0, 0.0) would depend on the order
            other = np.where(x == 0, x, other)
        return np.where(owner, x, other).astype(x.dtype)


def _int_term(x: np.ndarray, k: int, n: int, seed: int) -> np.ndarray:
    def part(j: int) -> np.ndarray:
        r = np.random.default_rng([seed, j, n]).integers(-8, 9, x.shape)
        return (np.abs(r) if x.dtype.kind == "u" else r).astype(x.dtype)

    if k:
        return part(k)
    out = x.copy()
    for j in range(1, n):
        out = (out - part(j)).astype(x.dtype)  # wraps: the terms sum back to x modulo 2^bits
    return out


def _signs(x: np.ndarray, j: int, n: int, seed: int) -> np.ndarray:
    if x.dtype.kind == "u":
        return np.ones(x.shape, x.dtype)
    return np.where(np.random.default_rng([seed, j, n]).integers(0, 2, x.shape) == 1, 1, -1).astype(x.dtype)


def _float_slice(x: np.ndarray, k: int, n: int) -> np.ndarray:
    """X truncated after cut k+1 minus X truncated after cut k (cuts spread over the
    significand; cut n keeps every bit)."""
    p = finfo(x.dtype).nmant + 1  # significant bits
    cut = [0] + [max(1, (j * p) // n) for j in range(1, n)] + [p]

    def truncated(j: int) -> np.ndarray:
        if j == 0:
            return np.zeros_like(x)
        if cut[j] >= p:
            return x
        word = np.dtype(f"u{x.dtype.itemsize}")
        mask = word.type(~((1 << (p - cut[j])) - 1) & ((1 << (8 * x.dtype.itemsize)) - 1))
        return (x.view(word) & mask).view(x.dtype)

    term = (truncated(k + 1) - truncated(k)).astype(x.dtype)
    special = ~np.isfinite(x)
    zero = x == 0
    if k:
        term = np.where(special, np.zeros_like(x), term)
    else:
        term = np.where(special, x, term)
    return np.where(zero, x, term).astype(x.dtype)
