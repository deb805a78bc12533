"""Everything a backend of your own is written against, in one module.

`python -m refir conform --backend mypkg.mine:run` (and `refir.run(prog,
inputs, backend="mypkg.mine:run")`) imports `mypkg.mine` and calls

    run(lowered: Lowered, inputs: Shards, scalars: dict[str, int], world: World) -> Shards

Import these names from here, not from the modules that define them today:
those may move, and this module keeps the names working.

- `Lowered`: the per-device program. `.segments` (each a `Segment`),
  `.types` (every value's `TensorType`, intermediates included), `.results`
  (the names to return) and `.source(result)` (the lowered value holding a
  result: a returned parameter is held by a copy, e.g. `x~1`).
- `Segment`: `.index`, `.kind` ("compute" or "communication"),
  `.steps` (each a `Step`), `.inputs`, `.outputs`, `.scalars` (symbols used
  as values), `.extents` (global extents it must be handed).
- `Step`: `.out` (the value it makes), `.op` (an instance of a class in `ops`:
  `Binary(name)`, `Unary(name)`, `Compare(name)` (to bool), `Where()`,
  `Iota(axis)` (its args are the result's global extents: each device makes
  the global indices of its own block), `Cast(dtype)`, `Permute(perm)`,
  `Unsqueeze(dims)`, `Reduction(kind, dims)`, `Matmul()`, `Reshape(shape)` (its
  `Sym` operands are its shape's symbols; on a device the result is the block
  `local_shape(step.type, ...)` gives: `interp.spmd.reshape_block`), `KeepBlock()`, `Copy()`,
  or a communication such as `Allgather`), `.args` (each a `Var(name)`, a
  `Sym(name)` or a `Lit(value)`), `.type` (the result's `TensorType`),
  `.is_communication`, `.tensor_args()` (the names of its tensor operands).
- `TensorType`: `.dtype` ("f32", ...), `.np_dtype`, `.axes`, `.mesh` (device
  ids: `d in t.mesh`), `.order` (the memory order, outermost axis first).
- `Shards`: `{value name: {device: numpy array}}`, each device's own block.
- `World`: `.size`, `.hosted` (the devices this process runs), `.comm` (None
  in one process; the MPI communicator to use under mpiexec).

And the pieces of refir's own numpy backend, to wrap or to reuse in part:
`run_spmd` (the whole backend), `reference_step` (one local step on one
device), `laid_out` (an array copied dense into a type's layout) and
`Communications` (refir's transports: in one process, or MPI).
"""

from __future__ import annotations

from types import TracebackType

import numpy as np

from interp.backend import run_spmd, transport_for
from interp.spmd import NumpyLocal, NumpyTransport
from refir.ir import ops
from refir.ir.program import Lit, Sym, Var
from refir.ir.types import TensorType, materialize, resolved
from refir.lowering.lower import Lowered, Segment, Step
from refir.world.backend_types import Backend, Shards
from refir.world.ranks import World

__all__ = ["Backend", "Communications", "Lit", "Lowered", "Segment", "Shards", "Step", "Sym", "TensorType", "Var",
           "World", "laid_out", "ops", "reference_step", "run_spmd"]


def reference_step(lowered: Lowered, step: Step, device: int, args: list[object]) -> np.ndarray:
    """refir's meaning of the local step `step` on `device`: `args` are its
    operands in order (numpy arrays for `Var`s, numbers for `Sym`s and `Lit`s);
    the result is a fresh array of the step's local shape, dense in its layout."""
    return NumpyLocal(lowered.types)(step, device, args)


def laid_out(x: np.ndarray, t: TensorType) -> np.ndarray:
    """A fresh copy of `x` in `t`'s dtype, dense in `t`'s layout (what every
    returned buffer must be)."""
    return materialize(np.asarray(x).astype(t.np_dtype, copy=False), t.order)


class Communications:
    """refir's transports for the communication steps of a backend's own loop:

        with Communications(world) as comm:
            env[step.out] = comm.run(lowered, step, env[src], scalars)

    In one process (`world.comm` is None) every hosted device's buffers go in
    and come out; under MPI, this rank's."""

    def __init__(self, world: World) -> None:
        self._inner = transport_for(world)
        self._numpy = NumpyTransport(self._inner)

    def run(self, lowered: Lowered, step: Step, buffers: dict[int, np.ndarray],
            scalars: dict[str, int]) -> dict[int, np.ndarray]:
        """The receivers' buffers of communication `step`, given the senders'
        (`buffers`: device -> block of the step's one tensor operand)."""
        (src,) = step.tensor_args()
        return self._numpy.communicate(step.op, resolved(lowered.types[src], scalars), resolved(step.type, scalars),
                                       buffers)

    def close(self) -> None:
        self._inner.close()

    def __enter__(self) -> Communications:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
