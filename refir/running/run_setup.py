"""Everything `refir.run` does before a backend is called, in one place: the
program verified and lowered, the inputs made numpy arrays, bound and checked,
the world chosen, and each hosted device's input blocks cut (under MPI:
agreed on by every rank and delivered from rank 0).

The steps run in an order that enters each of their modules once
(refir.running.prepare, then refir.running.backends, then the input blocks), so that an
input's walk from `refir.run` to a device's buffer reads straight down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from refir.checks.footprint import RunKind
from refir.checks.verifier import Checked
from refir.ir.program import Program
from refir.lowering.lower import Lowered
from refir.running.backends import world_for
from refir.running.prepare import bind_and_check, host_arrays, lowered_of, verified
from refir.running.shard_inputs import shard_inputs
from refir.world.backend_types import Shards
from refir.world.ranks import World, mpi_world


@dataclass(frozen=True)
class Setup:
    checked: Checked
    inputs: dict[str, np.ndarray]  # this rank's inputs as numpy arrays (under MPI, none on a rank given none)
    bindings: dict[str, int]
    world: World | None = None  # None for the global backend
    lowered: Lowered | None = None
    blocks: Shards | None = None  # each hosted device's input blocks


def set_up(program: Program, inputs: dict[str, Any] | None, backend: str, world: int | None, func: str | None,
           kind: RunKind) -> Setup:
    mpi = mpi_world()
    checked = verified(program, func)
    if mpi is None:
        arrays = host_arrays(inputs or {})
        bindings = bind_and_check(checked, arrays, kind)
        if backend == "global":
            return Setup(checked, arrays, bindings)
        lowered = lowered_of(checked)
        w = world_for(checked, world, None)
        return Setup(checked, arrays, bindings, w, lowered, shard_inputs(checked, arrays, w.hosted))
    from refir.world.exchange import deliver_inputs, settle

    # made numpy arrays inside the agreement: a bad input on any rank stops every rank
    if backend == "global":
        _, arrays, bindings, _ = settle(checked, inputs or {}, lambda: None, kind)
        return Setup(checked, arrays, bindings)

    def step() -> tuple[Lowered, World]:
        lowered = lowered_of(checked)
        return lowered, world_for(checked, world, mpi)

    (lowered, w), arrays, bindings, needy = settle(checked, inputs or {}, step, kind)
    return Setup(checked, arrays, bindings, w, lowered, deliver_inputs(checked, arrays, bindings, w, needy))
