"""The conformance bound of partial values (docs/spec.md §3.3, §10 num_c8).

The global reference holds a partial value itself; spmd, MPI and gpu hold its
terms, compute on each device's term and fold the terms when a `set` reduces
them. Against the reference, a float sum (avg) then differs by the terms'
roundings, which the value alone cannot bound (terms may cancel). So the
CONFORM model carries, for every float sum, avg or prod partial, `M`: a bound
on the sum of the terms' magnitudes (an input's terms are slices of its value
of one sign, refir.running.partial_inputs, so `M = |X|`, n|X| for avg), and
whether every term is an integer. An op on terms adds one rounding per term,
`eps (M + |r|)` with the reference's own; a reducing `set` of a team of n adds
`n eps M` (divided by n for avg). Where every term is an integer and `M` is
within the dtype's exact integers, nothing rounds: 0. max and min fold
exactly; a float prod adds `n eps |r|` per op and per fold. Where M passes the
dtype's largest finite value a term may overflow though the value fits: the
bound of a finite value is infinite there (num_c6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from math import prod

import numpy as np

from interp.numerics import eps, exact_limit, exactly_integer, ulp
from refir.checks.verifier import Checked
from refir.ir import ops
from refir.ir.program import Eqn, Sym, Var
from refir.ir.types import Bindings, TensorType, finfo, is_float

Terms = tuple[np.ndarray, np.ndarray]  # (M, every term an integer)


@dataclass
class PartialTerms:
    """M and integrality of every float sum/avg/prod partial value so far."""

    checked: Checked
    values: dict[str, np.ndarray]
    bindings: Bindings
    terms: dict[str, Terms] = field(default_factory=dict)

    def start(self) -> None:
        for p in self.checked.func.params:
            t = p.type
            if _tracked(t):
                x = np.asarray(self.values[p.name], np.float64)
                n = _team(t, t.partial) if t.partial_kind == "avg" else 1
                self.terms[p.name] = (np.where(np.isfinite(x), n * np.abs(x), np.inf), exactly_integer(x, 0.0))

    def bound(self, e: Eqn, b: np.ndarray, bounds: dict[str, np.ndarray]) -> np.ndarray:
        """The bound of `e`'s result given the reference rule's `b`: more where it reads
        or reduces a tracked partial."""
        t = self.checked.types[e.out]
        src = self.checked.types[e.args[0].name] if e.args and isinstance(e.args[0], Var) else None
        r = np.asarray(self.values[e.out], np.float64)
        if isinstance(e.op, ops.Set) and src is not None and _tracked(src):
            return self._set(e, src, t, b, r)
        if isinstance(e.op, ops.Set) and src is not None and _tracked(t):  # replicated -> partial: x and identities
            name = e.args[0].name  # type: ignore[union-attr]
            x = np.asarray(self.values[name], np.float64)
            self.terms[e.out] = (np.where(np.isfinite(x), np.abs(x), np.inf), exactly_integer(x, bounds[name]))
            return b
        if not _tracked(t):
            return b
        got = self._op(e, t, b, r, bounds)
        # A term (or a partial sum of terms) may overflow where M passes the dtype's range, though
        # the value fits (an f16 avg of 4 terms of 4X, times 2.0, at X = -16375): unconstrained
        # (num_c6). A value that does not fit is matched exactly as before.
        over = (self.terms[e.out][0] > float(finfo(t.np_dtype).max)) & np.isfinite(r)
        return np.where(over, np.inf, got)

    def _op(self, e: Eqn, t: TensorType, b: np.ndarray, r: np.ndarray, bounds: dict[str, np.ndarray]) -> np.ndarray:
        held = [self.terms[a.name] for a in e.args if isinstance(a, Var) and a.name in self.terms]
        others = [a for a in e.args if not (isinstance(a, Var) and a.name in self.terms)]
        if not held:  # a reduction or matmul declared partial: its terms are local results
            self.terms[e.out] = self._local_results(e, r, bounds)
            return b
        (m0, i0) = held[0]
        if isinstance(e.op, ops.Matmul):
            return self._matmul(e, t, b, r, bounds, held[0])
        if isinstance(e.op, ops.Reduction):  # each device reduces its term: n terms each
            dims = tuple(e.op.dims)
            m, ints = np.sum(m0, axis=dims), np.all(i0, axis=dims)
            if t.partial_kind == "prod":  # a prod's M is its value's magnitude (term 0 holds it, the rest signs)
                m = np.abs(r)
            self.terms[e.out] = (m, ints)
            n = int(np.prod([np.shape(m0)[d] for d in dims]))
            extra = (n + 1) * eps(t.np_dtype) * (m + np.abs(r)) + ulp(np.zeros(r.shape), t.np_dtype)
            if t.partial_kind == "prod":
                extra = (n + 1) * _team(t, t.partial) * eps(t.np_dtype) * np.abs(r)
            return b + np.where(ints & (m <= exact_limit(t.np_dtype)), 0.0, extra)
        ints = reduce(np.logical_and, [i for _, i in held] + [self._integral(a, bounds) for a in others])
        match e.op:
            case ops.Permute() | ops.Unsqueeze():
                moved = np.transpose if isinstance(e.op, ops.Permute) else np.expand_dims
                arg = e.op.perm if isinstance(e.op, ops.Permute) else e.op.dims
                self.terms[e.out] = (moved(m0, arg), moved(i0, arg))
                return b
            case ops.Binary(name="add" | "sub"):
                m = m0 + held[1][0]
            case ops.Binary(name="mul") if others:
                m = m0 * self._magnitude(others[0], bounds)
            case ops.Binary(name="div"):
                low = self._magnitude(others[0], bounds, low=True)
                m, ints = np.where(low > 0, m0 / np.where(low > 0, low, 1.0), np.inf), np.zeros((), bool)
            case _:  # neg; a prod's mul of two prods (a prod's M is its value's magnitude)
                m = np.abs(r) if t.partial_kind == "prod" else m0
        m = np.broadcast_to(m, r.shape)
        ints = np.broadcast_to(ints, r.shape)
        self.terms[e.out] = (m, ints)
        dtype = t.np_dtype
        if t.partial_kind == "prod":
            extra = _team(t, t.partial) * eps(dtype) * np.abs(r)
        else:
            extra = eps(dtype) * (m + np.abs(r)) + ulp(np.zeros(r.shape), dtype)
        return b + np.where(ints & (m <= exact_limit(dtype)), 0.0, extra)

    def _matmul(self, e: Eqn, t: TensorType, b: np.ndarray, r: np.ndarray, bounds: dict[str, np.ndarray],
                held: Terms) -> np.ndarray:
        """A partial's terms times an operand that is not partial: M is the matmul of the
        magnitudes; every product and sum of K terms rounds (on integers within the exact
        range, nothing does)."""
        ops_ = [held if isinstance(a, Var) and a.name in self.terms else
                (self._magnitude(a, bounds), self._integral(a, bounds)) for a in e.args]
        m = np.matmul(*(np.asarray(x, np.float64) for x, _ in ops_))
        ints = np.broadcast_to(np.all(ops_[0][1]) & np.all(ops_[1][1]), r.shape)
        m = np.broadcast_to(np.where(np.isnan(m), np.inf, m), r.shape)
        self.terms[e.out] = (m, ints)
        k = np.shape(ops_[0][0])[-1]
        extra = (k + 1) * eps(t.np_dtype) * m + ulp(np.zeros(r.shape), t.np_dtype)
        return b + np.where(ints & (m <= exact_limit(t.np_dtype)), 0.0, extra)

    def _local_results(self, e: Eqn, r: np.ndarray, bounds: dict[str, np.ndarray]) -> Terms:
        """A sum over a sharded axis declared partial: its terms are the devices' sums of
        their blocks, so M is the sum of |x| over the reduced axes; unknown otherwise."""
        if isinstance(e.op, ops.Reduction) and e.op.kind == "sum" and isinstance(e.args[0], Var):
            x, bx = np.asarray(self.values[e.args[0].name], np.float64), bounds[e.args[0].name]
            dims = tuple(e.op.dims)
            mag = np.sum(np.where(np.isfinite(x), np.abs(x) + bx, np.inf), axis=dims)
            return mag, np.all(exactly_integer(x, bx), axis=dims)
        return np.full(r.shape, np.inf), np.zeros(r.shape, bool)

    def _value(self, a: object) -> np.ndarray:
        if isinstance(a, Var):
            return np.asarray(self.values[a.name], np.float64)
        return np.float64(self.bindings[a.name] if isinstance(a, Sym) else getattr(a, "value", np.nan))

    def _magnitude(self, a: object, bounds: dict[str, np.ndarray], low: bool = False) -> np.ndarray:
        """The most (low: the least) |exact value| of an operand that is not partial."""
        x = np.abs(self._value(a))
        bx = bounds[a.name] if isinstance(a, Var) else np.zeros(())
        return np.where(np.isfinite(x), x - bx if low else x + bx, np.inf)

    def _integral(self, a: object, bounds: dict[str, np.ndarray]) -> np.ndarray:
        return exactly_integer(self._value(a), bounds[a.name] if isinstance(a, Var) else np.zeros(()))

    def _set(self, e: Eqn, s: TensorType, d: TensorType, b: np.ndarray, r: np.ndarray) -> np.ndarray:
        m, ints = self.terms[e.args[0].name]  # type: ignore[union-attr]
        kept = d.partial if (d.mesh, d.partial_kind) == (s.mesh, s.partial_kind) else ()
        if kept:
            self.terms[e.out] = (m, ints)
        n = _team(s, tuple(k for k in s.partial if k not in kept))
        if n == 1:
            return b
        dtype = s.np_dtype
        if s.partial_kind == "prod":
            extra = n * eps(dtype) * np.abs(r)
        else:
            extra = n * eps(dtype) * m / (n if s.partial_kind == "avg" else 1) + ulp(np.zeros(r.shape), dtype)
        return b + np.where(ints & (m <= exact_limit(dtype)), 0.0, extra)


def _tracked(t: TensorType) -> bool:
    return bool(t.partial) and t.partial_kind in ("sum", "avg", "prod") and is_float(t.np_dtype)


def _team(t: TensorType, axes: tuple[str, ...]) -> int:
    return prod(t.mesh.size(k) for k in axes)
