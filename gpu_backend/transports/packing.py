"""Packing for the rank transport: an even all_to_all's outgoing pieces, and
a chunk of an even reduce_scatter's slots, each in one send buffer, by as few
copy launches as the pieces' spacing allows.

The pieces of a block split evenly along an axis lie a fixed stride apart, so
a run of consecutive pieces is one strided view with a leading piece axis, and
its packing is one copy (gpu_backend/kernels/elementwise.py's copy_into: rows, or the
tiled transpose where the fastest axis changes). The peers' pieces are the
team's pieces but mine: one run when I am first or last (always with two
ranks), two runs otherwise. One send buffer also costs one allocation, where a
buffer a piece cost one each. A reduce_scatter's slots are pieces too: chunk k
of every slot is one run.
"""

from __future__ import annotations

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.kernels.elementwise import copy_into, laid_out


def stacked(pieces: list[DeviceBuffer]) -> DeviceBuffer:
    """Pieces of one shape and strides, a fixed stride apart in one array, as
    one view with a leading piece axis."""
    first = pieces[0]
    step = pieces[1].offset - first.offset if len(pieces) > 1 else 0
    return DeviceBuffer(first.data, first.offset, (len(pieces), *first.shape), (step, *first.strides))


def peer_pieces(pieces: list[DeviceBuffer], me: int, order: tuple[int, ...]) -> list[DeviceBuffer]:
    """The pieces but mine (team order), each dense in `order`: the pieces
    themselves where they already are, else packed side by side into one
    fresh buffer. The pieces are an even split of one block: equal shapes and
    strides, a fixed stride apart."""
    peers = pieces[:me] + pieces[me + 1:]
    if not peers or all(p.is_dense(order) for p in peers):
        return peers
    if len(peers) == 1:  # one copy either way: no piece axis to build
        return [laid_out(peers[0], order)]
    shape, dtype = peers[0].shape, peers[0].dtype
    send = DeviceBuffer.empty((len(peers), *shape), dtype, (0, *(a + 1 for a in order)))
    for lo, hi, slot in ((0, me, 0), (me + 1, len(pieces), me)):  # the runs before and after mine
        if hi > lo:
            copy_into(send.take(0, slot, slot + hi - lo), stacked(pieces[lo:hi]))
    return [_slot(send, k) for k in range(len(peers))]


def _slot(send: DeviceBuffer, k: int) -> DeviceBuffer:
    """Slot k of a stacked buffer, without its piece axis."""
    return DeviceBuffer(send.data, send.offset + k * send.strides[0], send.shape[1:], send.strides[1:])


def slot_rows(x: DeviceBuffer, axis: int, n: int, c: int, lo: int, hi: int, order: tuple[int, ...]) -> DeviceBuffer:
    """Rows [lo, hi) along `axis` of each of x's n slots of c rows, side by
    side in one fresh buffer, each dense in `order` (`axis` outermost): one
    chunk of a reduce_scatter's send buffer, packed by one copy launch."""
    rows = [x.take(axis, s * c + lo, s * c + hi) for s in range(n)]
    send = DeviceBuffer.empty((n, *rows[0].shape), x.dtype, (0, *(a + 1 for a in order)))
    copy_into(send, stacked(rows))
    return send
