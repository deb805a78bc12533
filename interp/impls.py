"""The meaning of every compute op: one short numpy function each, in a table.

The same table serves the global reference (whole arrays) and spmd (each
device's block): a reduction over a sharded axis computes the local partial.
Floats of 32 bits or fewer are summed and multiplied in float64 and rounded
once; integer arithmetic wraps in its own dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from refir.errors import RunError
from refir.ir import ops
from refir.ir.tables import registrar
from refir.ir.types import DTYPES, as_dtype, extent_value, is_bf16, is_float, shape_symbols

Impl = Callable[..., np.ndarray]
IMPLS: dict[type, Impl] = {}


impl = registrar(IMPLS)


BINARY_FNS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum,
}
UNARY_FNS = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "relu": lambda x: np.maximum(x, x.dtype.type(0)),
    # tanh erf sigmoid rsqrt sin cos: added by interp/masks.py
}
# The binary operation each reduction folds with (also across devices).
COMBINE = {
    "sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
    "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor,
}


def wide(dtype: np.dtype) -> np.dtype:
    """The accumulator type: float64 for floats of 32 bits or fewer."""
    return np.dtype(np.float64) if is_float(dtype) else dtype


def identity(kind: str, dtype: np.dtype) -> object:
    """The value a reduction of zero elements gives."""
    if kind in ("sum", "bor", "bxor"):
        return dtype.type(0)
    if kind == "prod":
        return dtype.type(1)
    if kind == "band":
        return ~dtype.type(0)
    if dtype.kind == "b":
        return kind == "min"
    if is_float(dtype):
        return dtype.type(-np.inf if kind == "max" else np.inf)
    info = np.iinfo(dtype)
    return dtype.type(info.min if kind == "max" else info.max)


@impl(ops.Binary)
def binary(op: ops.Binary, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray(BINARY_FNS[op.name](a, b))


@impl(ops.Unary)
def unary(op: ops.Unary, x: np.ndarray) -> np.ndarray:
    return np.asarray(UNARY_FNS[op.name](x))


@impl(ops.Cast)
def cast(op: ops.Cast, x: np.ndarray) -> np.ndarray:
    """Float to integer truncates toward zero, saturates, and sends NaN to 0 (as
    PTX's cvt.rzi does); integer to integer wraps; to bool is `!= 0`."""
    to = DTYPES[op.dtype]
    if is_float(x.dtype) and to.kind in "iu":
        info = np.iinfo(to)
        t = np.trunc(x.astype(np.float64))
        out = np.where(t >= float(info.max), info.max, 0).astype(to)
        inside = (t > float(info.min)) & (t < float(info.max))
        out[inside] = t[inside].astype(to)
        out[t <= float(info.min)] = info.min
        return out
    if to.kind == "b":
        return np.asarray(x != 0)  # a 0-d comparison gives a numpy scalar
    return as_dtype(x, to)


@impl(ops.Permute)
def permute(op: ops.Permute, x: np.ndarray) -> np.ndarray:
    """result[i_0, ..., i_n] = x[j] where j[perm[k]] = i_k."""
    return np.transpose(x, op.perm)


@impl(ops.Unsqueeze)
def unsqueeze(op: ops.Unsqueeze, x: np.ndarray) -> np.ndarray:
    return np.expand_dims(x, op.dims)


@impl(ops.Reduction)
def reduction(op: ops.Reduction, x: np.ndarray) -> np.ndarray:
    dims = tuple(op.dims)
    if op.kind == "sum":
        return as_dtype(np.sum(x, axis=dims, dtype=wide(x.dtype)), x.dtype)
    if op.kind == "prod":
        return as_dtype(np.prod(x, axis=dims, dtype=wide(x.dtype)), x.dtype)
    fold = COMBINE[op.kind]
    return np.asarray(fold.reduce(x, axis=dims, initial=identity(op.kind, x.dtype)))


@impl(ops.Matmul)
def matmul(op: ops.Matmul, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[..., M, K] x [..., K, N] -> [..., M, N]."""
    acc = wide(a.dtype)
    return as_dtype(np.matmul(a.astype(acc), b.astype(acc)), a.dtype)


@impl(ops.Expand)
def expand(op: ops.Expand, x: np.ndarray, *extents: int) -> np.ndarray:
    """np.broadcast_to of the b axes (a view: the caller materializes it); the
    extents are the axes' extents where this array is expanded (a device's block
    extent on a sharded one: interp/expand.py), kept as the array has them elsewhere."""
    return np.broadcast_to(x, tuple(int(n) if m == 1 else m for n, m in zip(extents, x.shape)))


@impl(ops.Reshape)
def reshape(op: ops.Reshape, x: np.ndarray, *values: object) -> np.ndarray:
    """np.reshape(x, op.shape) in C order, whatever x's strides (a view where they
    allow one); the symbols of op.shape take `values`, the equation's scalar
    operands, in order. On a device, spmd reshapes each block to its block of
    the result instead (interp.spmd.reshape_block)."""
    return reshape_into(x, reshape_extents(op, values))


def reshape_into(x: np.ndarray, extents: tuple[int, ...]) -> np.ndarray:
    return np.reshape(x, extents, order="C")


def reshape_extents(op: ops.Reshape, values: Sequence[object]) -> tuple[int, ...]:
    """op.shape with its symbols (the equation's scalar operands, in order) bound."""
    bound = {n: int(v) for n, v in zip(shape_symbols(op.shape), values)}  # type: ignore[call-overload]  # 0-d arrays too
    return tuple(extent_value(e, bound) for e in op.shape)


@impl(ops.Set)
@impl(ops.Copy)
def copy(op: object, x: np.ndarray) -> np.ndarray:
    return x


# ---- windows (docs/spec.md §5.8): numpy's basic slicing, indexing, np.pad, np.concatenate ----


@impl(ops.Slice)
def slice_(op: ops.Slice, x: np.ndarray) -> np.ndarray:
    """x[start:stop:step] on each of op.axes (a view; the caller lays it out)."""
    index = [slice(None)] * x.ndim
    for a, start, stop, step in zip(op.axes, op.starts, op.stops, op.steps):
        index[a] = slice(start, stop, step)
    return x[tuple(index)]


@impl(ops.Select)
def select(op: ops.Select, x: np.ndarray) -> np.ndarray:
    """x[..., index, ...] at op.axis; an index past a symbolic extent is select_c3."""
    if op.index >= x.shape[op.axis]:
        raise RunError(f"select index {op.index} is outside axis {op.axis} of extent {x.shape[op.axis]} [select_c3]")
    return np.asarray(x[(slice(None),) * op.axis + (op.index,)])


@impl(ops.Pad)
def pad(op: ops.Pad, x: np.ndarray) -> np.ndarray:
    """np.pad(x, zip(low, high), constant_values=value), the value in x's dtype."""
    shape = tuple(n + lo + hi for n, lo, hi in zip(x.shape, op.low, op.high))
    out = np.full(shape, scalar_value(op.value, x.dtype), x.dtype)
    out[tuple(slice(lo, lo + n) for n, lo in zip(x.shape, op.low))] = x
    return out


@impl(ops.Cat)
def cat(op: ops.Cat, *xs: np.ndarray) -> np.ndarray:
    return np.concatenate(xs, axis=op.axis)


def fold(kind: str, parts: Sequence[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """Combine per-device partials left to right, every step's result cast back
    to the first partial's dtype, into `out` where given (of the parts' shape
    and dtype, any layout; the parts may be the rows of one array), else into a
    fresh array laid out as the first partial (order 'K'). The in-process and
    the MPI transports both fold with it: the same bits, in team order."""
    combine = COMBINE[kind]
    if out is None:
        out = np.empty_like(parts[0])
    if len(parts) == 1:
        np.copyto(out, parts[0])
        return out
    combine(parts[0], parts[1], out=out, casting="unsafe")  # unsafe: computed as the inputs ask, then cast back
    for p in parts[2:]:
        combine(out, p, out=out, casting="unsafe")
    return out


def compute(op: object, args: list[object], dtype: np.dtype) -> np.ndarray:
    """Apply `op`; scalar operands take the tensor dtype (integers wrap), but those
    of ops.TAKES_EXTENTS are extents, handed as they are."""
    if isinstance(op, ops.TAKES_EXTENTS):
        return IMPLS[type(op)](op, *args)
    values = [a if isinstance(a, np.ndarray) else scalar_value(a, dtype) for a in args]
    with np.errstate(all="ignore"):
        return IMPLS[type(op)](op, *values)


def scalar_value(value: object, dtype: np.dtype) -> np.ndarray:
    """A scalar operand (literal or symbol value) in the tensor dtype; integers wrap."""
    if dtype.kind in "iu" and isinstance(value, int):  # wrap any Python int, however large
        bits = 8 * dtype.itemsize
        value %= 1 << bits
        if dtype.kind == "i" and value >= 1 << (bits - 1):
            value -= 1 << bits
        return np.array(value, dtype)
    with np.errstate(all="ignore"):
        return as_dtype(value, dtype) if dtype.kind in "iu" or is_bf16(dtype) else np.array(value, dtype)
