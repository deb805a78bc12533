"""Peer cases of the ops that move elements without arithmetic: reshape, slice,
cat and a comparison feeding where (`where(x < w, x, w)`).

Each is exact on every dtype, so both sides must give every rank's block bit
for bit. One table entry per op: how its case is drawn, its operands, its
numpy meaning, refir's side (refir.frontends.builder) and DTensor's (`torch_op`, whose
source the standalone reproducers carry as it is).

refir's side applies the op to the operands as they are placed, with the
result's sharding left to refir's rules (a reshape of whole rows stays
sharded; a window along a sharded axis gathers it); where refir's verifier
refuses that (a reshape that cuts blocks), the operands are first set to
replicated, as spec §5.10 says to write it. The result is then set to the
case's target placements.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from refir.errors import VerifyError
from refir.frontends.dtensor import Placement

SHAPE_OPS = ("reshape", "slice", "cat", "where_lt")


def draw(c: Any, op: str, small: Callable[[int], tuple[int, ...]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the result's shape, the op's parameters); `small(n)` draws n extents 0 to 8."""
    if op == "reshape":  # split an axis in two, or merge two into one; a trailing axis or none
        p, q = (1 + c.below(4) for _ in range(2))
        tail = small(c.below(2))
        split = c.maybe(50)
        source = (p * q, *tail) if split else (p, q, *tail)
        return ((p, q, *tail) if split else (p * q, *tail)), source
    rank = 1 + c.below(2)
    shape = list(small(rank))
    axis = c.below(rank)
    if op == "slice":
        full = shape[axis]
        start = c.below(full + 1)
        stop = start + c.below(full - start + 1)
        step = 1 + c.below(3)
        shape[axis] = len(range(start, stop, step))
        return tuple(shape), (axis, start, stop, step, full)
    if op == "cat":
        first = c.below(shape[axis] + 1)
        return tuple(shape), (axis, first)
    return tuple(shape), ()


def operands(op: str, shape: tuple[int, ...], params: tuple[int, ...], src: tuple[Placement, ...],
             other: tuple[Placement, ...]) -> list[tuple[str, tuple[int, ...], tuple[Placement, ...]]]:
    if op == "reshape":
        return [("x", params, src)]
    if op == "slice":
        axis, *_, full = params
        return [("x", _with(shape, axis, full), src)]
    if op == "cat":
        axis, first = params
        return [("x", _with(shape, axis, first), src), ("w", _with(shape, axis, shape[axis] - first), other)]
    return [("x", shape, src), ("w", shape, other)]


def _with(shape: tuple[int, ...], axis: int, extent: int) -> tuple[int, ...]:
    return shape[:axis] + (extent,) + shape[axis + 1:]


def meaning(op: str, shape: tuple[int, ...], params: tuple[int, ...], inputs: dict[str, np.ndarray]) -> np.ndarray:
    x = inputs["x"]
    if op == "reshape":
        return x.reshape(shape)
    if op == "slice":
        axis, start, stop, step, _ = params
        return x[(slice(None),) * axis + (slice(start, stop, step),)]
    if op == "cat":
        return np.concatenate([x, inputs["w"]], axis=params[0])
    return np.where(x < inputs["w"], x, inputs["w"])


def refir_op(op: str, shape: tuple[int, ...], params: tuple[int, ...], args: list[Any], dtype: str) -> Any:
    """refir's plan: the op where the operands are, else on replicated operands."""
    try:
        return _apply(op, shape, params, args)
    except VerifyError:  # e.g. reshape_c3: a split that cuts the blocks; a `set` first (spec §5.10)
        whole = [a.set(name=f"{a.name}_whole", shard={}) for a in args]
        return _apply(op, shape, params, whole)


def _apply(op: str, shape: tuple[int, ...], params: tuple[int, ...], args: list[Any]) -> Any:
    from refir.frontends import builder

    x = args[0]
    if op == "reshape":
        return x.reshape(list(shape), name="y_op")
    if op == "slice":
        axis, start, stop, step, _ = params
        return x.slice([start], [stop], [step], axes=[axis], name="y_op")
    if op == "cat":
        return builder.cat(args, params[0], name="y_op")
    return x.lt(args[1], name="y_lt").where(x, args[1], name="y_op")


def torch_op(op: str, params: list[int], shape: list[int], args: list) -> object:
    """DTensor's side (standalone: the reproducer scripts carry this source)."""
    import torch

    x = args[0]
    if op == "reshape":
        return x.reshape(shape)
    if op == "slice":
        axis, start, stop, step, _ = params
        return x[(slice(None),) * axis + (slice(start, stop, step),)]
    if op == "cat":
        return torch.cat(args, dim=params[0])
    return torch.where(x < args[1], x, args[1])
