"""One rank per MPI process, through mpi4py.

Every buffer crosses MPI as the bytes of its elements in C order with the
communicated axis moved to the front (mpi4py reads an F-ordered array as raw
memory, and has no float16): a strided buffer is read in place through an MPI
datatype that walks its strides, not packed first, and an allgather receives
straight into the gathered result. Reductions never use MPI's own: partials are
gathered and folded in team order, so the bits equal the in-process
transport's. Every wait is a polite, bounded poll: four ranks on two cores
would otherwise busy-spin each other.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import lru_cache
from math import prod
from typing import Any

import numpy as np
from mpi4py import MPI

from interp.collectives import block_index, split
from interp.impls import COMBINE
from interp.transport import rank_part
from refir import ops
from refir.mpi import COMMS, fault, wait
from refir.tables import registrar
from refir.teams import Team
from refir.types import TensorType, axis_first, block, block_size, local_shape

HEADER_TAG, DATA_TAG = 11, 12  # point-to-point: a block's shape, then its bytes


def moved_first(x: np.ndarray, axis: int) -> np.ndarray:
    """x with `axis` moved to the front, as np.moveaxis (a view; a few µs
    cheaper, which counts on every call of a small collective)."""
    if axis == 0 or x.ndim < 2:  # nothing to move (a 0-d buffer has no axis)
        return x
    return x.transpose(axis_first(x.ndim, axis))


def to_bytes(x: np.ndarray, axis: int = 0) -> np.ndarray:
    front = moved_first(x, axis)
    return np.ascontiguousarray(front).reshape(-1).view(np.uint8)


# Datatypes that walk a layout (shape, byte strides, item size), kept for later
# calls of the same layout: a run in a loop builds none.
_WALKS: OrderedDict[tuple[tuple[int, ...], tuple[int, ...], int], MPI.Datatype] = OrderedDict()


def _walk(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> MPI.Datatype:
    key = (shape, strides, itemsize)
    if key not in _WALKS:
        t = MPI.BYTE.Create_contiguous(itemsize)
        for n, s in zip(reversed(shape), reversed(strides)):
            outer = t.Create_hvector(n, 1, s)
            t.Free()
            t = outer
        _WALKS[key] = t.Commit()
        if len(_WALKS) > 64:
            _WALKS.popitem(last=False)[1].Free()
    _WALKS.move_to_end(key)
    return _WALKS[key]


def outgoing(x: np.ndarray, axis: int = 0) -> Any:
    """What MPI sends for `x`: its elements in C order with `axis` first, as
    to_bytes gives them, but read where they lie: the array's own bytes when it
    is contiguous so, else its memory walked by a datatype (a packing copy only
    for negative strides)."""
    front = moved_first(x, axis)
    if front.flags.c_contiguous:
        return front.reshape(-1).view(np.uint8)
    if any(s < 0 for s in front.strides):
        return to_bytes(x, axis)
    span = sum((n - 1) * s for n, s in zip(front.shape, front.strides)) + front.itemsize
    memory = MPI.buffer.fromaddress(front.ctypes.data, span, readonly=True)
    return [memory, 1, _walk(front.shape, front.strides, front.itemsize)]


def fold(kind: str, parts: list[np.ndarray]) -> np.ndarray:
    """interp.impls.fold's left-to-right combination (the same bits), into one
    fresh array instead of a copy per step."""
    combine, first = COMBINE[kind], parts[0]
    acc = np.array(first, copy=True) if len(parts) == 1 else np.empty(first.shape, first.dtype)
    for i, p in enumerate(parts[1:]):
        combine(first if i == 0 else acc, p, out=acc, casting="unsafe")  # cast back as there (`astype`)
    return acc


def from_bytes(buf: np.ndarray, shape: tuple[int, ...], dtype: np.dtype, axis: int = 0) -> np.ndarray:
    """Bytes of a C-contiguous array whose `axis` was moved to the front."""
    if not shape:
        return buf.view(dtype).reshape(())
    front = (shape[axis],) + shape[:axis] + shape[axis + 1:]
    whole = buf.view(dtype).reshape(front)
    back = (*range(1, axis + 1), 0, *range(axis + 1, len(shape)))  # the inverse of axis_first's order
    return whole if axis == 0 else whole.transpose(back)


class MpiTransport:
    """Communications of this process's rank, on the process's communicators
    (refir.mpi.COMMS: made once per team, kept for every later run)."""

    def __init__(self) -> None:
        self.comm = COMMS.world()
        self.rank = self.comm.rank
        self.hosted = (self.rank,)

    def team_comm(self, devices: tuple[int, ...]) -> MPI.Comm:
        """A communicator whose ranks are the team's devices in team order."""
        return COMMS.team(devices)

    def close(self) -> None:
        """Nothing to release: communicators outlive runs (refir.close() frees them)."""

    def communicate(self, op: ops.Communication, src: TensorType, dst: TensorType,
                    buffers: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        fault("collective")
        rule = MPI_RULES[type(op)]
        return rank_part(self.rank, op, src, dst, buffers, lambda team, x: rule(self, op, team, x, src, dst))

    # ---- building blocks ---------------------------------------------------------------

    def send_shape(self, shape: tuple[int, ...], dest: int) -> None:
        """Tell a point-to-point receiver, who may know no symbol, what it gets."""
        wait(self.comm.Isend(np.array(shape, np.int64), dest=dest, tag=HEADER_TAG), "a shape header")

    def recv_shape(self, source: int, rank: int) -> tuple[int, ...]:
        header = np.empty(rank, np.int64)
        wait(self.comm.Irecv(header, source=source, tag=HEADER_TAG), "a shape header")
        return tuple(int(n) for n in header)

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
        send = outgoing(x, axis)
        counts = [prod(s) * x.dtype.itemsize for s in shapes]
        recv = np.empty(sum(counts), np.uint8)
        if len(set(counts)) == 1:  # equal blocks (every rank sees the same counts): the plain collective
            wait(comm.Iallgather(send, [recv, counts[0], MPI.BYTE]), "an allgather")
        else:
            wait(comm.Iallgatherv(send, [recv, counts, _displs(counts), MPI.BYTE]), "an allgather")
        return [from_bytes(p, s, x.dtype, axis) for p, s in zip(_cut(recv, counts), shapes)]

    def allgathered(self, comm: MPI.Comm, x: np.ndarray, axis: int) -> np.ndarray:
        """The members' blocks side by side, as bytes of the blocks concatenated
        along `axis` with that axis first (`from_bytes` of the whole shape)."""
        recv = np.empty(x.nbytes * comm.size, np.uint8)
        wait(comm.Iallgather(outgoing(x, axis), [recv, x.nbytes, MPI.BYTE]), "an allgather")
        return recv

    def gather_to(self, comm: MPI.Comm, root: int, x: np.ndarray | None, shapes: Sequence[tuple[int, ...]],
                  dtype: np.dtype) -> list[np.ndarray]:
        """Blocks of the first len(shapes) team ranks (of those shapes), on team rank `root`."""
        counts = [prod(shapes[i]) * dtype.itemsize if i < len(shapes) else 0 for i in range(comm.size)]
        send = to_bytes(x) if x is not None else np.empty(0, np.uint8)
        recv = np.empty(sum(counts), np.uint8) if comm.rank == root else None
        spec = [recv, counts, _displs(counts), MPI.BYTE]
        wait(comm.Igatherv(send, spec if comm.rank == root else None, root=root), "a gather")
        if comm.rank != root:
            return []
        return [from_bytes(p, s, dtype) for p, s in zip(_cut(recv, counts), shapes)]

    def alltoall(self, comm: MPI.Comm, pieces: list[np.ndarray], shapes: Sequence[tuple[int, ...]],
                 axis: int | None = None) -> np.ndarray:
        """pieces[k] to member k; from member k, a piece of shapes[k]. Each piece
        crosses as its elements in C order with `axis` first (as they lie, when
        None), and the received ones lie side by side in the returned bytes:
        with `axis` first, that is their concatenation."""
        send, sent = _one_after_another(pieces, axis)
        counts = [prod(s) * pieces[0].itemsize for s in shapes]
        recv = np.empty(sum(counts), np.uint8)
        # Always the v-variant: whether pieces are equal differs from rank to rank,
        # and every rank must make the same call.
        wait(comm.Ialltoallv([send, sent, _displs(sent), MPI.BYTE], [recv, counts, _displs(counts), MPI.BYTE]),
             "an all_to_all")
        return recv


def _one_after_another(pieces: list[np.ndarray], axis: int | None) -> tuple[Any, list[int]]:
    """The pieces' bytes (each in C order with `axis` first) one after another:
    where they already lie so (a split along the outermost axis of a dense
    array), their own memory; else packed into one buffer, one copy each
    (MPI's datatype engine walks short runs far slower than numpy copies them)."""
    fronts = [moved_first(p, axis) if axis is not None else p for p in pieces]
    sizes = [p.nbytes for p in pieces]
    starts = [f.ctypes.data for f in fronts]
    if all(f.flags.c_contiguous for f in fronts) and all(
            b == a + n for a, b, n in zip(starts, starts[1:], sizes) if n):
        return MPI.buffer.fromaddress(starts[0], sum(sizes), readonly=True), sizes
    send = np.empty(sum(sizes), np.uint8)
    for f, offset, n in zip(fronts, _displs(sizes), sizes):
        send[offset:offset + n].view(f.dtype).reshape(f.shape)[...] = f
    return send, sizes


def _displs(counts: list[int]) -> list[int]:
    return [sum(counts[:i]) for i in range(len(counts))]


def _cut(buf: np.ndarray, counts: list[int]) -> list[np.ndarray]:
    return [buf[o:o + c] for o, c in zip(_displs(counts), counts)]


@lru_cache(maxsize=256)  # asked at every call of a collective: types are frozen
def _blocks(t: TensorType, devices: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Each device's block shape under a resolved (symbol-free) type."""
    return tuple(local_shape(t, {}, d) for d in devices)


Arr = np.ndarray | None  # None where this rank sends or receives nothing
Rule = Callable[[MpiTransport, object, Team, Arr, TensorType, TensorType], Arr]
MPI_RULES: dict[type, Rule] = {}


rule = registrar(MPI_RULES)


@rule(ops.Allgather)
def _allgather(t: MpiTransport, op: ops.Allgather, team: Team, x: Arr, src: TensorType,
               dst: TensorType) -> Arr:
    comm = t.team_comm(team.devices)
    shapes = _blocks(src, team.devices)
    if len(set(shapes)) > 1:  # uneven blocks: MPI's v-variant, then one concatenation
        return np.concatenate(t.allgather(comm, x, op.axis, shapes), axis=op.axis)
    whole = tuple(n * comm.size if a == op.axis else n for a, n in enumerate(x.shape))
    return from_bytes(t.allgathered(comm, x, op.axis), whole, x.dtype, op.axis)  # no concatenating copy


# Above this many bytes an allreduce moves slices rather than whole partials.
SLICED_ALLREDUCE_BYTES = 1 << 16


@rule(ops.Allreduce)
def _allreduce(t: MpiTransport, op: ops.Allreduce, team: Team, x: Arr, src: TensorType,
               dst: TensorType) -> Arr:
    """Small: every partial to every member, each folds the whole. Large: member
    k gathers slice k of every partial, folds it, and the folded slices are
    gathered (as a ring allreduce moves its bytes, and a fold of 1/n each).
    The fold is elementwise and in team order either way: the same bits."""
    comm = t.team_comm(team.devices)
    flat = np.ascontiguousarray(x).reshape(-1)
    if flat.nbytes < SLICED_ALLREDUCE_BYTES or comm.size == 1:
        every = np.empty((comm.size, flat.size), x.dtype)
        wait(comm.Iallgather(flat.view(np.uint8), every.view(np.uint8)), "an allreduce")
        return fold(op.kind, list(every)).reshape(x.shape)
    bounds = [block(flat.size, comm.size, k) for k in range(comm.size)]
    counts = [(hi - lo) * x.itemsize for lo, hi in bounds]
    lo, hi = bounds[comm.rank]
    mine = np.empty((comm.size, hi - lo), x.dtype)  # slice `rank` of every member's partial
    got = [mine[0].nbytes] * comm.size
    wait(comm.Ialltoallv([flat.view(np.uint8), counts, _displs(counts), MPI.BYTE],
                         [mine.view(np.uint8), got, _displs(got), MPI.BYTE]), "an allreduce")
    folded = fold(op.kind, list(mine))
    whole = np.empty(flat.size, x.dtype)
    wait(comm.Iallgatherv(folded.view(np.uint8), [whole.view(np.uint8), counts, _displs(counts), MPI.BYTE]),
         "an allreduce")
    return whole.reshape(x.shape)


@rule(ops.ReduceScatter)
def _reduce_scatter(t: MpiTransport, op: ops.ReduceScatter, team: Team, x: Arr, src: TensorType,
                    dst: TensorType) -> Arr:
    comm = t.team_comm(team.devices)
    pieces = split(x, comm.size, op.axis)  # piece k to team member k, which expects block k
    mine = pieces[comm.rank].shape
    got = t.alltoall(comm, pieces, [mine] * comm.size).view(x.dtype).reshape((comm.size, *mine))
    return fold(op.kind, list(got))


@rule(ops.AllToAll)
def _all_to_all(t: MpiTransport, op: ops.AllToAll, team: Team, x: Arr, src: TensorType,
                dst: TensorType) -> Arr:
    comm = t.team_comm(team.devices)
    mine = block_size(src.axes[op.split_axis].extent, comm.size, comm.rank)
    shapes = [tuple(mine if i == op.split_axis else n for i, n in enumerate(s)) for s in _blocks(src, team.devices)]
    whole = tuple(sum(s[op.concat_axis] for s in shapes) if a == op.concat_axis else n
                  for a, n in enumerate(shapes[0]))
    got = t.alltoall(comm, split(x, comm.size, op.split_axis), shapes, op.concat_axis)
    return from_bytes(got, whole, x.dtype, op.concat_axis)  # the pieces side by side: no concatenating copy


def _gathered(t: MpiTransport, team: Team, x: Arr, src: TensorType) -> list[np.ndarray]:
    """Every receiver collects the senders' blocks (team ranks 0..senders-1)."""
    comm = t.team_comm(team.devices)
    shapes = _blocks(src, team.senders)
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
    buf = to_bytes(x) if x is not None else np.empty(int(np.prod(shape)) * src.np_dtype.itemsize, np.uint8)
    wait(comm.Ibcast(buf, root=0), "a broadcast")
    return from_bytes(buf, shape, src.np_dtype)


@rule(ops.Scatter)
def _scatter(t: MpiTransport, op: ops.Scatter, team: Team, x: Arr, src: TensorType,
             dst: TensorType) -> Arr:
    comm = t.team_comm(team.devices)
    n = len(team.receivers)
    counts = [prod(local_shape(dst, {}, d)) * src.np_dtype.itemsize if d in team.receivers else 0
              for d in team.devices]
    displs = _displs(counts)
    spec = None
    if comm.rank == 0:
        parts = split(x, n, op.axis)
        send = [to_bytes(parts[block_index(dst, d, op.axis)], op.axis)
                for d in team.devices if d in team.receivers]
        spec = [np.concatenate(send) if send else np.empty(0, np.uint8), counts, displs, MPI.BYTE]
    recv = np.empty(counts[comm.rank], np.uint8)
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
    shape = t.recv_shape(s, src.rank)
    buf = np.empty(int(np.prod(shape)) * src.np_dtype.itemsize, np.uint8)
    wait(t.comm.Irecv(buf, source=s, tag=DATA_TAG), "a receive")
    return from_bytes(buf, shape, src.np_dtype)
