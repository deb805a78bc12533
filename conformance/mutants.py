"""Deliberate backend bugs, injected at run time into the spmd backend.

Each mutant is a context manager that patches one piece the spmd backend is
made of (a collective rule, a compute impl, the team helper, the per-device
loop) and restores it on exit; nothing is ever edited on disk. The suite must
kill every one: some check of the comparator must fail on some case. Under
MPI every rank applies the same patch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Any
from unittest import mock

import numpy as np

import interp.backend
import interp.collectives
import interp.impls
import interp.spmd
import interp.transport
import refir.lowering.teams
from refir.ir import ops
from refir.ir.program import Sym
from refir.ir.types import TensorType, block_size, has_layout, local_shape
from refir.lowering.lower import Lowered, Step
from refir.lowering.teams import Team
from refir.world.backend_types import Shards
from refir.world.ranks import World, launched_by_mpi


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str
    by: str  # the check meant to kill it: a mutant that merely crashes is not killed
    inject: Callable[[], AbstractContextManager]
    backend: str = "spmd"  # the backend it breaks
    transport: str = "any"  # the transport it breaks: any, in-process or mpi (shows only with a rank per process)
    needs: tuple[type, ...] = ()  # lowered ops a case must have to show it (cases without are skipped)
    reference: bool = False  # it breaks the impls the global reference runs on: its reference is made with it


MUTANTS: list[Mutant] = []
OTHER = {"DIDx": "DIDy", "DIDy": "DIDx", "DIDz": "DIDz"}  # the mesh axis a 2-D mix-up picks
TeamsOf = Callable[[ops.Communication, TensorType, TensorType], list[Team]]


def mutant(bug: str, by: str, backend: str = "spmd", transport: str = "any", needs: tuple[type, ...] = (),
           reference: bool = False) -> Callable[[Callable[[], Iterator[None]]], Callable[[], Iterator[None]]]:
    def register(fn: Callable[[], Iterator[None]]) -> Callable[[], Iterator[None]]:
        MUTANTS.append(Mutant(fn.__name__, bug, by, contextmanager(fn), backend, transport, needs, reference))
        return fn

    return register


def _mpi_rules() -> dict:
    """The MPI transport's rules under an MPI launch (patched alike), else none:
    a plain run never loads mpi4py."""
    if not launched_by_mpi():
        return {}
    from interp.mpi_transport import MPI_RULES

    return MPI_RULES


def _even(*types: TensorType) -> bool:
    """Whether every sharded axis of these (resolved) types cuts into equal blocks."""
    return all(isinstance(a.extent, int) and a.extent % t.mesh.size(a.shard) == 0
               for t in types for a in t.axes if a.shard)


def as_row_major(x: np.ndarray) -> np.ndarray:
    """x's memory, in memory order, read as if it were a row-major buffer."""
    ascending = x[tuple(slice(None, None, -1) if s < 0 else slice(None) for s in x.strides)]
    order = sorted(range(x.ndim), key=lambda a: (-abs(x.strides[a]), a))
    return np.ascontiguousarray(np.transpose(ascending, order)).reshape(x.shape)


def _patch_teams(stack: ExitStack, change: Callable[..., list[Team]]) -> None:
    """Route every team lookup through `change(op, src, dst, original_teams)`."""
    original = refir.lowering.teams.teams

    def teams(op: ops.Communication, src: object, dst: object) -> list[Team]:
        return change(op, src, dst, original)

    # The in-process transport imported the name; the MPI one looks it up in refir.lowering.teams.
    stack.enter_context(mock.patch.object(refir.lowering.teams, "teams", teams))
    stack.enter_context(mock.patch.object(interp.transport, "teams", teams))


def _reading(rule: Callable[..., Any], fix: Callable[[np.ndarray], np.ndarray]) -> Callable[..., Any]:
    """An exchange rule that first passes every sender's block through `fix`."""

    def wrapped(op: object, team: Team, x: dict[int, np.ndarray], *rest: Any) -> Any:
        return rule(op, team, {d: fix(b) for d, b in x.items()}, *rest)

    return wrapped


def _mpi_reading(rule: Callable[..., Any], fix: Callable[[np.ndarray], np.ndarray]) -> Callable[..., Any]:
    """An MPI rule that first passes this rank's block (if it sends one) through `fix`."""

    def wrapped(t: object, op: object, team: Team, x: np.ndarray | None, *rest: Any) -> Any:
        return rule(t, op, team, None if x is None else fix(x), *rest)

    return wrapped


@mutant("communications read a strided buffer as if it were row-major", by="values")
def strided_comm_as_row_major() -> Iterator[None]:
    rules, mpi = interp.collectives.EXCHANGES, _mpi_rules()
    with mock.patch.dict(rules, {c: _reading(r, as_row_major) for c, r in rules.items()}), \
            mock.patch.dict(mpi, {c: _mpi_reading(r, as_row_major) for c, r in mpi.items()}):
        yield


@mutant("a segment re-binds an input's symbols from its type before the reduction that made it (nvFuser #2481)",
        by="isolation")
def reduced_axis_symbol() -> Iterator[None]:
    run, operands = interp.backend.run_spmd, interp.spmd.operand_values

    def run_spmd(lowered: Lowered, inputs: Shards, scalars: dict[str, int], world: World) -> Shards:
        made_by = {e.out: e for e in lowered.checked.func.eqns}
        types = lowered.checked.types

        def operand_values(step: Step, device: int, env: dict, types_: dict, known: dict) -> tuple[list, dict]:
            values, bound = operands(step, device, env, types_, known)
            for a in step.tensor_args():
                e = made_by.get(a.split("~")[0])
                if e is not None and isinstance(e.op, (ops.Reduction, ops.Matmul)):
                    for s in sorted(s for x in e.tensor_args() for s in types[x].symbols()):
                        if s not in bound:
                            bound[s] = scalars[s]
            return values, bound

        with mock.patch.object(interp.spmd, "operand_values", operand_values):
            return run(lowered, inputs, scalars, world)

    with mock.patch.object(interp.backend, "run_spmd", run_spmd):
        yield


@mutant("the teams of a collective along a mesh axis list their devices in sorted order, not in mesh order",
        by="values")
def teams_sorted() -> Iterator[None]:
    def change(op: ops.Communication, src: TensorType, dst: TensorType, original: TeamsOf) -> list[Team]:
        # Teams with a root (gather, scatter, broadcast, send_recv), and teams moving uneven
        # blocks, keep their order: reordering them breaks the MPI transport's protocol on some
        # ranks only (block sizes follow the types), a hang rather than a bug.
        if not _even(src, dst):
            return original(op, src, dst)
        return [Team(*(tuple(sorted(t.devices)),) * 3) if t.senders == t.receivers == t.devices else t
                for t in original(op, src, dst)]

    with ExitStack() as stack:
        _patch_teams(stack, change)
        yield


@mutant("a reduction on a 2-D mesh reduces over the other mesh axis", by="values")
def reduction_wrong_mesh_axis() -> Iterator[None]:
    def change(op: ops.Communication, src: TensorType, dst: TensorType, original: TeamsOf) -> list[Team]:
        if not _even(src, dst):  # as in teams_sorted: uneven blocks in the wrong team would hang MPI
            return original(op, src, dst)
        if src.mesh.ndim >= 2 and isinstance(op, ops.Allreduce):
            op = ops.Allreduce(op.kind, tuple(OTHER[k] for k in op.mesh_axes))
        elif src.mesh.ndim >= 2 and isinstance(op, ops.ReduceScatter):
            op = ops.ReduceScatter(op.kind, OTHER[op.mesh_axis], op.axis)
        return original(op, src, dst)

    with ExitStack() as stack:
        _patch_teams(stack, change)
        yield


@mutant("a permute writes its result row-major, whatever its layout", by="strides")
def permute_row_major() -> Iterator[None]:
    call = interp.spmd.NumpyLocal.__call__

    def local(self: interp.spmd.NumpyLocal, step: Step, device: int, args: list) -> np.ndarray:
        out = call(self, step, device, args)
        return np.array(out, order="C") if isinstance(step.op, ops.Permute) else out

    with mock.patch.object(interp.spmd.NumpyLocal, "__call__", local):
        yield


@mutant("max drops NaN (fmax), locally and across devices", by="values")
def max_drops_nan() -> Iterator[None]:
    reduction = interp.impls.IMPLS[ops.Reduction]

    def impl(op: ops.Reduction, x: np.ndarray) -> np.ndarray:
        if op.kind != "max":
            return reduction(op, x)
        return np.asarray(np.fmax.reduce(x, axis=op.dims, initial=interp.impls.identity("max", x.dtype)))

    with mock.patch.dict(interp.impls.IMPLS, {ops.Reduction: impl}), \
            mock.patch.dict(interp.impls.COMBINE, {"max": np.fmax}):
        yield


@mutant("an allgather concatenates blocks in rank order, not in mesh order", by="values")
def allgather_rank_order() -> Iterator[None]:
    original = interp.collectives.EXCHANGES[ops.Allgather]

    def local(op: object, team: Team, x: dict, *rest: Any) -> Any:
        ranked = Team(team.devices, tuple(sorted(team.senders)), team.receivers)
        return original(op, ranked, x, *rest)

    mpi = _mpi_rules()
    patches = {}
    if ops.Allgather in mpi:
        def remote(t: Any, op: Any, team: Team, x: np.ndarray, src: TensorType, *rest: Any) -> np.ndarray:
            shapes = [local_shape(src, {}, d) for d in team.devices]
            blocks = t.allgather(t.team_comm(team.devices), x, op.axis, shapes)
            return np.concatenate([blocks[team.index(d)] for d in sorted(team.devices)], axis=op.axis)
        patches = {ops.Allgather: remote}
    with mock.patch.dict(interp.collectives.EXCHANGES, {ops.Allgather: local}), mock.patch.dict(mpi, patches):
        yield


@mutant("a kernel writes its result into its input buffer", by="inputs")
def kernel_writes_input() -> Iterator[None]:
    unary = interp.impls.IMPLS[ops.Unary]

    def impl(op: ops.Unary, x: np.ndarray) -> np.ndarray:
        out = unary(op, x)
        if isinstance(x, np.ndarray) and x.flags.writeable and x.shape == out.shape:
            x[...] = out
            return x
        return out

    with mock.patch.dict(interp.impls.IMPLS, {ops.Unary: impl}):
        yield


@mutant("a symbol used as a value is a device's local extent, not the global one (nvFuser #2758)", by="values")
def local_extent_symbol() -> Iterator[None]:
    with _sharded_symbols_from_blocks(lambda t, axis, n: n):
        yield


@contextmanager
def _sharded_symbols_from_blocks(guess: Callable[[TensorType, Any, int], int]) -> Iterator[None]:
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


@mutant("a communication leaves its result row-major, whatever its layout", by="strides")
def comm_result_row_major() -> Iterator[None]:
    def communicate(self: interp.spmd.NumpyTransport, op: ops.Communication, src: TensorType, dst: TensorType,
                    buffers: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        return {d: np.array(x, order="C") for d, x in self.inner.communicate(op, src, dst, buffers).items()}

    with mock.patch.object(interp.spmd.NumpyTransport, "communicate", communicate):
        yield


@mutant("a local slice takes its block at the device's coordinate on the other mesh axis", by="values")
def slice_wrong_mesh_axis() -> Iterator[None]:
    original = interp.spmd.slice_block

    def slice_block(step: Step, device: int, x: np.ndarray, src: TensorType) -> np.ndarray:
        t, right = step.type, original(step, device, x, src)
        if t.mesh.ndim < 2:
            return right
        wrong = original(replace(step, type=t.with_sharding({i: OTHER[k] for i, k in t.sharding().items()})),
                         device, x, src)
        # Only where the blocks have one shape: a short block where a long one belongs
        # fails the step on some ranks only, which under MPI is a hang rather than a bug.
        return wrong if wrong.shape == right.shape else right

    with mock.patch.object(interp.spmd, "slice_block", slice_block):
        yield


@mutant("a copy whose operand already lies in its layout hands back the operand itself", by="fresh")
def copy_elided() -> Iterator[None]:
    call = interp.spmd.NumpyLocal.__call__

    def local(self: interp.spmd.NumpyLocal, step: Step, device: int, args: list) -> np.ndarray:
        if isinstance(step.op, ops.Copy) and has_layout(args[0], step.type.order):
            return args[0]
        return call(self, step, device, args)

    with mock.patch.object(interp.spmd.NumpyLocal, "__call__", local):
        yield


# ---- uneven sharding (spec §3.1): the bug classes of issue 13 -----------------------------


def _mpi_module() -> Any:
    """interp.mpi_transport under an MPI launch, else None (a plain run never loads mpi4py)."""
    if not launched_by_mpi():
        return None
    import interp.mpi_transport

    return interp.mpi_transport


def _padded(x: np.ndarray, axis: int, extent: int) -> np.ndarray:
    """x with zeros appended along `axis` up to `extent`."""
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, extent - x.shape[axis])
    return np.pad(x, pad)


@mutant("an uneven allgather pads short blocks at the front, so padding leaks into the replicated result "
        "and the tail is lost", by="values")
def allgather_front_padding() -> Iterator[None]:
    def gathered(blocks: list[np.ndarray], axis: int, extent: int) -> np.ndarray:
        c = block_size(extent, len(blocks), 0)
        slots = [np.flip(_padded(np.flip(b, axis), axis, c), axis) for b in blocks]  # zeros, then the block
        return np.concatenate(slots, axis=axis)[(slice(None),) * axis + (slice(0, extent),)]

    def local(op: Any, team: Team, x: dict, src: TensorType, dst: TensorType, xp: Any) -> Any:
        whole = gathered([x[s] for s in team.senders], op.axis, dst.axes[op.axis].extent)
        return {r: whole for r in team.receivers}

    def remote(t: Any, op: Any, team: Team, x: np.ndarray, src: TensorType, dst: TensorType) -> np.ndarray:
        shapes = [local_shape(src, {}, d) for d in team.devices]
        return gathered(t.allgather(t.team_comm(team.devices), x, op.axis, shapes), op.axis, dst.axes[op.axis].extent)

    mpi = _mpi_rules()
    with mock.patch.dict(interp.collectives.EXCHANGES, {ops.Allgather: local}), \
            mock.patch.dict(mpi, {ops.Allgather: remote} if mpi else {}):
        yield


def _own_size_offsets(x: np.ndarray, n: int, axis: int) -> list[np.ndarray]:
    """Blocks of the right sizes at the wrong places: block k starts at k times its
    own size, so a short last block reads from the middle of the axis."""
    out = []
    for k in range(n):
        size = block_size(x.shape[axis], n, k)
        out.append(x[(slice(None),) * axis + (slice(k * size, (k + 1) * size),)])
    return out


@mutant("a short block's offset is its device index times its own size, not times ceil(E/n)", by="values")
def block_offset_from_own_size() -> Iterator[None]:
    def slice_block(step: Step, device: int, x: np.ndarray, src: TensorType) -> np.ndarray:
        index = []
        for i, a in enumerate(step.type.axes):
            if a.shard and not src.axes[i].shard:
                k = step.type.mesh.coord(device, a.shard)
                size = block_size(x.shape[i], step.type.mesh.size(a.shard), k)
                index.append(slice(k * size, (k + 1) * size))
            else:
                index.append(slice(None))
        return x[tuple(index)]

    mpi = _mpi_module()
    with mock.patch.object(interp.spmd, "slice_block", slice_block), \
            mock.patch.object(interp.collectives, "split", _own_size_offsets), \
            (mock.patch.object(mpi, "split", _own_size_offsets) if mpi else ExitStack()):
        yield


@mutant("a device whose block is empty contributes zeros to a reduction, not the identity", by="values")
def empty_block_partial_zero() -> Iterator[None]:
    reduction = interp.impls.IMPLS[ops.Reduction]

    def impl(op: ops.Reduction, x: np.ndarray) -> np.ndarray:
        out = reduction(op, x)
        if any(x.shape[d] == 0 for d in op.dims):
            return np.zeros_like(out)
        return out

    with mock.patch.dict(interp.impls.IMPLS, {ops.Reduction: impl}):
        yield


@mutant("an uneven all_to_all cuts its pieces as np.array_split does (the remainder spread over the first)",
        by="strides")
def all_to_all_array_split() -> Iterator[None]:
    def pieces(x: np.ndarray, n: int, axis: int) -> list[np.ndarray]:
        return np.array_split(x, n, axis=axis)

    def local(op: Any, team: Team, x: dict, src: TensorType, dst: TensorType, xp: Any) -> Any:
        cut = {s: pieces(x[s], len(team.devices), op.split_axis) for s in team.senders}
        return {r: np.concatenate([cut[s][team.index(r)] for s in team.senders], op.concat_axis)
                for r in team.receivers}

    def remote(t: Any, op: Any, team: Team, x: np.ndarray, src: TensorType, dst: TensorType) -> np.ndarray:
        # Pieces travel as Python objects, so the wrong sizes cannot break MPI's
        # protocol (a hang); they show in the result's shape.
        comm = t.team_comm(team.devices)
        return np.concatenate(comm.alltoall(pieces(x, comm.size, op.split_axis)), axis=op.concat_axis)

    mpi = _mpi_rules()
    with mock.patch.dict(interp.collectives.EXCHANGES, {ops.AllToAll: local}), \
            mock.patch.dict(mpi, {ops.AllToAll: remote} if mpi else {}):
        yield


@mutant("a segment recovers a sharded symbol from its local block as local size x mesh size", by="values")
def extent_from_local_block() -> Iterator[None]:
    with _sharded_symbols_from_blocks(lambda t, axis, n: n * t.mesh.size(axis.shard)):
        yield


# Mutants kept in modules of their own register themselves into MUTANTS on import:
# importing this module is enough to see every one.
from conformance import data_mutants, hidden_mutants, mpi_mutants, numeric_mutants, reshape_mutants  # noqa: E402, F401
