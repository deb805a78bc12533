"""The receive-buffer sentinel (spec §9.1): one switch for every transport.

Where it is armed, every transport fills a buffer it receives into (and the
gpu pool a block it hands out) with a value no correct result leaves there
before writing it: NaN for floats, the byte 0xA5 repeated for integers and
bools (a bool of byte 0xA5 is neither True nor False; the comparator compares
bools by their bytes); the gpu pool, which knows no dtype, fills bytes 0xFF
(NaN in every float format). A piece a transport never writes then fails the
comparison instead of holding whatever the memory held before, which can be
the right bytes of an earlier call. The fill costs bandwidth, so it is off by
default (plain `run`, the benchmarks) and on in conform runs and the tests:
`python -m refir conform` arms it, REFIR_SENTINEL=1 or 0 forces it either way.
"""

from __future__ import annotations

import os

import numpy as np

from refir import env
from refir.ir.types import is_float

ENV = "REFIR_SENTINEL"
BYTE = 0xA5
POOL_BYTE = 0xFF  # memory of no known dtype (the gpu pool's blocks): NaN in every float format, -1 in integers


def _forced() -> bool | None:
    """REFIR_SENTINEL's word (refir.env refuses a value but 0 or 1), or None where unset."""
    return env.flag(ENV, False) if os.environ.get(ENV, "").strip() else None


_ARMED = [_forced() is True]


def armed() -> bool:
    return _ARMED[0]


def arm(on: bool = True) -> None:
    """Arm (or disarm) the fill, unless REFIR_SENTINEL says otherwise."""
    forced = _forced()
    _ARMED[0] = on if forced is None else forced


def value(dtype: np.dtype) -> np.ndarray:
    """The sentinel as a 0-d array of `dtype`."""
    dtype = np.dtype(dtype)
    if is_float(dtype) or dtype.kind == "c":
        return np.full((), np.nan, dtype)
    return np.frombuffer(bytes([BYTE]) * dtype.itemsize, dtype).reshape(())


def fill(x: np.ndarray) -> np.ndarray:
    """x filled with its dtype's sentinel where armed (x itself, for chaining)."""
    if _ARMED[0] and x.size:
        if x.dtype == np.bool_:
            x.view(np.uint8)[...] = BYTE
        else:
            x[...] = value(x.dtype)
    return x


def fill_bytes(buf: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A byte buffer that will hold elements of `dtype`, filled with their sentinel where armed."""
    if _ARMED[0] and buf.size:
        itemsize = np.dtype(dtype).itemsize
        whole = buf.size - buf.size % itemsize
        if whole:
            fill(buf[:whole].view(dtype))
        buf[whole:] = BYTE
    return buf


def empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """np.empty, filled with the sentinel where armed."""
    return fill(np.empty(shape, dtype))


def empty_bytes(nbytes: int, dtype: np.dtype) -> np.ndarray:
    """np.empty(nbytes, uint8) for elements of `dtype`, filled with their sentinel where armed."""
    return fill_bytes(np.empty(nbytes, np.uint8), dtype)
