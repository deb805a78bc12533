"""expand on one device: the extents its block has. Lowered, `expand(x, E...)` is
handed global extents; where the result shards an expanded (b) axis, the device
makes only its own block of it (local: every element is x's one element there),
and an axis x already has keeps the extent of x's local block."""

from __future__ import annotations

from typing import Any

from refir.ir.types import TensorType, axis_block
from refir.lowering.lower import Step


def local_extents(step: Step, device: int, args: list[Any], src: TensorType) -> list[Any]:
    """`args` (x, then global extents) with the extents of `device`'s block."""
    out = [args[0]]
    mesh = step.type.mesh
    for i, (a, n) in enumerate(zip(src.axes, args[1:])):
        r = step.type.axes[i]
        if not a.broadcast:
            out.append(args[0].shape[i])
        elif r.shard:
            start, stop = axis_block(mesh, r, int(n), device)
            out.append(stop - start)
        else:
            out.append(int(n))
    return out
