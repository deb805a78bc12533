"""Global inputs cut into the blocks of the devices this process hosts.

Each device is handed a view of the caller's array (any strides), or a copy
dense in the declared layout where the parameter type has one; a partial
input, its block of its own term (refir.running.partial_inputs). Which block
each device takes is worked out once per program, input shapes and hosted
devices (refir.ir.program_cache).
"""

from __future__ import annotations

import numpy as np

from refir.checks.verifier import Checked
from refir.ir.program_cache import Memo
from refir.ir.types import TensorType, block_index, materialize
from refir.running.partial_inputs import partial_term
from refir.world.backend_types import Shards

# (parameter, device, its block's index, the layout it is laid out in)
InputBlock = tuple[str, int, tuple, tuple[int, ...] | None]


def shard_inputs(checked: Checked, inputs: dict[str, np.ndarray], hosted: tuple[int, ...]) -> Shards:
    shards: Shards = {p.name: {} for p in checked.func.params}
    types = {p.name: p.type for p in checked.func.params}
    terms: dict[tuple[str, int], np.ndarray] = {}  # a partial input's term k (§3.3), made once
    for name, d, index, layout in input_blocks(checked, tuple(inputs[p.name].shape for p in checked.func.params),
                                               hosted):
        block = held_by(types[name], name, inputs[name], d, terms)[index]  # a view, also of a 0-d array
        shards[name][d] = block if layout is None else materialize(block, layout)
    return shards


def held_by(t: TensorType, name: str, x: np.ndarray, d: int, terms: dict[tuple[str, int], np.ndarray]) -> np.ndarray:
    """The global array whose block device `d` holds: the input, or for a partial
    input the device's term of it (made once per place in a team, kept in `terms`)."""
    if not t.partial:
        return x
    team = t.mesh.team(d, t.partial)
    k = team.index(d)
    if (name, k) not in terms:
        terms[name, k] = partial_term(t, np.asarray(x), k, len(team), name)
    return terms[name, k]


def input_blocks(checked: Checked, shapes: tuple[tuple[int, ...], ...], hosted: tuple[int, ...]) -> list[InputBlock]:
    """(parameter, device, its block's index, the layout it is laid out in) for
    every hosted device of each parameter's mesh, for inputs of these `shapes`."""

    def work() -> list[InputBlock]:
        out: list[InputBlock] = []
        for p, shape in zip(checked.func.params, shapes):
            out += [(p.name, d, block_index(p.type, d, shape) + (Ellipsis,), p.type.layout)
                    for d in hosted if d in p.type.mesh]
        return out

    return _BLOCKS.get(checked, (shapes, hosted), work)


_BLOCKS: Memo[list[InputBlock]] = Memo()
