"""Error classes of the window ops along a sharded axis (docs/spec.md §5.8;
conformance/classes.py says what a class is): a backend gathers each operand along
the axis the op changes, runs the op on the whole axis, and keeps its block. Each
class is a wrong way to do that, which only some programs and data tell apart:

- team order: the blocks gathered in device-id order, not team order (a mesh whose
  ids are out of order along that axis);
- array_split blocks: the blocks taken as np.array_split cuts them (E=5 over 4
  devices: 2, 1, 1, 1, not 2, 2, 1, 0): uneven blocks, an empty one among them;
- padded domain: the gathered axis taken as its padded domain of n * ceil(E / n)
  (nvFuser's split), so pad's high side, or cat's next operand, starts after the
  padding (an uneven last block);
- step phase: each device's part of a strided slice stepped from its block's first
  element in the window (a block boundary inside the slice, out of phase with the
  step; a step that skips a device's whole block picks from it anyway);
- blocks side by side: cat of the operands' blocks on each device, not gathered
  (even blocks give every device the shape it should have, and the wrong rows).

conformance/classes.py adds them to CLASSES."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from conformance.error_class import ErrorClass, Site
from interp.impls import compute
from refir.ir import ops
from refir.ir.types import TensorType, block

Assemble = Callable[[np.ndarray, TensorType, int], np.ndarray]


def _changed_axis(s: Site) -> int | None:
    """The sharded axis the op changes (it gathers along it), if any."""
    t, op = s.types[0], s.op
    if t is None:
        return None
    if isinstance(op, ops.Slice):
        for a, start, stop, step in zip(op.axes, op.starts, op.stops, op.steps):
            whole = len(range(start, stop, step)) == t.axes[a].extent
            if t.axes[a].shard and not whole:
                return a
        return None
    axis = op.axis if isinstance(op, (ops.Select, ops.Cat)) else next(
        (a for a, (lo, hi) in enumerate(zip(op.low, op.high)) if lo or hi), None) if isinstance(op, ops.Pad) else None
    return axis if axis is not None and t.axes[axis].shard and t.mesh.size(t.axes[axis].shard) > 1 else None


def _blocks(x: np.ndarray, t: TensorType, axis: int) -> list[np.ndarray]:
    """x's blocks along `axis`, in team order (spec §3.1)."""
    n = t.mesh.size(t.axes[axis].shard)
    return [np.take(x, range(*block(x.shape[axis], n, k)), axis=axis) for k in range(n)]


def _padded(b: np.ndarray, axis: int, length: int) -> np.ndarray:
    """A block padded with zeros to `length` along `axis` (what a padded slot holds)."""
    widths = [(0, 0)] * b.ndim
    widths[axis] = (0, length - b.shape[axis])
    return np.pad(b, widths)


def _device_order(x: np.ndarray, t: TensorType, axis: int) -> np.ndarray:
    team = t.mesh.teams([t.axes[axis].shard])[0]  # the first team; its ids decide the wrong order
    blocks = _blocks(x, t, axis)
    return np.concatenate([blocks[j] for j in sorted(range(len(team)), key=lambda j: team[j])], axis=axis)


def _array_split(x: np.ndarray, t: TensorType, axis: int) -> np.ndarray:
    blocks = _blocks(x, t, axis)
    e, n = x.shape[axis], len(blocks)
    c = -(-e // n)
    sizes = [e // n + (k < e % n) for k in range(n)]
    return np.concatenate([np.take(_padded(b, axis, c), range(s), axis=axis) for b, s in zip(blocks, sizes)],
                          axis=axis)


def _gathered_wrong(assemble: Assemble) -> Callable[[Site], np.ndarray | None]:
    """The op on operands gathered by `assemble` (each operand of a cat alike)."""
    def value(s: Site) -> np.ndarray | None:
        axis = _changed_axis(s)
        if axis is None:
            return None
        wrong = [assemble(x, t, axis) if t is not None else x for x, t in zip(s.args, s.types)]
        return compute(s.op, wrong, s.dtype)
    return value


def _padded_domain(s: Site) -> np.ndarray | None:
    axis = _changed_axis(s)
    if axis is None or not isinstance(s.op, (ops.Pad, ops.Cat)):
        return None
    right = compute(s.op, list(s.args), s.dtype)

    def domain(x: np.ndarray, t: TensorType) -> np.ndarray:
        n = t.mesh.size(t.axes[axis].shard)
        return _padded(x, axis, n * -(-x.shape[axis] // n))

    firsts = [domain(x, t) for x, t in zip(s.args[:-1], s.types[:-1])] if isinstance(s.op, ops.Cat) else []
    operands = [*firsts, s.args[-1]] if isinstance(s.op, ops.Cat) else [domain(s.args[0], s.types[0])]
    return np.take(compute(s.op, operands, s.dtype), range(right.shape[axis]), axis=axis)


def _step_phase(s: Site) -> np.ndarray | None:
    axis = _changed_axis(s)
    if axis is None or not isinstance(s.op, ops.Slice):
        return None
    x, t, op = s.args[0], s.types[0], s.op
    out = x
    for a, start, stop, step in zip(op.axes, op.starts, op.stops, op.steps):
        right = list(range(start, stop, step))
        idx = right
        if a == axis and step > 1:
            n = t.mesh.size(t.axes[a].shard)
            picked = [i for k in range(n) for lo, hi in [block(x.shape[a], n, k)]
                      for i in range(max(start, lo), min(stop, hi), step)]
            idx = (picked + right[len(picked):])[:len(right)]
        out = np.take(out, idx, axis=a)
    return out


def _side_by_side(s: Site) -> np.ndarray | None:
    axis = _changed_axis(s)
    if axis is None or not isinstance(s.op, ops.Cat):
        return None
    parts = [_blocks(x, t, axis) for x, t in zip(s.args, s.types)]
    return np.concatenate([np.concatenate([p[k] for p in parts], axis=axis) for k in range(len(parts[0]))],
                          axis=axis)


def _rows(*rows: str) -> Callable[[str, str], bool]:
    return lambda row, dtype: row in rows


WINDOW_CLASSES: tuple[ErrorClass, ...] = (
    ErrorClass("team order", "the blocks of the gathered axis in device-id order, not team order",
               _rows("slice", "select", "pad", "cat"), _gathered_wrong(_device_order)),
    ErrorClass("array_split blocks", "the gathered axis cut as np.array_split cuts it (5 over 4: 2, 1, 1, 1)",
               _rows("slice", "select", "pad", "cat"), _gathered_wrong(_array_split)),
    ErrorClass("padded domain", "the gathered axis taken as its padded domain n*ceil(E/n): what comes after it "
               "(pad's high side, cat's next operand) starts after the padding", _rows("pad", "cat"), _padded_domain),
    ErrorClass("step phase", "each device's part of a strided slice stepped from its block's first element "
               "in the window", _rows("slice"), _step_phase),
    ErrorClass("blocks side by side", "cat of each device's operand blocks, not of the gathered axes",
               _rows("cat"), _side_by_side),
)
