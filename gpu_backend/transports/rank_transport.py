"""One rank per MPI process: the nine communications as packing kernels around
a wire (gpu_backend/transports/wires.py: NCCL on GPUs, host-staged MPI under the simulator).

Packing is a copy kernel into a dense buffer. For a gather or split along an
axis, that axis goes outermost, so that blocks side by side on the wire are
their concatenation along it: what a rank receives is the result, seen through
a view (LaidOut then lays it out as declared). A block that travels whole
(broadcast, scatter, send_recv, a native allreduce) is packed in the result's
own order and needs no further copy. Buffers cross the wire as bytes, except
where the wire reduces natively (gpu_backend/transports/wires.py says when); otherwise
partials are gathered and folded in team order, as the spec folds them.

Block shapes come from the global extents the segment is handed (spec §8),
with uneven blocks too; a broadcast or send_recv receiver learns the shape
from a small MPI header (interp.mpi.transport's). NCCL has no v-collectives:
uneven allgather, reduce_scatter and all_to_all move equal slots padded to
ceil(E/n) and keep exactly each block (spec §3.1, §7); gather and scatter move
each block at its own size, point to point. An even all_to_all needs no slots:
each piece goes point to point straight into its place in the result
(_pieces_in_place), the peers' pieces packed into one send buffer where they
need packing (gpu_backend/transports/packing.py). Both it and a native reduce_scatter from
a re-laid-out source can go in chunks, each packed while the wire moves the
one before (CHUNKS, RS_CHUNKS). An all_to_all or reduce_scatter whose blocks
are runs (spec §3.4) goes by gpu_backend/transports/run_exchange.py.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any, Protocol

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.kernels.elementwise import copy_into, laid_out
from gpu_backend.transports.device_arrays import Buffers, DeviceArrays, received
from gpu_backend.transports.packing import peer_pieces, slot_rows
from gpu_backend.transports.run_exchange import exchanged
from interp.collectives import block_index
from interp.mpi.transport import MpiTransport
from interp.transport import rank_part
from refir.ir import ops
from refir.ir.blocks import gathered_order, gathered_split
from refir.ir.tables import registrar
from refir.ir.types import TensorType, axis_first, block, block_size, local_shape
from refir.lowering.run_exchange import of_runs
from refir.lowering.teams import Team
from refir.world.mpi_job import fault

Arr = Any  # a 1-D device array
Dense = DeviceBuffer  # one whose elements fill data[offset:offset+size]: the wire moves that memory


class Wire(Protocol):
    """Moves dense device buffers; teams are world ranks in team order. Each
    call is ordered before every kernel issued after it returns, but
    start_p2p and start_reduce_scatter, each queued after every kernel issued so far:
    kernels issued next may run meanwhile, until finish orders the rest after
    it (its buffers kept alive till then)."""

    def start(self) -> None: ...
    def native(self, kind: str, dtype: np.dtype) -> bool: ...
    def allgather(self, team: tuple[int, ...], send: Dense, recv: Dense) -> None: ...
    def alltoall(self, team: tuple[int, ...], send: Dense, recv: Dense) -> None: ...
    def broadcast(self, team: tuple[int, ...], buf: Dense, root: int) -> None: ...
    def allreduce(self, team: tuple[int, ...], send: Dense, recv: Dense, kind: str) -> None: ...
    def reduce_scatter(self, team: tuple[int, ...], send: Dense, recv: Dense, kind: str) -> None: ...
    def start_reduce_scatter(self, team: tuple[int, ...], send: Dense, recv: Dense, kind: str) -> None: ...
    def p2p(self, sends: list[tuple[int, Dense]], recvs: list[tuple[int, Dense]]) -> None: ...
    def start_p2p(self, sends: list[tuple[int, Dense]], recvs: list[tuple[int, Dense]]) -> None: ...
    def finish(self, what: str) -> None: ...


class RankTransport:
    def __init__(self, mpi: MpiTransport, wire: Wire) -> None:
        self.mpi = mpi  # team communicators and shape headers
        self.wire = wire
        self.rank = mpi.rank
        self.hosted = (mpi.rank,)

    def communicate(self, op: ops.Communication, src: TensorType, dst: TensorType, buffers: Buffers) -> Buffers:
        fault("collective")
        self.wire.start()  # every rank comes here, in or out of the teams
        rule = RULES[type(op)]
        return rank_part(self.rank, op, src, dst, buffers, lambda team, x: rule(self, op, team, x, src, dst))

    def close(self) -> None:
        """Nothing to release: communicators outlive runs (refir.close() frees them)."""

    def header(self, team: Team, x: DeviceBuffer | None, src: TensorType) -> tuple[int, ...]:
        """The shape of the first team member's block (a sender), on every member."""
        return self.mpi.shape_from(self.mpi.team_comm(team.devices), 0, x, src.rank)


Buf = DeviceBuffer | None  # None where this rank sends or receives nothing
Rule = Callable[[RankTransport, Any, Team, Buf, TensorType, TensorType], Buf]
RULES: dict[type, Rule] = {}


rule = registrar(RULES)


def scaled(shape: tuple[int, ...], axis: int, times: int = 1, parts: int = 1) -> tuple[int, ...]:
    return tuple(n * times // parts if a == axis else n for a, n in enumerate(shape))


def with_extent(shape: tuple[int, ...], axis: int, extent: int) -> tuple[int, ...]:
    return tuple(extent if a == axis else n for a, n in enumerate(shape))


def pieces(flat: Arr, n: int, shape: tuple[int, ...], order: tuple[int, ...]) -> list[DeviceBuffer]:
    """n blocks of `shape` side by side in `flat`, each dense in `order`."""
    return pieces_of(flat, [shape] * n, order)


def pieces_of(flat: Arr, shapes: list[tuple[int, ...]], order: tuple[int, ...]) -> list[DeviceBuffer]:
    """Blocks of `shapes` side by side in `flat`, each dense in `order`."""
    out, start = [], 0
    for shape in shapes:
        out.append(DeviceBuffer.dense(flat[start:start + prod(shape)], shape, order))
        start += prod(shape)
    return out


def padded(x: DeviceBuffer, axis: int, extent: int, order: tuple[int, ...]) -> DeviceBuffer:
    """x dense in `order`, in a buffer `extent` long on `axis`: NCCL moves equal
    slots only, so a short block travels padded. The padding past x is never read
    back into a result: receivers keep each block's own extent."""
    if x.shape[axis] == extent:
        return laid_out(x, order)
    out = DeviceBuffer.empty(with_extent(x.shape, axis, extent), x.dtype, order)
    copy_into(out.take(axis, 0, x.shape[axis]), x)
    return out


@rule(ops.Allgather)
def _allgather(t: RankTransport, op: ops.Allgather, team: Team, x: Buf, src: TensorType,
               dst: TensorType) -> Buf:
    # Pad-and-slice: every block padded to c = ceil(E/n), axis outermost. Blocks
    # are contiguous and in order, so all the padding lies past E (spec §3.1).
    n, order = len(team.devices), axis_first(x.ndim, op.axis)
    extent = local_shape(dst, {}, t.rank)[op.axis]  # the block the team shares: whole, or a nest's outer part
    split = gathered_split(src.axes[op.axis])
    sizes = [local_shape(src, {}, d)[op.axis] for d in team.devices] if split > 1 else []
    c = max(sizes) if sizes else block_size(extent, n, 0)  # interleaved: member 0's runs may pass ceil(E/n)
    send = padded(x, op.axis, c, order)
    whole = received(scaled(send.shape, op.axis, n), x.dtype, order)
    t.wire.allgather(team.devices, send, whole)
    if split > 1:  # §3.4: each member's runs to their places, from its padded slot
        return DeviceArrays(order).concatenate(
            [whole.take(op.axis, k * c + lo, k * c + hi) for k, lo, hi in gathered_order(sizes, split)] or
            [whole.take(op.axis, 0, 0)], op.axis)
    return whole if n * c == extent else whole.take(op.axis, 0, extent)


@rule(ops.Allreduce)
def _allreduce(t: RankTransport, op: ops.Allreduce, team: Team, x: Buf, src: TensorType,
               dst: TensorType) -> Buf:
    if t.wire.native(op.kind, x.dtype):
        send = laid_out(x, dst.order)
        total = received(x.shape, x.dtype, dst.order)
        t.wire.allreduce(team.devices, send, total, op.kind)
        return total
    send = laid_out(x, dst.order)  # every member packs alike
    every = received((len(team.devices) * x.size,), x.dtype)
    t.wire.allgather(team.devices, send, every)
    return DeviceArrays(dst.order).fold(op.kind, pieces(every.flat(), len(team.devices), x.shape, dst.order))


# A native reduce_scatter whose declared source layout is not the wire's order
# (so its block is re-laid out on the way) can go in RS_CHUNKS chunks of every
# slot, each packed while the one before is reduced. The choice depends only on
# the types and extents, the same on every rank (NCCL calls must match). Not
# measured on two GPUs yet (benchmarks/RESULTS.md): one chunk by default; the
# `phases` device stage times 1, 2 and 4.
RS_CHUNKS = 1


@rule(ops.ReduceScatter)
def _reduce_scatter(t: RankTransport, op: ops.ReduceScatter, team: Team, x: Buf, src: TensorType,
                    dst: TensorType) -> Buf:
    if of_runs(op, src, dst):  # §3.4: pieces packed and placed by their runs
        return exchanged(t, op, team, x, src, dst)
    n, order = len(team.devices), axis_first(x.ndim, op.axis)
    c = block_size(x.shape[op.axis], n, 0)
    mine = block_size(x.shape[op.axis], n, team.index(t.rank))
    slot = with_extent(x.shape, op.axis, c)
    if t.wire.native(op.kind, x.dtype):  # padding is reduced with padding only, then cut away
        got = received(slot, x.dtype, order)
        chunks = min(RS_CHUNKS, c) if n * c == x.shape[op.axis] and src.order != order else 1
        if chunks > 1:
            _reduced_in_chunks(t, op, team, x, got, chunks, order)
        else:
            t.wire.reduce_scatter(team.devices, padded(x, op.axis, n * c, order), got, op.kind)
        return got if mine == c else got.take(op.axis, 0, mine)
    send = padded(x, op.axis, n * c, order)
    got = received(send.shape, x.dtype, order)  # my slot of every member, in team order
    t.wire.alltoall(team.devices, send, got)
    parts = [p.take(op.axis, 0, mine) for p in pieces(got.flat(), n, slot, order)]
    return DeviceArrays(dst.order).fold(op.kind, parts)


def _reduced_in_chunks(t: RankTransport, op: ops.ReduceScatter, team: Team, x: DeviceBuffer, got: DeviceBuffer,
                       chunks: int, order: tuple[int, ...]) -> None:
    """An even native reduce_scatter in `chunks` chunks along the axis: chunk
    k of every member's slot is packed into one send buffer (one copy launch,
    gpu_backend/transports/packing.py) and reduced into chunk k of mine, which is
    contiguous (the axis outermost), while the kernels pack chunk k + 1."""
    n, axis, c = len(team.devices), op.axis, got.shape[op.axis]
    kept = []  # the packed chunks, alive until the wire is done with them
    for k in range(chunks):
        lo, hi = block(c, chunks, k)
        send = slot_rows(x, axis, n, c, lo, hi, order)
        t.wire.start_reduce_scatter(team.devices, send, got.take(axis, lo, hi), op.kind)
        kept.append(send)
    t.wire.finish("a reduce_scatter")


@rule(ops.AllToAll)
def _all_to_all(t: RankTransport, op: ops.AllToAll, team: Team, x: Buf, src: TensorType,
                dst: TensorType) -> Buf:
    if of_runs(op, src, dst):  # §3.4: pieces packed and placed by their runs
        return exchanged(t, op, team, x, src, dst)
    n, order = len(team.devices), axis_first(x.ndim, op.concat_axis)
    # the blocks the team shares on both axes (whole, or a nest's outer part)
    split_extent, cat_extent = local_shape(src, {}, t.rank)[op.split_axis], local_shape(dst, {}, t.rank)[op.concat_axis]
    if split_extent % n == 0 and cat_extent % n == 0:
        return _pieces_in_place(t, op, team, x, order)
    me = team.index(t.rank)
    parts = x.split(n, op.split_axis)
    # Every piece travels in a slot of ceil(split/n) x ceil(concat/n): equal slots for NCCL.
    slot = list(x.shape)
    slot[op.split_axis] = block_size(split_extent, n, 0)
    slot[op.concat_axis] = block_size(cat_extent, n, 0)
    send = DeviceBuffer.empty((n * prod(slot),), x.dtype)
    for room, part in zip(pieces(send.flat(), n, tuple(slot), order), parts):
        copy_into(room[tuple(slice(0, m) for m in part.shape)], part)
    got = received((n * prod(slot),), x.dtype)
    t.wire.alltoall(team.devices, send, got)
    valid = []
    for s, room in enumerate(pieces(got.flat(), n, tuple(slot), order)):
        shape = list(slot)
        shape[op.split_axis] = block_size(split_extent, n, me)
        shape[op.concat_axis] = block_size(cat_extent, n, s)
        valid.append(room[tuple(slice(0, m) for m in shape)])
    return DeviceArrays(order).concatenate(valid, op.concat_axis)


# An even all_to_all can send each piece in CHUNKS chunks, each packed while the
# one before is on the wire. On two H200s (benchmarks/RESULTS.md) eight chunks
# were slower than one from a row-major source (each chunk's copies cost host
# time) and gained nothing clear from a column-major one; the `phases` device stage
# times 1, 2, 4 and 8.
CHUNKS = 1


def _pieces_in_place(t: RankTransport, op: ops.AllToAll, team: Team, x: DeviceBuffer,
                     order: tuple[int, ...]) -> DeviceBuffer:
    """Even pieces, each straight to its place. The result, concat axis
    outermost, holds the pieces side by side in team order, so each is a
    contiguous slice of it: a peer's piece is received into its slice, mine is
    copied into mine, and the pieces I send go from where they lie when they
    are dense in `order`, else packed into one send buffer (one copy launch
    with two ranks, at most two). My own piece is copied while the wire
    sends the others; in CHUNKS chunks along the concat axis (the same on
    every rank), the wire sends chunk c while the kernels pack chunk c + 1."""
    n, me, axis = len(team.devices), team.index(t.rank), op.concat_axis
    parts = x.split(n, op.split_axis)
    out = received(scaled(parts[0].shape, axis, n), x.dtype, order)
    places = out.split(n, axis)
    extent = parts[0].shape[axis]
    chunks = max(1, min(extent, CHUNKS))
    kept = []  # the packed chunks, alive until the wire is done with them
    for c in range(chunks):
        lo, hi = block(extent, chunks, c)
        peers = peer_pieces([part.take(axis, lo, hi) for part in parts], me, order)
        sends = list(zip(team.devices[:me] + team.devices[me + 1:], peers))
        recvs = [(peer, place.take(axis, lo, hi)) for peer, place in zip(team.devices, places) if peer != t.rank]
        t.wire.start_p2p(sends, recvs)
        kept.append(sends)
        copy_into(places[me].take(axis, lo, hi), parts[me].take(axis, lo, hi))
    t.wire.finish("an all_to_all")
    return out


def _collect(t: RankTransport, team: Team, x: Buf, src: TensorType,
             order: tuple[int, ...]) -> tuple[Arr, list[tuple[int, ...]]] | None:
    """Every sender's block, side by side in team order, on every receiver (and
    the blocks' shapes, known from the global extents); None elsewhere."""
    shapes = [local_shape(src, {}, s) for s in team.senders]
    send = laid_out(x, order) if x is not None else None
    sends = [(r, send) for r in team.receivers if r != t.rank] if send is not None else []
    if t.rank not in team.receivers:
        t.wire.p2p(sends, [])
        return None
    flat = received((sum(prod(s) for s in shapes),), src.np_dtype).flat()
    recvs = []
    for s, room in zip(team.senders, pieces_of(flat, shapes, order)):
        if s == t.rank:
            copy_into(room, send)
        else:
            recvs.append((s, room))
    t.wire.p2p(sends, recvs)
    return flat, shapes


@rule(ops.Gather)
def _gather(t: RankTransport, op: ops.Gather, team: Team, x: Buf, src: TensorType, dst: TensorType) -> Buf:
    order = axis_first(src.rank, op.axis)
    got = _collect(t, team, x, src, order)
    if got is None:
        return None
    flat, shapes = got  # blocks side by side, axis outermost: their concatenation
    whole = tuple(sum(s[op.axis] for s in shapes) if a == op.axis else n for a, n in enumerate(shapes[0]))
    return DeviceBuffer.dense(flat, whole, order)


@rule(ops.Reduce)
def _reduce(t: RankTransport, op: ops.Reduce, team: Team, x: Buf, src: TensorType, dst: TensorType) -> Buf:
    got = _collect(t, team, x, src, dst.order)
    if got is None:
        return None
    flat, shapes = got
    return DeviceArrays(dst.order).fold(op.kind, pieces_of(flat, shapes, dst.order))


@rule(ops.Broadcast)
def _broadcast(t: RankTransport, op: ops.Broadcast, team: Team, x: Buf, src: TensorType,
               dst: TensorType) -> Buf:
    shape = t.header(team, x, src)  # team.devices[0] is the root
    buf = laid_out(x, dst.order) if x is not None else received(shape, src.np_dtype, dst.order)
    t.wire.broadcast(team.devices, buf, 0)
    return buf if t.rank in team.receivers else None


@rule(ops.Scatter)
def _scatter(t: RankTransport, op: ops.Scatter, team: Team, x: Buf, src: TensorType,
             dst: TensorType) -> Buf:
    n = len(team.receivers)
    mine, sends, recvs = None, [], []
    if t.rank == op.root:
        parts = x.split(n, op.axis)
        for r in team.receivers:
            part = laid_out(parts[block_index(dst, r, op.axis)], dst.order)
            if r == t.rank:
                mine = part
            else:
                sends.append((r, part))
    elif t.rank in team.receivers:
        mine = received(local_shape(dst, {}, t.rank), src.np_dtype, dst.order)
        recvs.append((op.root, mine))
    t.wire.p2p(sends, recvs)
    return mine


@rule(ops.SendRecv)
def _send_recv(t: RankTransport, op: ops.SendRecv, team: Team, x: Buf, src: TensorType,
               dst: TensorType) -> Buf:
    (s,), (r,) = team.senders, team.receivers
    if s == r:
        return x
    if t.rank == s:
        t.mpi.send_shape(x.shape, r)
        t.wire.p2p([(r, laid_out(x, dst.order))], [])
        return None
    got = received(t.mpi.recv_shape(s, src.rank), src.np_dtype, dst.order)
    t.wire.p2p([], [(s, got)])
    return got
