"""The values of a program being built and the ops called on them: methods of `Value`
(x.relu(), x.sum(dims=[0]), x @ w, x.set(shard=...)) and functions in the style of
jax.numpy (builder.add(a, b), builder.matmul(a, w)). Each forwards to the builder's
`apply`, which checks the op by the verifier's rules and records it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from refir.errors import InputError
from refir.frontends.builder_checks import OWN, builder_extent, located
from refir.ir import ops
from refir.ir.program import Sym
from refir.ir.types import DTYPES, Extent, TensorType, shape_symbols

OWN.add(__file__)  # errors are placed at the caller's line, outside this module


class Applies(Protocol):
    """What a Value needs of its builder (refir.frontends.builder.Builder)."""

    def apply(self, op: ops.Op, args: tuple, **kw: object) -> Value: ...


@dataclass(frozen=True, eq=False)
class Value:
    """A value of the program being built: a parameter or an equation's result."""

    builder: Applies
    name: str
    type: TensorType

    def __str__(self) -> str:
        return f"{self.name}: {self.type}"

    # ---- elementwise ------------------------------------------------------------------

    def __add__(self, other: object) -> Value:
        return self.builder.apply(ops.Binary("add"), (self, other))

    def __radd__(self, other: object) -> Value:
        return self.builder.apply(ops.Binary("add"), (other, self))

    def __sub__(self, other: object) -> Value:
        return self.builder.apply(ops.Binary("sub"), (self, other))

    def __rsub__(self, other: object) -> Value:
        return self.builder.apply(ops.Binary("sub"), (other, self))

    def __mul__(self, other: object) -> Value:
        return self.builder.apply(ops.Binary("mul"), (self, other))

    def __rmul__(self, other: object) -> Value:
        return self.builder.apply(ops.Binary("mul"), (other, self))

    def __truediv__(self, other: object) -> Value:
        return self.builder.apply(ops.Binary("div"), (self, other))

    def __neg__(self) -> Value:
        return self.builder.apply(ops.Unary("neg"), (self,))

    def __matmul__(self, other: Value) -> Value:
        return self.matmul(other)

    @located
    def unary(self, kind: str, **kw: object) -> Value:
        """Any unary op by name: `x.unary("exp")` (one of neg abs exp log sqrt relu)."""
        if kind not in ops.UNARY:
            raise InputError(f"unknown unary op {kind!r} (known: {', '.join(ops.UNARY)})")
        return self.builder.apply(ops.Unary(kind), (self,), **kw)

    def binary(self, kind: str, other: object, **kw: object) -> Value:
        """Any binary op by name, this value first: `x.binary("sub", 1.0)`."""
        return binary(kind, self, other, **kw)

    def maximum(self, other: object, **kw: object) -> Value:
        return self.builder.apply(ops.Binary("maximum"), (self, other), **kw)

    def minimum(self, other: object, **kw: object) -> Value:
        return self.builder.apply(ops.Binary("minimum"), (self, other), **kw)

    def abs(self, **kw: object) -> Value:
        return self.builder.apply(ops.Unary("abs"), (self,), **kw)

    def exp(self, **kw: object) -> Value:
        return self.builder.apply(ops.Unary("exp"), (self,), **kw)

    def log(self, **kw: object) -> Value:
        return self.builder.apply(ops.Unary("log"), (self,), **kw)

    def sqrt(self, **kw: object) -> Value:
        return self.builder.apply(ops.Unary("sqrt"), (self,), **kw)

    def relu(self, **kw: object) -> Value:
        return self.builder.apply(ops.Unary("relu"), (self,), **kw)

    # The mask ops' unary functions and comparisons (spec §5.9): x.tanh(), x.lt(0), ...
    def tanh(self, **kw: object) -> Value:
        return self.builder.apply(ops.Unary("tanh"), (self,), **kw)

    def erf(self, **kw: object) -> Value:
        return self.builder.apply(ops.Unary("erf"), (self,), **kw)

    def sigmoid(self, **kw: object) -> Value:
        return self.builder.apply(ops.Unary("sigmoid"), (self,), **kw)

    def rsqrt(self, **kw: object) -> Value:
        return self.builder.apply(ops.Unary("rsqrt"), (self,), **kw)

    def sin(self, **kw: object) -> Value:
        return self.builder.apply(ops.Unary("sin"), (self,), **kw)

    def cos(self, **kw: object) -> Value:
        return self.builder.apply(ops.Unary("cos"), (self,), **kw)

    def compare(self, kind: str, other: object, **kw: object) -> Value:
        """Any comparison by name, this value first: `x.compare("ge", y)` (a bool Value)."""
        return compare(kind, self, other, **kw)

    def eq(self, other: object, **kw: object) -> Value:
        return self.builder.apply(ops.Compare("eq"), (self, other), **kw)

    def ne(self, other: object, **kw: object) -> Value:
        return self.builder.apply(ops.Compare("ne"), (self, other), **kw)

    def lt(self, other: object, **kw: object) -> Value:
        return self.builder.apply(ops.Compare("lt"), (self, other), **kw)

    def le(self, other: object, **kw: object) -> Value:
        return self.builder.apply(ops.Compare("le"), (self, other), **kw)

    def gt(self, other: object, **kw: object) -> Value:
        return self.builder.apply(ops.Compare("gt"), (self, other), **kw)

    def ge(self, other: object, **kw: object) -> Value:
        return self.builder.apply(ops.Compare("ge"), (self, other), **kw)

    def where(self, x: object, y: object, **kw: object) -> Value:
        """This bool Value as a condition: `k.where(s, -math.inf)` is np.where(k, s, -inf)."""
        return self.builder.apply(ops.Where(), (self, x, y), **kw)

    @located
    def cast(self, dtype: str, **kw: object) -> Value:
        if dtype not in DTYPES:
            raise InputError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
        return self.builder.apply(ops.Cast(dtype), (self,), **kw)

    # ---- shape, reductions, contraction, data movement ----------------------------------

    def permute(self, perm: Sequence[int], **kw: object) -> Value:
        return self.builder.apply(ops.Permute(tuple(perm)), (self,), **kw)

    def unsqueeze(self, dims: Sequence[int], **kw: object) -> Value:
        return self.builder.apply(ops.Unsqueeze(tuple(dims)), (self,), **kw)

    @located
    def reshape(self, shape: Sequence[Extent | Sym], **kw: object) -> Value:
        """numpy's C-order reshape: `x.reshape(["S", 4, 8])`, `x.reshape(["S", 4, "E/4"])`
        (extents: integers, symbol names or b.sym(...), expressions as ExtentExpr or
        their text, and at most one -1, inferred); local where each device's block is
        whole rows (spec §5.10)."""
        extents = tuple(e.name if isinstance(e, Sym) else builder_extent(e) for e in shape)
        syms = tuple(Sym(e) for e in shape_symbols(extents))
        return self.builder.apply(ops.Reshape(extents), (self, *syms), **kw)

    @located
    def reduce(self, kind: str, dims: Sequence[int], **kw: object) -> Value:
        """`kind` is one of sum prod max min band bor bxor. Over a sharded axis the
        devices hold partial results: declare where they land with `shard=`/`mesh=`
        (a reduce_scatter, an allreduce, a reduce onto another mesh) or leave them replicated."""
        if kind not in ops.REDUCTIONS:
            raise InputError(f"unknown reduction {kind!r} (known: {', '.join(ops.REDUCTIONS)})")
        return self.builder.apply(ops.Reduction(kind, tuple(dims)), (self,), **kw)

    def sum(self, dims: Sequence[int], **kw: object) -> Value:
        return self.reduce("sum", dims, **kw)

    def prod(self, dims: Sequence[int], **kw: object) -> Value:
        return self.reduce("prod", dims, **kw)

    def max(self, dims: Sequence[int], **kw: object) -> Value:
        return self.reduce("max", dims, **kw)

    def min(self, dims: Sequence[int], **kw: object) -> Value:
        return self.reduce("min", dims, **kw)

    def matmul(self, other: Value, **kw: object) -> Value:
        """np.matmul: operands of any ranks >= 1, batch axes broadcast."""
        return self.builder.apply(ops.Matmul(), (self, other), **kw)

    def expand(self, extents: Sequence[object], **kw: object) -> Value:
        """`b` axes to the extents given (numbers or symbols, one per axis; the
        others repeat theirs): `x.expand([b.sym("N"), 8], shard={0: "DIDx"})`."""
        return self.builder.apply(ops.Expand(), (self, *extents), **kw)

    def set(self, **kw: object) -> Value:
        """A copy into another type: `set(shard={0: "DIDx"}, mesh=m2, layout=[1, 0])`."""
        return self.builder.apply(ops.Set(), (self,), **kw)

    # ---- windows (spec §5.8) ---------------------------------------------------------

    def slice(self, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int] | None = None,
              axes: Sequence[int] | None = None, **kw: object) -> Value:
        """`x[starts[0]:stops[0]:steps[0], ...]` on the leading axes, or on `axes`."""
        steps = (1,) * len(starts) if steps is None else steps
        axes = range(len(starts)) if axes is None else axes
        op = ops.Slice(tuple(axes), tuple(starts), tuple(stops), tuple(steps))
        return self.builder.apply(op, (self,), **kw)

    def select(self, axis: int, index: int, **kw: object) -> Value:
        """`x[..., index, ...]` at `axis` (the axis is gone from the result)."""
        return self.builder.apply(ops.Select(axis, index), (self,), **kw)

    def pad(self, low: Sequence[int], high: Sequence[int], value: int | float = 0, **kw: object) -> Value:
        """`np.pad(x, list(zip(low, high)), constant_values=value)`."""
        return self.builder.apply(ops.Pad(tuple(low), tuple(high), value), (self,), **kw)


# Functions in the style of jax.numpy: each forwards to its first Value's builder.
def _first(args: tuple) -> Applies:
    for a in args:
        if isinstance(a, Value):
            return a.builder
    raise InputError("at least one operand must be a Value")


def binary(kind: str, a: object, b: object, **kw: object) -> Value:
    """Any binary op by name; either operand may be a number or a symbol:
    `binary("sub", b.sym("N"), x)`."""
    if kind not in ops.BINARY:
        raise InputError(f"unknown binary op {kind!r} (known: {', '.join(ops.BINARY)})")
    return _first((a, b)).apply(ops.Binary(kind), (a, b), **kw)


def unary(kind: str, x: Value, **kw: object) -> Value:
    return x.unary(kind, **kw)


def _binary(name: str) -> Callable[..., Value]:
    def fn(a: object, b: object, **kw: object) -> Value:
        return _first((a, b)).apply(ops.Binary(name), (a, b), **kw)

    fn.__name__ = name
    return fn


add, sub, mul, div, maximum, minimum = (_binary(n) for n in ops.BINARY)


def cast(x: Value, dtype: str, **kw: object) -> Value:
    return x.cast(dtype, **kw)


def permute(x: Value, perm: Sequence[int], **kw: object) -> Value:
    return x.permute(perm, **kw)


def matmul(a: Value, b: Value, **kw: object) -> Value:
    return a.matmul(b, **kw)


def expand(x: Value, extents: Sequence[object], **kw: object) -> Value:
    return x.expand(extents, **kw)


def reshape(x: Value, shape: Sequence[int | str | Sym], **kw: object) -> Value:
    return x.reshape(shape, **kw)


def reshard(x: Value, **kw: object) -> Value:
    """`set`: a copy into another sharding, mesh or layout."""
    return x.set(**kw)


def cat(xs: Sequence[Value], axis: int, **kw: object) -> Value:
    """`np.concatenate(xs, axis)`."""
    return _first(tuple(xs)).apply(ops.Cat(axis), tuple(xs), **kw)


def compare(kind: str, a: object, b: object, **kw: object) -> Value:
    """eq ne lt le gt ge by name; either operand may be a number: `compare("lt", 0, x)`."""
    if kind not in ops.COMPARISONS:
        raise InputError(f"unknown comparison {kind!r} (known: {', '.join(ops.COMPARISONS)})")
    return _first((a, b)).apply(ops.Compare(kind), (a, b), **kw)


def where(cond: Value, x: object, y: object, **kw: object) -> Value:
    """np.where(cond, x, y): cond a bool Value, x or y may be a number."""
    return _first((cond,)).apply(ops.Where(), (cond, x, y), **kw)


def iota(builder: Applies, result_type: object, axis: int, **kw: object) -> Value:
    """iota(axis=k) of the declared `result_type` (builder.type(...)): the global indices
    along axis k, each device's block holding its own (spec §5.9)."""
    return builder.apply(ops.Iota(axis), (), result_type=result_type, **kw)
