"""Global inputs cut into the blocks of the devices this process hosts.

Each device is handed a view of the caller's array (any strides), or a copy
dense in the declared layout where the parameter type has one. Which block
each device takes is worked out once per program, input shapes and hosted
devices (refir.ir.program_cache).
"""

from __future__ import annotations

import numpy as np

from refir.checks.verifier import Checked
from refir.ir.program_cache import Memo
from refir.ir.types import block_slices, materialize
from refir.world.backend_types import Shards

# (parameter, device, its block's index, the layout it is laid out in)
InputBlock = tuple[str, int, tuple, tuple[int, ...] | None]


def shard_inputs(checked: Checked, inputs: dict[str, np.ndarray], hosted: tuple[int, ...]) -> Shards:
    shards: Shards = {p.name: {} for p in checked.func.params}
    for name, d, index, layout in input_blocks(checked, tuple(inputs[p.name].shape for p in checked.func.params),
                                               hosted):
        block = inputs[name][index]  # a view, also of a 0-d array
        shards[name][d] = block if layout is None else materialize(block, layout)
    return shards


def input_blocks(checked: Checked, shapes: tuple[tuple[int, ...], ...], hosted: tuple[int, ...]) -> list[InputBlock]:
    """(parameter, device, its block's index, the layout it is laid out in) for
    every hosted device of each parameter's mesh, for inputs of these `shapes`."""

    def work() -> list[InputBlock]:
        out: list[InputBlock] = []
        for p, shape in zip(checked.func.params, shapes):
            out += [(p.name, d, block_slices(p.type, d, shape) + (Ellipsis,), p.type.layout)
                    for d in hosted if d in p.type.mesh]
        return out

    return _BLOCKS.get(checked, (shapes, hosted), work)


_BLOCKS: Memo[list[InputBlock]] = Memo()
