"""matmul of operands of any ranks >= 1, as np.matmul: a 1-D operand is promoted
(a: [K] -> [1, K], b: [K] -> [K, 1]) and that axis dropped after; batch axes
broadcast from the right, read with stride 0 (no copy). Equal ranks of at least
2 with equal batch extents keep gpu_backend/matmul.py's path as it was (cuBLAS
on a real GPU); every other form runs its tiled kernel, which honours any
strides, zeros included."""

from __future__ import annotations

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.kernels.matmul import matmul_into

Order = tuple[int, ...]


def matmul_any(order: Order, a: DeviceBuffer, b: DeviceBuffer, laid_out: object) -> DeviceBuffer:
    """a @ b dense in `order`; `laid_out(view, order)` lays a view out (gpu_backend/impls.py)."""
    if a.ndim == b.ndim >= 2 and a.shape[:-2] == b.shape[:-2]:
        return matmul_into(DeviceBuffer.empty((*a.shape[:-1], b.shape[-1]), a.dtype, order), a, b)
    xa = a.expand_dims((0,)) if a.ndim == 1 else a
    xb = b.expand_dims((1,)) if b.ndim == 1 else b
    batch = tuple(np.broadcast_shapes(xa.shape[:-2], xb.shape[:-2]))
    xa = xa.broadcast_to((*batch, *xa.shape[-2:]))
    xb = xb.broadcast_to((*batch, *xb.shape[-2:]))
    full = matmul_into(DeviceBuffer.empty((*batch, xa.shape[-2], xb.shape[-1]), a.dtype), xa, xb,
                       library=False)
    drop = ([len(batch)] if a.ndim == 1 else []) + ([len(batch) + 1] if b.ndim == 1 else [])
    kept = [i for i in range(full.ndim) if i not in drop]
    view = DeviceBuffer(full.data, full.offset, tuple(full.shape[i] for i in kept),
                        tuple(full.strides[i] for i in kept))
    return laid_out(view, order)  # type: ignore[operator]
