"""What `refir.run` takes as an input array, and what it refuses.

numpy arrays as they are; any host array that speaks DLPack (`__dlpack__`:
torch CPU tensors, JAX CPU arrays, ...) is seen through np.from_dlpack, without
a copy; any other object with `__array__` through np.asarray. Arrays on an
accelerator, plain Python lists and scalars (no dtype), and object arrays are
refused with what to do instead. refir never writes to an input either way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from refir.errors import InputError

# DLPack device types (dlpack.h): 1 is the host; 3 is CUDA host-pinned memory.
_HOST = {1, 3}
_DEVICE_NAMES = {2: "CUDA", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI", 10: "ROCm", 13: "CUDA managed",
                 14: "oneAPI"}


def host_array(name: str, x: Any) -> np.ndarray:
    """`x` as a numpy array without a copy where it can be had without one."""
    if isinstance(x, np.ndarray):
        return _check(name, x)
    if hasattr(x, "__dlpack_device__"):
        kind, index = (int(v) for v in x.__dlpack_device__())
        if kind not in _HOST:
            raise InputError(f"input {name!r} is a {type(x).__name__} on a {_DEVICE_NAMES.get(kind, kind)} device "
                             f"({index}); refir.run takes host arrays: copy it to the host first "
                             "(torch: .cpu(), cupy: cupy.asnumpy)")
    if hasattr(x, "__dlpack__"):
        try:
            return _check(name, np.from_dlpack(x))
        except (TypeError, BufferError, RuntimeError) as exc:
            if not hasattr(x, "__array__"):
                raise InputError(f"input {name!r} ({type(x).__name__}) cannot be read through DLPack: {exc}") from exc
    if hasattr(x, "__array__"):
        try:
            return _check(name, np.asarray(x))
        except (TypeError, ValueError, RuntimeError) as exc:
            raise InputError(f"input {name!r} ({type(x).__name__}) refused np.asarray: {exc}") from exc
    if isinstance(x, (list, tuple, int, float, bool, complex)):
        raise InputError(f"input {name!r} is a {type(x).__name__}, not a numpy array, and has no dtype: "
                         "pass np.asarray(value, dtype=...) with the parameter's dtype")
    raise InputError(f"input {name!r} is a {type(x).__name__}, not a numpy array: refir.run takes numpy arrays, "
                     "or host arrays with __dlpack__ or __array__")


def _check(name: str, x: np.ndarray) -> np.ndarray:
    if x.dtype == object:
        raise InputError(f"input {name!r} is an array of Python objects; give it a numeric dtype")
    return x
