"""Copying runs of rows on the host: the bytes at one place in every row of a
buffer whose rows lie a fixed step apart (a piece of a row-major block cut
along its columns), each into a dense array of its own.

numpy copies such a piece row by row through its strided loop, about 4 ns a
row of 64 bytes however it is viewed (0.06-0.07 ms for 1 MiB of 16384 rows on
this 2-core EPYC, where rows of 252 bytes keep it from reading 8-byte words);
numba's loops over the elements leave rows this short to their scalar tails.
Here every run moves as unaligned 32-byte vectors, the last one ending at the
run's end (overlapping the one before where the run is no multiple of 32):
0.03 ms for that piece. Several pieces are written in one pass over the rows
(each row's runs to each destination in turn), which reads the source once.
Only bytes move, so any dtype keeps its bits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core.base import BaseContext
from numba.core.typing.templates import Signature
from numba.extending import intrinsic

# Below this many bytes a piece is copied by numpy: a compiled call's own cost
# is as much as the bytes.
RUNS_MIN_BYTES = 1 << 16


def _mover(kind: ir.Type) -> Callable[..., object]:
    """An intrinsic moving one value of `kind` from address src to address dst, unaligned."""

    @intrinsic
    def move(typingctx: object, dst: types.Type, src: types.Type) -> tuple[Signature, Callable[..., object]]:
        def codegen(context: BaseContext, builder: ir.IRBuilder, signature: Signature, args: list[ir.Value]) -> object:
            to, frm = (builder.inttoptr(a, kind.as_pointer()) for a in args)
            load = builder.load(frm)
            load.align = 1
            store = builder.store(load, to)
            store.align = 1
            return context.get_dummy_value()

        return types.void(types.intp, types.intp), codegen

    return move


_move32 = _mover(ir.VectorType(ir.IntType(32), 8))
_move8 = _mover(ir.IntType(64))
_move1 = _mover(ir.IntType(8))


@numba.njit(cache=True, nogil=True, inline="always")
def _run(dst: int, src: int, nbytes: int) -> None:  # pragma: no cover - compiled
    """nbytes from src to dst (not overlapping): 32-byte moves, the last ending at
    the run's end; 8-byte ones for runs of 8 to 31 bytes; single bytes below."""
    if nbytes >= 32:
        last = nbytes - 32
        at = 0
        while at < last:
            _move32(dst + at, src + at)
            at += 32
        _move32(dst + last, src + last)
    elif nbytes >= 8:
        last = nbytes - 8
        at = 0
        while at < last:
            _move8(dst + at, src + at)
            at += 8
        _move8(dst + last, src + last)
    else:
        for at in range(nbytes):
            _move1(dst + at, src + at)


@numba.njit(cache=True, nogil=True)
def _scattered(src: int, step: int, rows: int, at: np.ndarray, nbytes: np.ndarray,
               dsts: np.ndarray) -> None:  # pragma: no cover - compiled
    """For each row r of `rows` (step bytes apart from address src) and each k:
    bytes [at[k], at[k] + nbytes[k]) of the row to dsts[k] + r * nbytes[k]."""
    pieces = dsts.shape[0]
    for r in range(rows):
        row = src + r * step
        for k in range(pieces):
            _run(dsts[k] + r * nbytes[k], row + at[k], nbytes[k])


def runs_scattered(src: np.ndarray, pieces: Sequence[tuple[int, np.ndarray]]) -> None:
    """dst[...] = src[:, lo:lo + dst.shape[1]] for each (lo, dst) of `pieces`, in
    one pass over src's rows: src 2-D with its last axis contiguous (rows any
    step apart), each dst C-contiguous of src's dtype, src's rows and its
    piece's columns, none of them overlapping src."""
    rows, itemsize = src.shape[0], src.itemsize
    if src.ndim != 2 or (src.shape[1] > 1 and src.strides[1] != itemsize):
        raise ValueError("runs_scattered takes a 2-D source whose rows are contiguous")
    for lo, dst in pieces:
        if dst.shape != (rows, dst.shape[1]) or dst.dtype != src.dtype or not dst.flags.c_contiguous \
                or lo < 0 or lo + dst.shape[1] > src.shape[1]:
            raise ValueError(f"runs_scattered: a piece of shape {dst.shape} at column {lo} does not fit {src.shape}")
    large = [(lo, dst) for lo, dst in pieces if dst.nbytes >= RUNS_MIN_BYTES]
    for lo, dst in pieces:
        if dst.nbytes < RUNS_MIN_BYTES:
            np.copyto(dst, src[:, lo:lo + dst.shape[1]])
    if not large:
        return
    at = np.array([lo * itemsize for lo, _ in large], np.intp)
    nbytes = np.array([dst.shape[1] * itemsize for _, dst in large], np.intp)
    dsts = np.array([dst.ctypes.data for _, dst in large], np.intp)
    _scattered(src.ctypes.data, src.strides[0], rows, at, nbytes, dsts)


def runs_into(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src for a C-contiguous 2-D dst and a src of its shape and dtype
    whose rows are contiguous (runs_scattered of one piece)."""
    if src.ndim != 2 or dst.shape != src.shape:
        raise ValueError(f"runs_into takes a 2-D source of the destination's shape, not {src.shape} for {dst.shape}")
    if dst.nbytes < RUNS_MIN_BYTES:
        np.copyto(dst, src)
        return
    runs_scattered(src, [(0, dst)])
