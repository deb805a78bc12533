"""What the mutants patch with: the pieces several families share.

The MPI transport's rules and module (only under an MPI launch: a plain run
never loads mpi4py), the mesh axis a 2-D mix-up picks, the team lookup's
patch point, a buffer's memory read as if it were row-major, and the gpu backend's
plans and kernels forgotten around a mutant of its kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

import numpy as np

import interp.spmd
import interp.transport
import refir.lowering.teams
from refir.ir import ops
from refir.ir.program import Sym
from refir.ir.types import TensorType, parts_of
from refir.lowering.lower import Step
from refir.lowering.teams import Team
from refir.world.ranks import launched_by_mpi

OTHER = {"DIDx": "DIDy", "DIDy": "DIDx", "DIDz": "DIDz"}  # the mesh axis a 2-D mix-up picks
TeamsOf = Callable[[ops.Communication, TensorType, TensorType], list[Team]]


def mpi_rules() -> dict:
    """The MPI transport's rules under an MPI launch (patched alike), else none:
    a plain run never loads mpi4py."""
    if not launched_by_mpi():
        return {}
    from interp.mpi.transport import MPI_RULES

    return MPI_RULES


def mpi_module() -> Any:
    """interp.mpi.transport under an MPI launch, else None (a plain run never loads mpi4py)."""
    if not launched_by_mpi():
        return None
    import interp.mpi.transport

    return interp.mpi.transport


def even(*types: TensorType) -> bool:
    """Whether every sharded axis of these (resolved) types cuts into equal blocks."""
    return all(isinstance(a.extent, int) and a.extent % parts_of(t.mesh, a) == 0
               for t in types for a in t.axes if a.shard)


def as_row_major(x: np.ndarray) -> np.ndarray:
    """x's memory, in memory order, read as if it were a row-major buffer."""
    ascending = x[tuple(slice(None, None, -1) if s < 0 else slice(None) for s in x.strides)]
    order = sorted(range(x.ndim), key=lambda a: (-abs(x.strides[a]), a))
    return np.ascontiguousarray(np.transpose(ascending, order)).reshape(x.shape)


def patch_teams(stack: ExitStack, change: Callable[..., list[Team]]) -> None:
    """Route every team lookup through `change(op, src, dst, original_teams)`."""
    original = refir.lowering.teams.teams

    def teams(op: ops.Communication, src: object, dst: object) -> list[Team]:
        return change(op, src, dst, original)

    # The in-process transport imported the name; the MPI one looks it up in refir.lowering.teams.
    stack.enter_context(mock.patch.object(refir.lowering.teams, "teams", teams))
    stack.enter_context(mock.patch.object(interp.transport, "teams", teams))


@contextmanager
def sharded_symbols_from_blocks(guess: Callable[[TensorType, Any, int], int]) -> Iterator[None]:
    """Symbol operands of a sharded axis taken from the first local block that
    carries them, as `guess(type, axis, local extent)`, instead of the global value."""
    operands = interp.spmd.operand_values

    def operand_values(step: Step, device: int, env: dict, types: dict, known: dict) -> tuple[list, dict]:
        values, bound = operands(step, device, env, types, known)
        guessed: dict[str, int] = {}
        for a in step.tensor_args():
            for axis, n in zip(types[a].axes, env[a][device].shape):
                if isinstance(axis.extent, str) and axis.shard:
                    guessed.setdefault(axis.extent, guess(types[a], axis, n))
        return [guessed.get(a.name, v) if isinstance(a, Sym) else v for a, v in zip(step.args, values)], bound

    with mock.patch.object(interp.spmd, "operand_values", operand_values):
        yield


@contextmanager
def fresh_kernels(*built: Any) -> Iterator[None]:
    """The gpu backend's plans and kept launches forgotten, and these cached kernel
    builders cleared, before and after the block: nothing made with the right piece
    runs under a mutant's wrong one, nor the reverse after it."""
    from gpu_backend.kernels import forget_plans

    def forget() -> None:
        for make in built:
            make.cache_clear()
        forget_plans()

    forget()
    try:
        yield
    finally:
        forget()
