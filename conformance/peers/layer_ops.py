"""Peer cases of the layer ops of issue 27: select, pad, expand, a causal mask
(iota, ge, where), the comparisons, where, the unary `tanh erf sigmoid rsqrt sin
cos`, and matmul of a 3-D by a 2-D operand (or a 2-D by a 3-D: numpy's batch
broadcasting).

The same table as shape_ops: how a case is drawn, its operands, its numpy
meaning, refir's side (refir.frontends.builder: the op where its operands are,
else on replicated operands) and DTensor's (`torch_op`, whose source the
standalone reproducers carry as it is). Everything but the unary ops moves or
picks stored values (or exact integer products) and is compared bit for bit; a
unary op within `PEER_ULPS` of the meaning (see there).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from interp.mask_bounds import MASK_ULPS
from refir.errors import VerifyError
from refir.frontends.dtensor import Placement
from refir.ir import ops
from refir.ir.types import DTYPES, Axis, as_dtype, is_float

LAYER_OPS = ("select", "pad", "expand", "causal", "compare", "where", "unary", "bmatmul")
COMPARES = ops.COMPARISONS  # eq ne lt le gt ge: params[0] indexes it
UNARIES = ops.MASK_UNARY  # tanh erf sigmoid rsqrt sin cos: params[0] indexes it
PAD_VALUES = (0, 5, -3)  # pad's constant: an index into this in params[0]
FLOATS = ("f32", "f64", "f16", "bf16")
INT_FILL = -100  # the causal mask's fill for integer dtypes (floats: -inf)

# docs/spec.md §10 num_c7: numpy and any other implementation are each within K ulps
# (interp/mask_bounds.py's MASK_ULPS: tanh erf sin cos 4, sigmoid 6, rsqrt 1) of the true
# function, so two of them agree within 2K + 1 ulps, an ulp being eps(dtype) |r| plus the
# dtype's smallest subnormal (interp.numerics.ulp), per element.
PEER_ULPS = {name: 2 * k + 1 for name, k in MASK_ULPS.items()}


def draw(c: Any, op: str, small: Callable[[int], tuple[int, ...]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the result's shape, the op's parameters); `small(n)` draws n extents 0 to 8."""
    if op == "select":
        x = list(small(1 + c.below(3)))
        axis = c.below(len(x))
        full = max(x[axis], 1)
        return tuple(x[:axis] + x[axis + 1:]), (axis, c.below(full), full)
    if op == "pad":
        shape = small(1 + c.below(2))
        value = c.below(len(PAD_VALUES))
        widths = [c.below(3) for _ in range(2 * len(shape))]  # low, high of axis 0, then of axis 1
        out = tuple(n + widths[2 * i] + widths[2 * i + 1] for i, n in enumerate(shape))
        return out, (value, *widths)
    if op == "bmatmul":
        form = c.below(2)  # 0: [B, M, K] x [K, N]; 1: [M, K] x [B, K, N]
        # extents from 1: under LocalTensorMode DTensor's matmul of mixed ranks never returns on an
        # extent 0 (docs/peers.md, "Not drawn: LocalTensorMode hangs")
        b, m, k, n = (max(e, 1) for e in small(4))
        return (b, m, n), (form, k)
    if op == "causal":
        return small(2 + c.below(2)), ()
    shape = small(1 + c.below(3))
    if op == "expand":
        return shape, (c.below(len(shape)),)
    if op == "compare":
        return shape, (c.below(len(COMPARES)),)
    if op == "unary":
        return shape, (c.below(len(UNARIES)),)
    return shape, ()


def dtype_for(op: str, dtype: str) -> str:
    """The unary ops need a float dtype (elementwise_c6): an integer draw becomes f32."""
    return dtype if op != "unary" or dtype in FLOATS else "f32"


def operands(op: str, shape: tuple[int, ...], params: tuple[int, ...], placed: list[tuple[Placement, ...]]
             ) -> list[tuple[str, tuple[int, ...], tuple[Placement, ...]]]:
    """(name, global shape, placements); `placed` holds the drawn placements, one per operand."""
    return [(name, s, ps) for (name, s), ps in zip(operand_shapes(op, shape, params), placed)]


def operand_shapes(op: str, shape: tuple[int, ...], params: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
    if op == "select":
        axis, _, full = params
        return [("x", shape[:axis] + (full,) + shape[axis:])]
    if op == "pad":
        widths = params[1:]
        return [("x", tuple(n - widths[2 * i] - widths[2 * i + 1] for i, n in enumerate(shape)))]
    if op == "expand":
        axis = params[0]
        return [("x", shape[:axis] + (1,) + shape[axis + 1:])]
    if op == "bmatmul":
        form, k = params
        b, m, n = shape
        return [("x", (b, m, k)), ("w", (k, n))] if form == 0 else [("x", (m, k)), ("w", (b, k, n))]
    if op in ("compare", "where"):
        return [("k", shape)] * (op == "where") + [("x", shape), ("w", shape)]
    return [("x", shape)]


def operand_dtype(op: str, name: str, dtype: str) -> str:
    return "bool" if op == "where" and name == "k" else dtype


def result_dtype(op: str, dtype: str) -> str:
    return "bool" if op == "compare" else dtype


def data(op: str, name: str, shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """An operand's global value: where's condition true or false; a unary op's operand
    in sixteenths from -4 to 4 (exact in every float dtype, negatives and 0 for rsqrt);
    floats compared or picked with NaN and -0.0 among them (num_c5: exact); else the
    small integers of every peer case."""
    if op == "where" and name == "k":
        return rng.integers(0, 2, shape).astype(bool)
    dt = DTYPES[dtype]
    if op == "unary":
        return (rng.integers(-64, 65, shape) / 16).astype(dt)
    v = rng.integers(-4, 5, shape).astype(dt)
    if op in ("compare", "where") and is_float(dt) and v.size:
        special = rng.integers(0, 8, shape)
        v = np.where(special == 0, dt.type(np.nan), np.where(special == 1, dt.type(-0.0), v)).astype(dt)
    return v


def meaning(op: str, shape: tuple[int, ...], params: tuple[int, ...], inputs: dict[str, np.ndarray]) -> np.ndarray:
    x = inputs["x"]
    if op == "select":
        axis, index, _ = params
        return np.take(x, index, axis=axis)
    if op == "pad":
        value, *widths = params
        pads = [(widths[2 * i], widths[2 * i + 1]) for i in range(x.ndim)]
        return np.pad(x, pads, constant_values=np.array(PAD_VALUES[value]).astype(x.dtype))
    if op == "expand":
        return np.broadcast_to(x, shape).copy()
    if op == "causal":
        i = np.arange(shape[-2]).reshape(-1, 1)
        j = np.arange(shape[-1]).reshape(1, -1)
        return np.where(i >= j, x, fill(x.dtype)).astype(x.dtype)
    if op == "compare":
        fn = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
              "ge": np.greater_equal}[COMPARES[params[0]]]
        return fn(x, inputs["w"])
    if op == "where":
        return np.where(inputs["k"], x, inputs["w"])
    if op == "unary":
        return _unary(UNARIES[params[0]], x)
    exact = np.matmul(x.astype(np.float64), inputs["w"].astype(np.float64))  # small integers: exact
    return exact.astype(x.dtype)


def fill(dt: np.dtype) -> Any:
    return dt.type(-np.inf) if is_float(dt) else dt.type(INT_FILL)


def _unary(name: str, x: np.ndarray) -> np.ndarray:
    """The function in float64, rounded once to x's dtype (within half an ulp of the truth)."""
    w = x.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        v = {"tanh": np.tanh, "sin": np.sin, "cos": np.cos, "rsqrt": lambda a: 1 / np.sqrt(a),
             "sigmoid": lambda a: 1 / (1 + np.exp(-a)),
             "erf": lambda a: np.array([math.erf(e) for e in a.ravel()]).reshape(a.shape)}[name](w)
    return as_dtype(np.asarray(v, dtype=np.float64), x.dtype)


def tolerance(op: str, params: tuple[int, ...]) -> int:
    """Ulps two sides may differ by, per element (0: bit for bit)."""
    return PEER_ULPS[UNARIES[params[0]]] if op == "unary" else 0


def refir_op(op: str, shape: tuple[int, ...], params: tuple[int, ...], args: list[Any], dtype: str) -> Any:
    """refir's plan: the op where the operands are, else on replicated operands (spec §5.10's `set` first)."""
    try:
        return _apply(op, shape, params, args, dtype)
    except VerifyError:  # e.g. matmul_c3 (K sharded unlike in the two), elementwise_c5 (one axis on two mesh dims)
        whole = [a.set(name=f"{a.name}_whole", shard={}) for a in args]
        return _apply(op, shape, params, whole, dtype)


def _apply(op: str, shape: tuple[int, ...], params: tuple[int, ...], args: list[Any], dtype: str) -> Any:
    from refir.frontends import builder

    x = args[0]
    if op == "select":
        axis, index, _ = params
        return x.select(axis, index, name="y_op")
    if op == "pad":
        value, *widths = params
        return x.pad(widths[0::2], widths[1::2], PAD_VALUES[value], name="y_op")
    if op == "expand":  # refir expands `b` axes: the extent-1 axis is dropped and put back as `b` first
        axis = params[0]
        kept = [n for i, n in enumerate(x.type.axes) if i != axis]
        squeezed = x.reshape([int(a.extent) for a in kept], name="x_squeezed")
        return squeezed.unsqueeze([axis], name="x_b").expand(list(shape), name="y_op")
    if op == "causal":  # where(iota(-2) >= iota(-1), x, fill): the mask typed as x is sharded, made in place
        t = replace(x.type, dtype="i32", axes=tuple(Axis(a.extent, a.shard) for a in x.type.axes), layout=None)
        rank = len(shape)
        rows = builder.iota(x.builder, t, rank - 2, name="rows")
        cols = builder.iota(x.builder, t, rank - 1, name="cols")
        keep = rows.ge(cols, name="keep")
        return keep.where(x, float("-inf") if dtype in FLOATS else INT_FILL, name="y_op")
    if op == "compare":
        return x.compare(COMPARES[params[0]], args[1], name="y_op")
    if op == "where":
        return args[0].where(args[1], args[2], name="y_op")
    if op == "unary":
        return x.unary(UNARIES[params[0]], name="y_op")
    return x.matmul(args[1], name="y_op")


def torch_op(op: str, params: list[int], shape: list[int], args: list) -> object:
    """DTensor's side (standalone: the reproducer scripts carry this source)."""
    import torch
    from torch.distributed.tensor import distribute_tensor

    x = args[0]
    if op == "select":
        return x.select(params[0], params[1])
    if op == "pad":
        value, *widths = params
        pads = [w for i in reversed(range(x.ndim)) for w in (widths[2 * i], widths[2 * i + 1])]  # last dim first
        return torch.nn.functional.pad(x, pads, value=(0, 5, -3)[value])
    if op == "expand":
        return x.expand(*shape)
    if op == "causal":  # the index grids as DTensors placed as x, then where(i >= j, x, fill)
        s, t = shape[-2], shape[-1]
        rows = torch.arange(s).reshape(s, 1).expand(*shape).contiguous()
        cols = torch.arange(t).reshape(1, t).expand(*shape).contiguous()
        i, j = (distribute_tensor(g, x.device_mesh, x.placements) for g in (rows, cols))
        return torch.where(i >= j, x, float("-inf") if x.dtype.is_floating_point else -100)
    if op == "compare":
        return getattr(torch, ("eq", "ne", "lt", "le", "gt", "ge")[params[0]])(x, args[1])
    if op == "where":
        return torch.where(x, args[1], args[2])
    if op == "unary":
        return getattr(torch, ("tanh", "erf", "sigmoid", "rsqrt", "sin", "cos")[params[0]])(x)
    return torch.matmul(x, args[1])
