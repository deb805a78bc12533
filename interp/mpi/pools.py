"""The arrays a plan hands out and the buffers it keeps between calls.

`scratch`: buffers a call uses only while it runs (packed pieces to send,
partials received to fold), one kept per role. `result`: results, kept past
64 KiB and handed out again only once nothing but the pool refers to one
(interp/mpi/shared_windows.py's `first_unheld`). `handed_out`: a plan's
front-first result with its axes moved back, still known to spmd as a buffer
of its own where it lies in a result slot. What MPI receives into is filled
with the sentinel first where it is armed (interp/sentinel.py).
"""

from __future__ import annotations

from math import prod

import numpy as np

from interp.mpi.shared_windows import first_unheld
from interp.sentinel import fill
from interp.transport import HANDED_OUT

# Buffers a call uses only while it runs (packed pieces to send, partials
# received to fold) are kept between calls, one per role, from this size up to
# the largest: a fresh 4 MiB send buffer each call made a 1M all_to_all's MPI
# part about 15% slower (four ranks on two cores; pages faulted anew or cold
# in the TLB), where results, which callers keep, must be fresh arrays.
SCRATCH_MIN_BYTES, SCRATCH_MAX_BYTES = 1 << 16, 1 << 26
_SCRATCH: dict[str, np.ndarray] = {}


def scratch(role: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialized C-contiguous array for `role` within one call: the
    buffer kept for the role where the size is in range (the next call with that
    role overwrites it: a call's MPI requests are complete when it returns, and
    one rank makes one call at a time), else a fresh one."""
    nbytes = prod(shape) * np.dtype(dtype).itemsize
    if not SCRATCH_MIN_BYTES <= nbytes <= SCRATCH_MAX_BYTES:
        out = np.empty(shape, dtype)
    else:
        kept = _SCRATCH.get(role)
        if kept is None or kept.nbytes < nbytes:
            kept = _SCRATCH[role] = np.empty(nbytes, np.uint8)
        out = kept[:nbytes].view(dtype).reshape(shape)
    return fill(out) if role == "received" else out  # what MPI writes: the sentinel first (interp/sentinel.py)


# Results go to the caller, who keeps them: each must be an array no later call
# writes into while anyone holds it. A fresh large array each call cost a 1M
# allgather about a fifth of its time (16 MiB faulted and zeroed by the kernel).
# So results from RESULT_MIN_BYTES up are kept here too, and one is handed out
# again only once nothing but this pool refers to it: no variable, container,
# view (a view refers to its base) or exported buffer (memoryview, mpi4py) of
# it is left, so no holder can see it change. Two per shape and dtype, at
# most RESULTS_MAX_BYTES in all (past that the pool forgets what it kept).
RESULT_MIN_BYTES, RESULTS_MAX_BYTES = 1 << 16, 1 << 28
_RESULTS: dict[tuple[tuple[int, ...], np.dtype], list[np.ndarray]] = {}


def result(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialized C-contiguous array that owns its memory, for a result:
    a kept one nobody holds any more where the size is in range, else a new one
    (either filled with the sentinel where it is armed, interp/sentinel.py)."""
    nbytes = prod(shape) * np.dtype(dtype).itemsize
    if nbytes < RESULT_MIN_BYTES:
        return fill(np.empty(shape, dtype))
    kept = _RESULTS.setdefault((shape, np.dtype(dtype)), [])
    if (unheld := first_unheld(kept)) is not None:
        return fill(kept[unheld])
    out = np.empty(shape, dtype)
    if len(kept) < 2:
        if sum(a.nbytes for k in _RESULTS.values() for a in k) + nbytes > RESULTS_MAX_BYTES:
            _RESULTS.clear()
            kept = _RESULTS[(shape, np.dtype(dtype))] = []
        kept.append(out)
    return fill(out)


def handed_out(whole: np.ndarray, back: tuple[int, ...] | None) -> np.ndarray:
    """The result of a plan whose front-first array is `whole`, its axes moved
    back; where `whole` lies in a result slot, spmd is to keep the very array
    returned as a buffer of its own."""
    if back is None:
        return whole
    out = whole.transpose(back)
    if HANDED_OUT.get(id(whole)) is whole:
        HANDED_OUT[id(out)] = out
    return out
