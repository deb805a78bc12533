"""`reshape` on device buffers (ops.Reshape): numpy's C-order reshape.

Where the operand's strides allow it, the reshape is a view of its memory, as
numpy's own reshape finds one (`view_strides`: each run of operand axes that
becomes a run of result axes must be contiguous among itself); values are never
written after they are made, so sharing is exact. Otherwise (a permuted layout,
gaps across a merge) the operand is first copied row-major by copy_into, which
reads any strides. The result then takes the step's layout (gpu_backend.impls:
laid_out_view copies where the view does not lie so), so a reshape costs at most
one pass where the operand's strides allow a view, two where they do not and the
result's layout is not row-major either.
"""

from __future__ import annotations

from functools import lru_cache
from math import prod

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.kernels.elementwise import copy_into
from refir.ir.types import dense_strides


def view_strides(shape: tuple[int, ...], strides: tuple[int, ...],
                 new: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides that show memory of (shape, strides) as `new` in C order, or None
    where no view can (numpy's attempt at a copy-free reshape). Both non-empty."""
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    out = [0] * len(new)
    ni, oi = 0, 0
    while ni < len(new) and oi < len(old):
        if new[ni] == 1:  # an added axis of extent 1: any stride will do
            ni += 1
            continue
        nj, oj = ni + 1, oi + 1
        pn, po = new[ni], old[oi][0]
        while pn != po:
            if pn < po:
                pn *= new[nj]
                nj += 1
            else:
                po *= old[oj][0]
                oj += 1
        if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(oi, oj - 1)):
            return None  # the run of operand axes is not one strided run: no view
        step = old[oj - 1][1]
        for k in range(nj - 1, ni - 1, -1):
            if new[k] != 1:
                out[k] = step
                step *= new[k]
        ni, oi = nj, oj
    return tuple(out)


def reshape_buffer(x: DeviceBuffer, shape: tuple[int, ...]) -> DeviceBuffer:
    """x reshaped to `shape` in C order: a view where x's strides allow one, else
    a row-major copy."""
    if prod(shape) != x.size:  # the verifier and check_bound make sure it never is
        raise ValueError(f"cannot reshape {x.shape} into {shape}")
    row_major = tuple(range(len(shape)))
    if x.size == 0:
        return DeviceBuffer.empty(shape, x.dtype, row_major)
    strides = _view_strides(x.shape, x.strides, shape)
    if strides is not None:
        return DeviceBuffer(x.data, x.offset, shape, strides)
    dense = copy_into(DeviceBuffer.empty(x.shape, x.dtype, tuple(range(x.ndim))), x)
    return DeviceBuffer(dense.data, dense.offset, shape, _dense_strides(shape, row_major, 1))


# kept per layout (µs of Python a call each; a run reshapes the same layouts again and again)
_view_strides = lru_cache(maxsize=1024)(view_strides)
_dense_strides = lru_cache(maxsize=1024)(dense_strides)
