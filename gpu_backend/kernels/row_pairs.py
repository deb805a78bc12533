"""row_words' 16-byte variant: the words of a row copy moved two 8-byte words at a time.

A device copy reads and writes 16 bytes an access; row_words' 8-byte words take
twice the instructions for the same bytes (and a shifted row's word two 8-byte
loads). Here a destination row's whole 16-byte words (its ends element by element,
as row_words does) are each one vector store (vectors.storer), made from the
source, unit stride, in one of three ways, chosen per row:

- mode 0, the source aligned like the destination: one 16-byte load;
- mode 1, shifted by one 8-byte word: the two 16-byte words it straddles, their
  middle lanes;
- mode 2, shifted by r elements otherwise: the same two loads (four 8-byte lanes
  x0..x3), from lane q = r // f on, each lane joined with the next by two shifts.

The source's and destination's memories must start on 16 bytes and the source's
be whole 16-byte words (a shifted row reads the whole word holding its last
element): words_plan checks. Each thread makes four words (their eight loads
issued) before it stores any, or eight with `wide`.
"""

from __future__ import annotations

import numpy as np

from gpu_backend.device import cuda
from gpu_backend.kernels.strides import Arr
from gpu_backend.kernels.vectors import loader, storer

U = np.uint64  # indices as unsigned: numba adds no wraparound code (they are element places, never negative)
_load2 = loader(2)
_store2 = storer()


@cuda.jit(device=True)
def _pair(a8: Arr, b: int, k: int, mode: int, q: bool, sh: np.uint64, rsh: np.uint64) -> tuple[np.uint64, np.uint64]:
    """Destination 16-byte word k of a row whose source starts in 16-byte word b, as its two 8-byte lanes."""
    w = U(2 * (b + k))
    x0, x1, _, _ = _load2(a8, w)
    if mode == 0:
        return x0, x1
    x2, x3, _, _ = _load2(a8, w + U(2))
    if mode == 1:
        return x1, x2
    y0 = x1 if q else x0  # selects: q is the row's, the same in every thread
    y1 = x2 if q else x1
    y2 = x3 if q else x2
    return (y0 >> sh) | (y1 << rsh), (y1 >> sh) | (y2 << rsh)


@cuda.jit(device=True)
def _four(o8: Arr, a8: Arr, wo: int, b: int, k: int, bx: int, w1: int, ragged: bool, mode: int, q: bool,
          sh: np.uint64, rsh: np.uint64) -> None:
    """Words k, k + bx, k + 2 bx, k + 3 bx: all four made, then stored (`ragged`: only those below w1,
    the loads of the others clamped to the last word)."""
    k1, k2, k3 = k + bx, k + 2 * bx, k + 3 * bx
    if ragged:
        last = w1 - 1
        k1, k2, k3 = min(k1, last), min(k2, last), min(k3, last)
    p0 = _pair(a8, b, k, mode, q, sh, rsh)
    p1 = _pair(a8, b, k1, mode, q, sh, rsh)
    p2 = _pair(a8, b, k2, mode, q, sh, rsh)
    p3 = _pair(a8, b, k3, mode, q, sh, rsh)
    _store2(o8, U(2 * (wo + k)), p0[0], p0[1])
    if not ragged or k + bx < w1:
        _store2(o8, U(2 * (wo + k1)), p1[0], p1[1])
    if not ragged or k + 2 * bx < w1:
        _store2(o8, U(2 * (wo + k2)), p2[0], p2[1])
    if not ragged or k + 3 * bx < w1:
        _store2(o8, U(2 * (wo + k3)), p3[0], p3[1])


@cuda.jit(device=True)
def _eight(o8: Arr, a8: Arr, wo: int, b: int, k: int, bx: int, mode: int, q: bool, sh: np.uint64,
           rsh: np.uint64) -> None:
    """Words k, k + bx, ..., k + 7 bx (all below the row's end): all eight made, then stored."""
    p0 = _pair(a8, b, k, mode, q, sh, rsh)
    p1 = _pair(a8, b, k + bx, mode, q, sh, rsh)
    p2 = _pair(a8, b, k + 2 * bx, mode, q, sh, rsh)
    p3 = _pair(a8, b, k + 3 * bx, mode, q, sh, rsh)
    p4 = _pair(a8, b, k + 4 * bx, mode, q, sh, rsh)
    p5 = _pair(a8, b, k + 5 * bx, mode, q, sh, rsh)
    p6 = _pair(a8, b, k + 6 * bx, mode, q, sh, rsh)
    p7 = _pair(a8, b, k + 7 * bx, mode, q, sh, rsh)
    _store2(o8, U(2 * (wo + k)), p0[0], p0[1])
    _store2(o8, U(2 * (wo + k + bx)), p1[0], p1[1])
    _store2(o8, U(2 * (wo + k + 2 * bx)), p2[0], p2[1])
    _store2(o8, U(2 * (wo + k + 3 * bx)), p3[0], p3[1])
    _store2(o8, U(2 * (wo + k + 4 * bx)), p4[0], p4[1])
    _store2(o8, U(2 * (wo + k + 5 * bx)), p5[0], p5[1])
    _store2(o8, U(2 * (wo + k + 6 * bx)), p6[0], p6[1])
    _store2(o8, U(2 * (wo + k + 7 * bx)), p7[0], p7[1])


@cuda.jit(device=True)
def _run_mode(o8: Arr, a8: Arr, wo: int, b: int, k: int, w1: int, bx: int, wide: bool, mode: int, q: bool,
              sh: np.uint64, rsh: np.uint64) -> None:
    """Words k, k + bx, ... below w1: rounds of eight (with `wide`) or four, then the ragged end's four."""
    if wide:
        while k + 7 * bx < w1:
            _eight(o8, a8, wo, b, k, bx, mode, q, sh, rsh)
            k += 8 * bx
    while k + 3 * bx < w1:
        _four(o8, a8, wo, b, k, bx, w1, False, mode, q, sh, rsh)
        k += 4 * bx
    if k < w1:
        _four(o8, a8, wo, b, k, bx, w1, True, mode, q, sh, rsh)


@cuda.jit(device=True)
def run_pairs(o8: Arr, a8: Arr, wo: int, s: int, k: int, w1: int, bx: int, wide: bool, f: int) -> None:
    """A row's 16-byte words k, k + bx, ... below w1: destination word wo on (o8, a8: the memories as 8-byte
    words), the source from its element s (f elements an 8-byte word)."""
    big = 2 * f
    r = s % big
    b = s // big
    q = r >= f
    sh = np.uint64((r % f) * (64 // f))
    rsh = np.uint64(64) - sh
    if r == 0:  # each call inlined with its mode a constant: loops without the other modes
        _run_mode(o8, a8, wo, b, k, w1, bx, wide, 0, q, sh, rsh)
    elif sh == 0:
        _run_mode(o8, a8, wo, b, k, w1, bx, wide, 1, q, sh, rsh)
    else:
        _run_mode(o8, a8, wo, b, k, w1, bx, wide, 2, q, sh, rsh)
