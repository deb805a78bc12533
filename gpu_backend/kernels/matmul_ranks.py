"""matmul of operands of any ranks >= 1, as np.matmul: a 1-D operand is promoted
(a: [K] -> [1, K], b: [K] -> [K, 1]) and that axis dropped after; batch axes
broadcast from the right, read with stride 0 (no copy). Equal ranks of at least
2 with equal batch extents keep gpu_backend/kernels/matmul.py's path as it was (cuBLAS
on a real GPU). Every other form is routed by `route` (a pure function of the
shapes, strides and dtype, so the simulator tests the choice):

- "rows": b one matrix for the whole batch (2-D, 1-D, or broadcast) and a's batch
  and row axes one strided run (a linear's [B, S, K] @ [K, N]): one 2-D matmul of
  [B*S, K] @ [K, N] into the result seen as [B*S, N], through matmul_into (cuBLAS
  on a GPU, cupy's very call: the bits of cupy's matmul of those 2-D views);
- "batched": the batch axes of the result and both operands coalesce to one axis
  (stride 0 where an operand is broadcast: [K] @ [B, K, N], [M, K] @ [B, K, N]):
  one strided batched cuBLAS GEMM (gemm.batched_call), or cupy's matmul where
  cuBLAS does not take a matrix's layout as it is; where only the inner batch axes
  coalesce ([B, H, S, D] @ [H, D, E]), one such call per index of the outer ones;
- "tiled": the rest (integer and half dtypes, more than LOOPED_CALLS calls):
  the tiled kernel, which honours any strides, zeros included.

Under the simulator (no cupy) "rows" and "batched" run the tiled kernel on the very
views the GEMM would take, so their values test the views.
"""

from __future__ import annotations

from math import prod

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.device import SIMULATED
from gpu_backend.kernels import gemm
from gpu_backend.kernels.matmul import _as_cupy, _cupy, _operand, library_matmul, matmul_into, tiled_matmul
from gpu_backend.launches import recording

Order = tuple[int, ...]
LIBRARY = "fd"  # the dtypes (storage chars) cuBLAS takes here, as matmul_into's
LOOPED_CALLS = 64  # batch axes at unrelated strides: at most this many batched calls, one per outer index


def promoted(a: DeviceBuffer, b: DeviceBuffer) -> tuple[DeviceBuffer, DeviceBuffer, tuple[int, ...]]:
    """a and b as matrices broadcast to one batch shape (1-D operands promoted), and that batch."""
    xa = a.expand_dims((0,)) if a.ndim == 1 else a
    xb = b.expand_dims((1,)) if b.ndim == 1 else b
    batch = tuple(np.broadcast_shapes(xa.shape[:-2], xb.shape[:-2]))
    return xa.broadcast_to((*batch, *xa.shape[-2:])), xb.broadcast_to((*batch, *xb.shape[-2:])), batch


def _run_stride(shape: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """The stride of axes that are one strided run (each outer stride its inner one times
    the inner extent, extent-1 axes ignored), at their innermost axis; None if they are not."""
    kept = [(n, s) for n, s in zip(shape, strides) if n != 1]
    for (_, outer), (n, inner) in zip(kept, kept[1:]):
        if outer != inner * n:
            return None
    return kept[-1][1] if kept else None


def route(out: DeviceBuffer, xa: DeviceBuffer, xb: DeviceBuffer) -> tuple[object, ...]:
    """("rows", out2, a2, b2), ("batched", ((out3, a3, b3), ...)) or ("tiled",) for out = xa @ xb,
    the three of one batch shape (`promoted`), out fresh and dense row-major (the module's docstring).
    A batched route is one call per index of the outer batch axes that do not coalesce with the
    inner ones (none for [K] @ [B, K, N]; B for [B, H, S, D] @ [H, D, E]), at most LOOPED_CALLS."""
    if xa.data.dtype.char not in LIBRARY or out.size == 0 or xa.shape[-1] == 0:
        return ("tiled",)
    nb = out.ndim - 2
    k, n = xa.shape[-1], xb.shape[-1]
    if all(s == 0 or e == 1 for e, s in zip(xb.shape[:nb], xb.strides[:nb])):  # one b for the whole batch
        rows = prod(xa.shape[:-1])
        stride = _run_stride(xa.shape[:-1], xa.strides[:-1])
        if stride is not None or rows == 1:
            a2 = DeviceBuffer(xa.data, xa.offset, (rows, k), (xa.strides[-2] if stride is None else stride,
                                                            xa.strides[-1]))
            b2 = DeviceBuffer(xb.data, xb.offset, (k, n), xb.strides[-2:])
            return ("rows", DeviceBuffer(out.data, out.offset, (rows, n), (n, 1)), a2, b2)
    for split in range(nb + 1):  # the fewest outer batch axes looped over, the rest one batch stride each
        outer = prod(out.shape[:split])
        if outer > LOOPED_CALLS:
            break
        steps = [_batch_step(x.shape[split:nb], x.strides[split:nb]) for x in (out, xa, xb)]
        if all(st is not None for st in steps):
            count = prod(out.shape[split:nb])
            calls = []
            for index in np.ndindex(*out.shape[:split]):
                calls.append(tuple(
                    DeviceBuffer(x.data, x.offset + sum(i * s for i, s in zip(index, x.strides)),
                                 (count, *x.shape[-2:]), (st, *x.strides[-2:]))
                    for x, st in zip((out, xa, xb), steps)))
            return ("batched", tuple(calls))
    return ("tiled",)


def _batch_step(shape: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """One batch stride for these batch axes (0 for none, or all of extent 1), None if none fits."""
    if prod(shape) == 1:
        return 0
    return _run_stride(shape, strides)


def batched_into(out: DeviceBuffer, a: DeviceBuffer, b: DeviceBuffer) -> DeviceBuffer:
    """out[i] = a[i] @ b[i], three 3-D views of one batch: one strided batched cuBLAS call
    (gemm.batched_call), else cupy's matmul of the views; the tiled kernel under the simulator."""
    cupy = None if SIMULATED else _cupy()
    if cupy is None:
        return tiled_matmul(out, a, b)
    blas = gemm.cublas_of(cupy)
    char = a.data.dtype.char
    call = None if blas is None else gemm.batched_call(blas, _operand(out), _operand(a), _operand(b), char)
    if call is not None:
        blas.gemm_batched(*call)  # type: ignore[union-attr]
        if recording.active is not None:  # replayed as it is (no graph: graph.py captures gemmEx alone)
            recording.note(blas.gemm_batched, *call)  # type: ignore[union-attr]
            recording.active.gemms.append((call[8], call[21]))
        return out
    recording.taint("cupy's matmul")
    library_matmul(cupy, _as_cupy(cupy, a), _as_cupy(cupy, b), _as_cupy(cupy, out))
    return out


def matmul_any(order: Order, a: DeviceBuffer, b: DeviceBuffer, laid_out: object) -> DeviceBuffer:
    """a @ b dense in `order`; `laid_out(view, order)` lays a view out (gpu_backend/impls.py)."""
    if a.ndim == b.ndim >= 2 and a.shape[:-2] == b.shape[:-2]:
        return matmul_into(DeviceBuffer.empty((*a.shape[:-1], b.shape[-1]), a.dtype, order), a, b)
    xa, xb, batch = promoted(a, b)
    full = DeviceBuffer.empty((*batch, xa.shape[-2], xb.shape[-1]), a.dtype)
    how = route(full, xa, xb)
    if how[0] == "rows":
        matmul_into(*how[1:])  # type: ignore[arg-type]
    elif how[0] == "batched":
        for views in how[1]:  # type: ignore[attr-defined]
            batched_into(*views)
    else:
        matmul_into(full, xa, xb, library=False)
    drop = ([len(batch)] if a.ndim == 1 else []) + ([len(batch) + 1] if b.ndim == 1 else [])
    kept = [i for i in range(full.ndim) if i not in drop]
    view = DeviceBuffer(full.data, full.offset, tuple(full.shape[i] for i in kept),
                        tuple(full.strides[i] for i in kept))
    return laid_out(view, order)  # type: ignore[operator]
