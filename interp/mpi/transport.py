"""One rank per MPI process, through mpi4py.

Every buffer crosses MPI as the bytes of its elements in C order with the
communicated axis moved to the front (mpi4py reads an F-ordered array as raw
memory, and has no float16). A strided buffer is laid out so by one copy, where
it is needed anyway: an allgather copies this rank's block into its place in the
gathered result (tiled, interp/mpi/host_copy.py, where the layout changes) and
gathers the others in place; all_to_all and reduce_scatter send their pieces
from the array's own memory where they lie one after another, else pack them by
one copy, and receive them side by side. Past 64 KiB per rank, where a team's
members share a node, an all_to_all and an allgather of a strided block pack or
transpose straight into the team's shared-memory window instead, and copy out
(a reduce_scatter folds its block straight out of the others' segments;
interp/mpi/shared_windows.py): the packing is then the copy MPI would make anyway;
past 256 KiB a block or piece, results lie in shared memory the other members
map: an allgather's blocks (where every member has a core) stay in their
owners' results and are read from there, and an all_to_all's pieces are
written straight from their senders' buffers into their receivers' results
(no packing, no copy out). MPI
datatypes that walk the strides were measured several times slower than these
copies (MPICH 4-5, 2-core EPYC; a vector type for 4 MiB all_to_all pieces: 24-60
ms against 2-8 for the contiguous call, 2026-12-01). Reductions never use MPI's own: partials are gathered and
folded in team order, so the bits equal the in-process transport's. Every wait
is a polite, bounded poll: four ranks on two cores would otherwise busy-spin
each other.

allgather, allreduce, reduce_scatter and all_to_all, of equal or uneven
blocks, are planned once per (op, type, team, rank) (interp/mpi/plans.py):
a call goes from `communicate` straight to its plan while the op's rule and
refir.lowering.teams.teams are the ones it was planned under (conformance mutants
replace either; the call then takes the rules, which use the same plans).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import prod

import numpy as np
from mpi4py import MPI

from interp.collectives import block_index, split
from interp.impls import fold
from interp.mpi import all_to_all  # noqa: F401 - its import registers the all_to_all plans
from interp.mpi.host_copy import copy_into
from interp.mpi.layout import block_shapes, displacements, moved_first
from interp.mpi.plans import PLANS, planned
from interp.mpi.run_exchange import runs_plan
from interp.sentinel import empty_bytes
from interp.transport import rank_part
from refir.errors import RunError
from refir.ir import ops
from refir.ir.tables import registrar
from refir.ir.types import SHARD_C1, TensorType, local_shape
from refir.lowering import teams as team_forming
from refir.lowering.run_exchange import of_runs
from refir.lowering.teams import Team, teams_of
from refir.world.mpi_job import COMMS, fault, wait

HEADER_TAG, DATA_TAG = 11, 12  # point-to-point: a block's shape, then its bytes


def to_bytes(x: np.ndarray, axis: int = 0) -> np.ndarray:
    front = moved_first(x, axis)
    return np.ascontiguousarray(front).reshape(-1).view(np.uint8)


def pack_into(buf: np.ndarray, x: np.ndarray, axis: int = 0) -> None:
    """x's elements in C order with `axis` first (to_bytes's bytes), written into
    the byte buffer `buf`: one copy, tiled where it changes the layout."""
    front = moved_first(x, axis)
    copy_into(buf.view(x.dtype).reshape(front.shape), front)


def from_bytes(buf: np.ndarray, shape: tuple[int, ...], dtype: np.dtype, axis: int = 0) -> np.ndarray:
    """Bytes of a C-contiguous array whose `axis` was moved to the front."""
    if not shape:
        return buf.view(dtype).reshape(())
    front = (shape[axis],) + shape[:axis] + shape[axis + 1:]
    whole = buf.view(dtype).reshape(front)
    back = (*range(1, axis + 1), 0, *range(axis + 1, len(shape)))  # the inverse of axis_first's order
    return whole if axis == 0 else whole.transpose(back)


@dataclass(frozen=True, slots=True)
class _Call:
    """One communication as this rank makes it: the objects it was worked out
    for (kept, so that their ids stay theirs; matched by identity), the rule and
    team forming then in force (conformance mutants replace either), and the
    plan where one serves (with the team it runs in)."""
    op: ops.Communication
    src: TensorType
    dst: TensorType
    rule: Callable[..., object]
    form: Callable[..., object]
    devices: tuple[int, ...]
    run: Callable[[MPI.Comm, np.ndarray], np.ndarray] | None
    block: tuple[int, ...] | None  # the shape this rank's block has by src (None: it holds none)

    def serves(self, op: ops.Communication, src: TensorType, dst: TensorType, rule: Callable[..., object]) -> bool:
        return self.op is op and self.src is src and self.dst is dst and self.rule is rule \
            and self.form is team_forming.teams


class MpiTransport:
    """Communications of this process's rank, on the process's communicators
    (refir.world.mpi_job.COMMS: made once per team, kept for every later run)."""

    def __init__(self) -> None:
        self.comm = COMMS.world()
        self.rank = self.comm.rank
        self.hosted = (self.rank,)
        self.calls: dict[tuple[int, int, int], _Call] = {}

    def team_comm(self, devices: tuple[int, ...]) -> MPI.Comm:
        """A communicator whose ranks are the team's devices in team order."""
        return COMMS.team(devices)

    def close(self) -> None:
        """Nothing to release: communicators outlive runs (refir.close() frees them)."""

    def communicate(self, op: ops.Communication, src: TensorType, dst: TensorType,
                    buffers: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        fault("collective")
        rule = MPI_RULES[type(op)]
        call = self.calls.get((id(op), id(src), id(dst)))
        if call is None or not call.serves(op, src, dst, rule):
            call = self._call(op, src, dst, rule)
        x = buffers.get(self.rank)
        if x is not None and x.shape != call.block:
            raise RunError(self._refused(op, src, x, call.block))
        if call.run is not None:  # a planned collective under its own rule: straight to the plan
            return {self.rank: call.run(self.team_comm(call.devices), x)}
        return rank_part(self.rank, op, src, dst, buffers, lambda team, x: rule(self, op, team, x, src, dst))

    def _call(self, op: ops.Communication, src: TensorType, dst: TensorType, rule: Rule) -> _Call:
        """How this rank makes the communication, kept for its next calls."""
        mine = teams_of(self.rank, op, src, dst)
        run = None
        if rule is PLANNED_RULES.get(type(op)) and len(mine) == 1 and self.rank in mine[0].senders \
                and self.rank in mine[0].receivers:
            run = _planned(op, src, dst, mine[0], self.rank)
        block = local_shape(src, {}, self.rank) if self.rank in src.mesh else None
        call = _Call(op, src, dst, rule, team_forming.teams, mine[0].devices if run else (), run, block)
        if len(self.calls) >= 256:  # a long-lived process runs many programs
            self.calls.clear()
        self.calls[(id(op), id(src), id(dst))] = call
        return call

    def _refused(self, op: ops.Communication, src: TensorType, x: np.ndarray, want: tuple[int, ...] | None) -> str:
        """Why this rank sends nothing: every peer sizes what it receives from
        the types, so a block of another size would leave them waiting for
        bytes that never come (or overrun their buffers)."""
        if want is None:
            return f"rank {self.rank}: {ops.op_name(op)} is handed a block, and {src} gives this rank none [{SHARD_C1}]"
        size = prod(want) * x.dtype.itemsize
        return (f"rank {self.rank}: {ops.op_name(op)} refuses a block of shape {x.shape} ({x.nbytes} bytes): "
                f"{src} gives this rank {want} ({size} bytes), which its peers expect [{SHARD_C1}]")

    # ---- building blocks ---------------------------------------------------------------

    def send_shape(self, shape: tuple[int, ...], dest: int) -> None:
        """Tell a point-to-point receiver, who may know no symbol, what it gets."""
        wait(self.comm.Isend(np.array(shape, np.int64), dest=dest, tag=HEADER_TAG), "a shape header")

    def recv_shape(self, source: int, rank: int) -> tuple[int, ...]:
        header = np.empty(rank, np.int64)
        req = self.comm.Irecv(header, source=source, tag=HEADER_TAG)
        self.received(req, header, f"a shape header from rank {source}")
        return tuple(int(n) for n in header)

    def received(self, req: MPI.Request, buf: np.ndarray, what: str) -> None:
        """Wait for a point-to-point receive into `buf`, sized from the types,
        and refuse a message of another length (a longer one MPI refuses
        itself, as truncated): its status says, no extra round."""
        status = MPI.Status()
        wait(req, what, status)
        if (got := status.Get_count(MPI.BYTE)) != buf.nbytes:
            raise RunError(f"rank {self.rank}: {what} brought {got} bytes, where the types give {buf.nbytes}")

    def shape_from(self, comm: MPI.Comm, root: int, x: np.ndarray | None, rank: int) -> tuple[int, ...]:
        """The shape of the root's buffer, for members that hold none."""
        header = np.array(x.shape if x is not None else [0] * rank, np.int64)
        wait(comm.Ibcast(header, root=root), "a shape header")
        return tuple(int(n) for n in header)

    def allgather(self, comm: MPI.Comm, x: np.ndarray, axis: int,
                  shapes: Sequence[tuple[int, ...]] | None = None) -> list[np.ndarray]:
        """Every member's block on every member; `shapes` gives each member's
        block shape where they differ (uneven blocks: MPI's v-variant)."""
        shapes = shapes or [x.shape] * comm.size
        counts = [prod(s) * x.dtype.itemsize for s in shapes]
        recv = self._own_block_in_place(comm, x, axis, counts)
        if len(set(counts)) == 1:  # equal blocks (every rank sees the same counts): the plain collective
            wait(comm.Iallgather(MPI.IN_PLACE, [recv, counts[0], MPI.BYTE]), "an allgather")
        else:
            wait(comm.Iallgatherv(MPI.IN_PLACE, [recv, counts, displacements(counts), MPI.BYTE]), "an allgather")
        return [from_bytes(p, s, x.dtype, axis) for p, s in zip(_cut(recv, counts), shapes)]

    @staticmethod
    def _own_block_in_place(comm: MPI.Comm, x: np.ndarray, axis: int, counts: list[int]) -> np.ndarray:
        """The bytes an allgather receives into, this rank's block already in its
        place (laid out there by one copy, the one MPI itself would make from a
        contiguous send buffer), so that the others' blocks come in place."""
        recv = empty_bytes(sum(counts), x.dtype)
        start = sum(counts[:comm.rank])
        pack_into(recv[start:start + counts[comm.rank]], x, axis)
        return recv

    def gather_to(self, comm: MPI.Comm, root: int, x: np.ndarray | None, shapes: Sequence[tuple[int, ...]],
                  dtype: np.dtype) -> list[np.ndarray]:
        """Blocks of the first len(shapes) team ranks (of those shapes), on team rank `root`."""
        counts = [prod(shapes[i]) * dtype.itemsize if i < len(shapes) else 0 for i in range(comm.size)]
        send = to_bytes(x) if x is not None else np.empty(0, np.uint8)
        recv = empty_bytes(sum(counts), dtype) if comm.rank == root else None
        spec = [recv, counts, displacements(counts), MPI.BYTE]
        wait(comm.Igatherv(send, spec if comm.rank == root else None, root=root), "a gather")
        if comm.rank != root:
            return []
        return [from_bytes(p, s, dtype) for p, s in zip(_cut(recv, counts), shapes)]


def _cut(buf: np.ndarray, counts: list[int]) -> list[np.ndarray]:
    return [buf[o:o + c] for o, c in zip(displacements(counts), counts)]


Arr = np.ndarray | None  # None where this rank sends or receives nothing
Rule = Callable[[MpiTransport, object, Team, Arr, TensorType, TensorType], Arr]
MPI_RULES: dict[type, Rule] = {}


rule = registrar(MPI_RULES)


@rule(ops.Allgather)
def _allgather(t: MpiTransport, op: ops.Allgather, team: Team, x: Arr, src: TensorType,
               dst: TensorType) -> Arr:
    return planned(op, src, team, t.rank)(t.team_comm(team.devices), x)  # equal or uneven blocks


@rule(ops.Allreduce)
def _allreduce(t: MpiTransport, op: ops.Allreduce, team: Team, x: Arr, src: TensorType,
               dst: TensorType) -> Arr:
    return planned(op, src, team, t.rank)(t.team_comm(team.devices), x)


@rule(ops.ReduceScatter)
def _reduce_scatter(t: MpiTransport, op: ops.ReduceScatter, team: Team, x: Arr, src: TensorType,
                    dst: TensorType) -> Arr:
    return _planned(op, src, dst, team, t.rank)(t.team_comm(team.devices), x)  # equal or uneven pieces, or runs


@rule(ops.AllToAll)
def _all_to_all(t: MpiTransport, op: ops.AllToAll, team: Team, x: Arr, src: TensorType,
                dst: TensorType) -> Arr:
    return _planned(op, src, dst, team, t.rank)(t.team_comm(team.devices), x)  # even or uneven blocks, or runs


def _planned(op: ops.Communication, src: TensorType, dst: TensorType, team: Team, rank: int) -> Callable | None:
    """The plan of this rank's call: of runs where the op's blocks are runs
    (interp/mpi/run_exchange.py, §3.4), else the plans' registry's."""
    if isinstance(op, (ops.AllToAll, ops.ReduceScatter)) and of_runs(op, src, dst):
        return runs_plan(op, src, dst, team, rank)
    return planned(op, src, team, rank)


# The rules the plans stand for: a call whose rule is still one of these skips them.
PLANNED_RULES = {op: MPI_RULES[op] for op in PLANS}


def _gathered(t: MpiTransport, team: Team, x: Arr, src: TensorType) -> list[np.ndarray]:
    """Every receiver collects the senders' blocks (team ranks 0..senders-1)."""
    comm = t.team_comm(team.devices)
    shapes = block_shapes(src, team.senders)
    mine: list[np.ndarray] = []
    for r in team.receivers:
        got = t.gather_to(comm, team.index(r), x, shapes, src.np_dtype)
        if r == t.rank:
            mine = got
    return mine


@rule(ops.Gather)
def _gather(t: MpiTransport, op: ops.Gather, team: Team, x: Arr, src: TensorType,
            dst: TensorType) -> Arr:
    blocks = _gathered(t, team, x, src)
    return np.concatenate(blocks, axis=op.axis) if blocks else None


@rule(ops.Reduce)
def _reduce(t: MpiTransport, op: ops.Reduce, team: Team, x: Arr, src: TensorType,
            dst: TensorType) -> Arr:
    blocks = _gathered(t, team, x, src)
    return fold(op.kind, blocks) if blocks else None


@rule(ops.Broadcast)
def _broadcast(t: MpiTransport, op: ops.Broadcast, team: Team, x: Arr, src: TensorType,
               dst: TensorType) -> Arr:
    comm = t.team_comm(team.devices)
    shape = t.shape_from(comm, 0, x, src.rank)
    buf = to_bytes(x) if x is not None else empty_bytes(int(np.prod(shape)) * src.np_dtype.itemsize, src.np_dtype)
    wait(comm.Ibcast(buf, root=0), "a broadcast")
    return from_bytes(buf, shape, src.np_dtype)


@rule(ops.Scatter)
def _scatter(t: MpiTransport, op: ops.Scatter, team: Team, x: Arr, src: TensorType,
             dst: TensorType) -> Arr:
    comm = t.team_comm(team.devices)
    n = len(team.receivers)
    counts = [prod(local_shape(dst, {}, d)) * src.np_dtype.itemsize if d in team.receivers else 0
              for d in team.devices]
    displs = displacements(counts)
    spec = None
    if comm.rank == 0:
        parts = split(x, n, op.axis)
        send = [to_bytes(parts[block_index(dst, d, op.axis)], op.axis)
                for d in team.devices if d in team.receivers]
        spec = [np.concatenate(send) if send else np.empty(0, np.uint8), counts, displs, MPI.BYTE]
    recv = empty_bytes(counts[comm.rank], src.np_dtype)
    wait(comm.Iscatterv(spec, recv, root=0), "a scatter")
    if team.devices[comm.rank] not in team.receivers:
        return None
    return from_bytes(recv, local_shape(dst, {}, t.rank), src.np_dtype, op.axis)


@rule(ops.SendRecv)
def _send_recv(t: MpiTransport, op: ops.SendRecv, team: Team, x: Arr, src: TensorType,
               dst: TensorType) -> Arr:
    (s,), (r,) = team.senders, team.receivers
    if s == r:
        return x
    if t.rank == s:
        t.send_shape(x.shape, r)
        wait(t.comm.Isend(to_bytes(x), dest=r, tag=DATA_TAG), "a send")
        return None
    shape, want = t.recv_shape(s, src.rank), local_shape(src, {}, s)
    if shape != want:
        raise RunError(f"rank {t.rank}: send_recv from rank {s} brings a block of shape {shape}, where {src} gives "
                       f"rank {s} {want} [{SHARD_C1}]")
    buf = empty_bytes(prod(shape) * src.np_dtype.itemsize, src.np_dtype)
    t.received(t.comm.Irecv(buf, source=s, tag=DATA_TAG), buf, f"send_recv's block from rank {s}")
    return from_bytes(buf, shape, src.np_dtype)
