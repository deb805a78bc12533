"""What a run works out before any device is handed anything: the program
verified and lowered (once per program), the inputs made numpy arrays, bound
and checked against refir's limits (once per program and input signature)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from refir.checks.footprint import EVERY, RunKind, check_run_memory
from refir.checks.limits import RUN_BYTES, check_shape
from refir.checks.rules_reshape import check_bound, check_quotients
from refir.checks.rules_window import check_select_bounds
from refir.checks.verifier import Checked, verify
from refir.ir.program import Program
from refir.ir.program_cache import Memo, shape_signature
from refir.ir.types import global_shape
from refir.lowering.lower import Lowered, lower
from refir.running.bindings import bind_inputs
from refir.running.input_arrays import host_array
from refir.world.ranks import mpi_world


def host_arrays(inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    return {name: host_array(name, x) for name, x in inputs.items()}


def bind_and_check(checked: Checked, inputs: dict[str, np.ndarray], kind: RunKind = EVERY) -> dict[str, int]:
    """The inputs' bindings, every value's global shape within refir's limits,
    and the run's memory, summed over every device, within REFIR_MAX_RUN_BYTES
    for the run's backend (`kind`; refir.checks.footprint; worked out once per program
    and input shapes: refir.ir.program_cache)."""
    signature = shape_signature(inputs)

    def work() -> dict[str, int]:
        bindings = bind_inputs(checked, inputs)
        check_quotients(checked, bindings)  # type_c9, naming the equation, before any extent is worked out
        check_select_bounds(checked.func, checked.types, bindings)  # select_c3
        check_bound(checked, bindings)  # what the verifier left to the bindings (reshape_c2, reshape_c4)
        for name, t in checked.types.items():  # intermediates too, before any is allocated
            check_shape(global_shape(t, bindings), f"{name}: {t}")
        return bindings

    bindings = work() if signature is None else dict(_BOUND.get(checked, signature, work))  # a copy: the caller's
    check_memory(checked, bindings, kind)
    return bindings


_BOUND: Memo[dict[str, int]] = Memo()


def check_memory(checked: Checked, bindings: dict[str, int], kind: RunKind = EVERY) -> None:
    """The run's memory, summed over every device, within REFIR_MAX_RUN_BYTES
    (refir.checks.footprint, memory_c1): what `kind`'s backend holds (EVERY: the most
    any backend does), from the program, the bindings and the run's options
    alone, so that every MPI rank decides alike, before any input is drawn or
    any block allocated (once per program, bindings and kind)."""
    mpi = mpi_world() is not None  # the same on every rank of a job
    key = (RUN_BYTES.value, mpi, kind, tuple(sorted(bindings.items())))  # a limit raised or lowered since: afresh
    _MEMORY.get(checked, key, lambda: check_run_memory(lowered_of(checked), bindings, mpi, kind))


_MEMORY: Memo[object] = Memo()


# Programs are immutable: a program run again (refir.run in a loop) is verified
# and lowered once. Keyed by identity; each entry keeps its program alive.
_KEPT: OrderedDict[tuple[int, str | None], tuple[Program, Checked]] = OrderedDict()
_LOWERED: dict[int, tuple[Checked, Lowered]] = {}


def verified(program: Program, func: str | None) -> Checked:
    key = (id(program), func)
    if key not in _KEPT:
        _KEPT[key] = (program, verify(program, func))
        while len(_KEPT) > 16:
            _, (_, gone) = _KEPT.popitem(last=False)
            _LOWERED.pop(id(gone), None)
    _KEPT.move_to_end(key)
    return _KEPT[key][1]


def lowered_of(checked: Checked) -> Lowered:
    if id(checked) not in _LOWERED:
        _LOWERED[id(checked)] = (checked, lower(checked))
    return _LOWERED[id(checked)][1]
