"""What a backend is, as a type: the per-device buffers it takes and returns (Shards), and the
call every backend answers (Backend). Here, below both the run path and the backends, so
that neither imports the other to name them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from refir.lowering.lower import Lowered
from refir.world.ranks import World

Shards = dict[str, dict[int, np.ndarray]]  # value name -> device -> its buffer
# A backend runs a lowered program on the ranks `world.hosted`: per-device
# inputs in, the results' per-device buffers (as host numpy arrays) out.
Backend = Callable[[Lowered, Shards, dict[str, int], World], Shards]
