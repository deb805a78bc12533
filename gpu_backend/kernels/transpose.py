"""The tiled transpose: a copy between buffers whose fastest axes differ.

A block moves one tile through shared memory, reading along the source's
fastest axis and writing along the destination's, so both sides are
coalesced; each thread loads all its elements of the tile before it stores
any (loads in flight together). Up to two batch axes travel as plain
arguments (most permutes of up to four axes); more as a padded tuple,
unravelled once per batch entry. gpu_backend/kernels/elementwise.py's copy_into sends
here every copy that does not keep the innermost axis. The geometry knobs
were chosen by measurement (benchmarks/kernel_probe.py, benchmarks/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from math import prod
from typing import Any, NamedTuple

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.device import SIMULATED, TILE, TILE_ROWS, blocks_for, cuda, max_blocks
from gpu_backend.kernels.strides import Arr, Ints, padded, unravel
from gpu_backend.launches.launch import launch

# Which tile a block takes next (linear tile id r of an entry, tiles_a x tiles_b
# tiles): along a (the source's fastest axis: neighbouring blocks read
# neighbouring stretches), along b, or diagonally (neighbouring blocks in
# different rows and columns, so that a power-of-two stride on either side
# does not send every block's accesses to the same memory channels).
ALONG_A, ALONG_B, DIAGONAL = 0, 1, 2


@cache
def _tile_mover(side: int, rows: int) -> Callable:
    """One tile's trip through shared memory, for both kernels below: each
    thread loads its side / rows elements along the source's fastest axis,
    then stores its column of the tile along the destination's. Interior
    tiles (all but the edges) skip the bounds checks; each thread steps from
    one base address by a fixed stride."""
    per = side // rows

    @cuda.jit(device=True)
    def move(dst: Arr, do: int, d_a: int, d_b: int, src: Arr, so: int, s_a: int, s_b: int, tile: Arr,
             held: Arr, ta: int, tb: int, na: int, nb: int) -> None:
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        full = (ta + 1) * side <= na and (tb + 1) * side <= nb
        a, b = ta * side + tx, tb * side + ty  # read along the source's fastest axis
        p, step = so + a * s_a + b * s_b, rows * s_b
        if full:
            for i in range(per):
                held[i] = src[p + i * step]
        else:
            for i in range(per):
                if a < na and b + i * rows < nb:
                    held[i] = src[p + i * step]
        for i in range(per):
            tile[ty + i * rows, tx] = held[i]
        cuda.syncthreads()
        a, b = ta * side + ty, tb * side + tx  # write along the destination's fastest axis
        q, step = do + a * d_a + b * d_b, rows * d_a
        for i in range(per):
            held[i] = tile[tx, ty + i * rows]
        if full:
            for i in range(per):
                dst[q + i * step] = held[i]
        else:
            for i in range(per):
                if b < nb and a + i * rows < na:
                    dst[q + i * step] = held[i]
        cuda.syncthreads()

    return move


@cache
def _transpose(itemsize: int, side: int, rows: int, walk: int) -> Callable:
    """The tiled transpose of up to two batch axes (c inner, e outer): a
    block of `side` x `rows` threads moves a `side` x `side` tile, each thread
    side / rows elements, all loaded before any is stored."""
    word = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[itemsize]
    tile_shape = (side, side + 1)  # +1: no shared-memory bank conflicts
    per = side // rows
    move = _tile_mover(side, rows)

    @cuda.jit
    def kernel(dst: Arr, d_off: int, d_a: int, d_b: int, d_c: int, d_e: int, src: Arr, s_off: int, s_a: int,
               s_b: int, s_c: int, s_e: int, na: int, nb: int, nc: int, total: int) -> None:
        tile = cuda.shared.array(tile_shape, word)
        held = cuda.local.array(per, word)
        tiles_a = (na + side - 1) // side
        tiles_b = (nb + side - 1) // side
        tiles = tiles_a * tiles_b
        for t in range(cuda.blockIdx.x, total, cuda.gridDim.x):
            entry = t // tiles
            r = t - entry * tiles
            if walk == ALONG_A:
                tb = r // tiles_a
                ta = r - tb * tiles_a
            elif walk == ALONG_B:
                ta = r // tiles_b
                tb = r - ta * tiles_b
            else:
                ta = r // tiles_b
                tb = r - ta * tiles_b
                ta = (ta + tb) % tiles_a
            e = entry // nc
            c = entry - e * nc
            move(dst, d_off + c * d_c + e * d_e, d_a, d_b, src, s_off + c * s_c + e * s_e, s_a, s_b, tile, held,
                 ta, tb, na, nb)

    return kernel


@cache
def _transpose_batched(itemsize: int) -> Callable:
    """The tiled transpose of any number of batch axes (a padded tuple,
    unravelled once per entry): what coalesces to more than four axes."""
    word = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[itemsize]
    side, rows, tile_shape = TILE, TILE_ROWS, (TILE, TILE + 1)
    per = TILE // TILE_ROWS
    move = _tile_mover(side, rows)

    @cuda.jit
    def kernel(dst: Arr, d_off: int, d_batch: Ints, d_a: int, d_b: int, src: Arr, s_off: int, s_batch: Ints,
               s_a: int, s_b: int, batch: Ints, na: int, nb: int, nbatch: int) -> None:
        tile = cuda.shared.array(tile_shape, word)
        held = cuda.local.array(per, word)
        tiles_a = (na + side - 1) // side
        tiles = tiles_a * ((nb + side - 1) // side)
        # Blocks stride over batch entries along y and over the tiles of one
        # entry along x: the batch offset is unravelled once per entry, and a
        # tile's corner costs one division.
        for bi in range(cuda.blockIdx.y, nbatch, cuda.gridDim.y):
            so = s_off + unravel(bi, batch, s_batch)
            do = d_off + unravel(bi, batch, d_batch)
            for t in range(cuda.blockIdx.x, tiles, cuda.gridDim.x):
                tb = t // tiles_a
                ta = t - tb * tiles_a
                move(dst, do, d_a, d_b, src, so, s_a, s_b, tile, held, ta, tb, na, nb)

    return kernel


# The tiled transpose's geometry on a GPU (benchmarks/kernel_probe.py measures the choices).
TRANSPOSE_SIDE = TILE  # of a tile
TRANSPOSE_ROWS = TILE_ROWS  # thread rows of a block: TRANSPOSE_SIDE / TRANSPOSE_ROWS elements a thread
# Measured on the H200 (thirteenth session, benchmarks/kernel_probe.py permutes and layer): twice
# the resident blocks, tiles taken along b, ran every tiled permute 0.5-2 points of the copy ahead
# (piped) and the column-major reshape 90.3% a call against 86.5% (one block a slot, along a).
TRANSPOSE_WALK = ALONG_B
TRANSPOSE_BLOCKS = 2  # times max_blocks()
TRANSPOSE_FIT = True  # where both tiled axes are short, halve the side while a tile still covers them
TRANSPOSE_SIDE_MIN = 2 if SIMULATED else 16


class TransposePlan(NamedTuple):
    """transpose_into's launch for one layout, all but the data: the kernel, its
    grid and block, the arguments after d's data and offset, after s's, and last."""

    kernel: Callable
    grid: Any
    block: tuple[int, int]
    d_args: tuple[Any, ...]
    s_args: tuple[Any, ...]
    tail: tuple[Any, ...]


# Plans by element size, coalesced shape, strides and fast axis: working one out
# (and asking the device its size) costs more Python than the launch itself.
_plans: dict[tuple[Any, ...], TransposePlan] = {}
PLANS_KEPT = 4096


def clear_plans() -> None:
    """Forget the plans (after the geometry knobs above change)."""
    _plans.clear()


def transpose_plan(itemsize: int, shape: list[int], ds: list[int], ss: list[int], fast: int) -> TransposePlan:
    """The launch of transpose_into for these coalesced shape and strides (kept per layout)."""
    key = (itemsize, tuple(shape), tuple(ds), tuple(ss), fast)
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= PLANS_KEPT:
            _plans.clear()
        plan = _plans[key] = _plan(itemsize, shape, ds, ss, fast)
    return plan


def _plan(itemsize: int, shape: list[int], ds: list[int], ss: list[int], fast: int) -> TransposePlan:
    last = len(shape) - 1
    rest = [a for a in range(len(shape)) if a not in (fast, last)]
    if len(rest) <= 2:  # a batch of at most two axes: c (inner) and e (outer)
        (nc, dc, sc), (ne, de, se) = [(shape[a], ds[a], ss[a]) for a in reversed(rest)] + [(1, 0, 0)] * (2 - len(rest))
        side = TRANSPOSE_SIDE
        while TRANSPOSE_FIT and side > TRANSPOSE_SIDE_MIN and side // 2 >= max(shape[fast], shape[last]):
            side //= 2  # short axes: a smaller tile, not one mostly empty
        total = nc * ne * -(-shape[fast] // side) * -(-shape[last] // side)
        rows = TRANSPOSE_ROWS if side == TRANSPOSE_SIDE else max(1, side // 8)  # a smaller tile: 8 elements a thread
        return TransposePlan(_transpose(itemsize, side, rows, TRANSPOSE_WALK),
                             min(total, TRANSPOSE_BLOCKS * max_blocks()), (side, rows),
                             (ds[fast], ds[last], dc, de), (ss[fast], ss[last], sc, se),
                             (shape[fast], shape[last], nc, total))
    batch = padded([shape[a] for a in rest], 1)
    tiles = -(-shape[fast] // TILE) * -(-shape[last] // TILE)
    across = blocks_for(tiles, 1)
    grid = (across, min(prod(batch), max(1, max_blocks() // across), 65535))
    return TransposePlan(_transpose_batched(itemsize), grid, (TILE, TILE_ROWS),
                         (padded([ds[a] for a in rest], 0), ds[fast], ds[last]),
                         (padded([ss[a] for a in rest], 0), ss[fast], ss[last]),
                         (batch, shape[fast], shape[last], prod(batch)))


def transpose_into(d: DeviceBuffer, s: DeviceBuffer, shape: list[int], ds: list[int], ss: list[int],
                   fast: int) -> None:
    """d[...] = s over the coalesced `shape` (strides `ds`, `ss`), where the
    source's fastest axis `fast` is not the destination's innermost one."""
    plan = transpose_plan(d.dtype.itemsize, shape, ds, ss, fast)
    launch(plan.kernel, plan.grid, plan.block, d.data, d.offset, *plan.d_args, s.data, s.offset, *plan.s_args,
           *plan.tail)
