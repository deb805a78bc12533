"""The mask ops on device buffers (docs/spec.md §5.9): comparisons (the elementwise kernels, to a
bool buffer), `where` (kernels of three operands) and `iota` (a kernel of none).
gpu_backend/impls.py imports this module last; it registers the ops in GPU_IMPLS. `where` is
planned as the elementwise ops are (gpu_backend/kernels/elementwise.py): the four buffers' axes
coalesced in the result's memory order; where every one is a single unit-stride run, a grid-
stride loop with four loads of each operand in flight (no index arithmetic); where they coalesce
to rows (long enough) at two outer axes at most, where every row is whole 8-byte words alike,
gpu_backend/kernels/where_words.py's word kernel; otherwise a row kernel (`_where_rows`: grid x and y over
the rows, z over chunks of a long row; each operand's place advanced by its own step along the
row, 0 where broadcast along it: no division or multiply per element; eight elements of each
operand in flight a thread; made per operand for steps 0 and 1 as constants,
`where_rows_kernel`, which an attention mask's where takes: 56 registers where any steps take
96, so twice the threads an SM); otherwise the general walk over [outer..., mid, inner] of the
result's memory order, each operand read through its own strides (broadcast axes at stride 0,
any layout, negative strides), the outer index unravelled once per work item of many elements,
never per element. Values move as unsigned words of their size (bfloat16's bits as they are).
`iota` writes its fresh result in memory order; each element's value is the start plus its index
along the axis, which is the walk's mid index (or its inner index, where the axis is innermost
in memory): no division per element either. An integer iota narrower than 8 bytes whose rows are
whole words writes whole 8-byte words (the elements' low bits packed, as the cast from i64
wraps): a write-only kernel moves its bytes in half as many stores."""

from __future__ import annotations

from functools import cache
from math import prod
from typing import Any

import numpy as np

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.buffers.memory import Memory
from gpu_backend.device import SIMULATED, blocks_for, cuda, fitted, max_blocks, rows_block
from gpu_backend.impls import Order, broadcast_shape, impl, per_device
from gpu_backend.kernels import functions
from gpu_backend.kernels.elementwise import PLANS_KEPT, as_words, elementwise
from gpu_backend.kernels.elementwise_kernels import _item, walk_geometry
from gpu_backend.kernels.recipes import kept, kept_params, recipe_args
from gpu_backend.kernels.row_words import rows_geometry
from gpu_backend.kernels.strides import Arr, Ints, coalesce, padded, unravel
from gpu_backend.kernels.where_words import where_words_plan
from gpu_backend.launches.launch import KeptLaunches, counts, keep_launch, launch
from interp.masks import iota_block_of
from refir.ir import ops
from refir.ir.types import TensorType

BOOL = np.dtype(bool)
# where's dense grid: at most this many times max_blocks() (as elementwise's two-operand kernel)
WHERE_BLOCKS = 1 if SIMULATED else 1 << 20
ROWS_MIN = 64  # rows at least this long, at most two outer axes: `_where_rows`; else the walk
WHERE_WORDS = True  # rows of whole words alike as 8-byte words (where_words.py); False: `_where_rows` (kernel_probe)


@impl(ops.Compare)
def compare(op: ops.Compare, order: Order, a: DeviceBuffer, b: DeviceBuffer) -> DeviceBuffer:
    shape = broadcast_shape(a.shape, b.shape)
    return elementwise(functions.compare(op.name, a.dtype), DeviceBuffer.empty(shape, BOOL, order), a, b)


@cuda.jit
def _where_dense(out: Arr, o_off: int, c: Arr, c_off: int, x: Arr, x_off: int, y: Arr, y_off: int, n: int) -> None:
    """Every buffer one unit-stride run: four elements a thread, all twelve loads first."""
    bx = cuda.blockDim.x
    i = cuda.blockIdx.x * bx * 4 + cuda.threadIdx.x
    step = cuda.gridDim.x * bx * 4
    while i + 3 * bx < n:
        c0, c1, c2, c3 = c[c_off + i], c[c_off + i + bx], c[c_off + i + 2 * bx], c[c_off + i + 3 * bx]
        x0, x1, x2, x3 = x[x_off + i], x[x_off + i + bx], x[x_off + i + 2 * bx], x[x_off + i + 3 * bx]
        y0, y1, y2, y3 = y[y_off + i], y[y_off + i + bx], y[y_off + i + 2 * bx], y[y_off + i + 3 * bx]
        out[o_off + i] = x0 if c0 else y0
        out[o_off + i + bx] = x1 if c1 else y1
        out[o_off + i + 2 * bx] = x2 if c2 else y2
        out[o_off + i + 3 * bx] = x3 if c3 else y3
        i += step
    while i < n:  # the ragged end
        out[o_off + i] = x[x_off + i] if c[c_off + i] else y[y_off + i]
        i += bx


@cuda.jit
def _where_walk(out: Arr, o_off: int, o_outer: Ints, o_mid: int, o_in: int,
                c: Arr, c_off: int, c_outer: Ints, c_mid: int, c_in: int,
                x: Arr, x_off: int, x_outer: Ints, x_mid: int, x_in: int,
                y: Arr, y_off: int, y_outer: Ints, y_mid: int, y_in: int,
                outer: Ints, walk: Ints, items: int) -> None:
    """Any strides: work items of one inner row's span (or of several short rows),
    threadIdx.x along the row; the outer index unravelled once per item."""
    bx = cuda.blockDim.x
    for item in range(cuda.blockIdx.x * cuda.blockDim.y + cuda.threadIdx.y, items, cuda.gridDim.x * cuda.blockDim.y):
        row, m0, m1, j0, j1 = _item(item, walk)
        o = o_off + unravel(row, outer, o_outer)
        p = c_off + unravel(row, outer, c_outer)
        q = x_off + unravel(row, outer, x_outer)
        r = y_off + unravel(row, outer, y_outer)
        for m in range(m0, m1):
            om, pm, qm, rm = o + m * o_mid, p + m * c_mid, q + m * x_mid, r + m * y_mid
            j = j0 + cuda.threadIdx.x
            while j + 3 * bx < j1:  # four elements a thread, all twelve loads first
                c0, c1 = c[pm + j * c_in], c[pm + (j + bx) * c_in]
                c2, c3 = c[pm + (j + 2 * bx) * c_in], c[pm + (j + 3 * bx) * c_in]
                x0, x1 = x[qm + j * x_in], x[qm + (j + bx) * x_in]
                x2, x3 = x[qm + (j + 2 * bx) * x_in], x[qm + (j + 3 * bx) * x_in]
                y0, y1 = y[rm + j * y_in], y[rm + (j + bx) * y_in]
                y2, y3 = y[rm + (j + 2 * bx) * y_in], y[rm + (j + 3 * bx) * y_in]
                out[om + j * o_in] = x0 if c0 else y0
                out[om + (j + bx) * o_in] = x1 if c1 else y1
                out[om + (j + 2 * bx) * o_in] = x2 if c2 else y2
                out[om + (j + 3 * bx) * o_in] = x3 if c3 else y3
                j += 4 * bx
            while j < j1:
                out[om + j * o_in] = x[qm + j * x_in] if c[pm + j * c_in] else y[rm + j * y_in]
                j += bx


U = np.uint64  # an index as unsigned: numba adds no wraparound for negative indices (three instructions a load)


@cuda.jit(device=True)
def _step(known: int, given: int) -> int:
    """An operand's step along the row: `known` where the kernel was made for it (0 or 1), else `given`."""
    return given if known < 0 else known


@cuda.jit(device=True)
def _picks(c: Arr, x: Arr, y: Arr, pc: int, px: int, py: int, sc: int, sx: int, sy: int, n1: int, n2: int,
           n3: int) -> tuple[Any, Any, Any, Any]:
    """Four elements of a row, x's where cond's else y's: element q read at each operand's place
    plus n_q of its steps (q, where the round is whole: constants; the ragged end's repeat its last)."""
    c0, c1, c2, c3 = c[U(pc)], c[U(pc + n1 * sc)], c[U(pc + n2 * sc)], c[U(pc + n3 * sc)]
    x0, x1, x2, x3 = x[U(px)], x[U(px + n1 * sx)], x[U(px + n2 * sx)], x[U(px + n3 * sx)]
    y0, y1, y2, y3 = y[U(py)], y[U(py + n1 * sy)], y[U(py + n2 * sy)], y[U(py + n3 * sy)]
    return (x0 if c0 else y0, x1 if c1 else y1, x2 if c2 else y2, x3 if c3 else y3)


@cuda.jit(device=True)
def _put(out: Arr, po: int, bx: int, n1: int, n2: int, n3: int, v: tuple[Any, Any, Any, Any]) -> None:
    """Store `_picks`' four at po, po + bx, ...: element q only where n_q is q (not repeated)."""
    out[U(po)] = v[0]
    if n1 == 1:
        out[U(po + bx)] = v[1]
    if n2 == 2:
        out[U(po + 2 * bx)] = v[2]
    if n3 == 3:
        out[U(po + 3 * bx)] = v[3]


@cache
def where_rows_kernel(kc: int, kx: int, ky: int) -> object:
    """`_where_rows` made for cond's, x's and y's inner strides kc, kx, ky where each is 0 or 1
    (a constant: their addresses a base and a shared step, fewer registers), -1 where any.
    Eight elements a round where all three are known (56 registers for f32), four where not
    (eight took 96 registers there: half the threads an SM for no more loads in flight)."""
    wide = kc >= 0 and kx >= 0 and ky >= 0

    @cuda.jit
    def _where_rows(out: Arr, o_off: int, o_i: int, o_j: int,
                    c: Arr, c_off: int, c_i: int, c_j: int, c_in: int,
                    x: Arr, x_off: int, x_i: int, x_j: int, x_in: int,
                    y: Arr, y_off: int, y_i: int, y_j: int, y_in: int,
                    ni: int, nj: int, inner: int, chunk: int) -> None:
        """At most two outer axes (i on grid x, j on grid y and threadIdx.y), out's rows unit
        stride, each operand's rows at its own stride (0 where broadcast along them); a row cut
        into chunks of `chunk` elements over grid z. No division, no multiply per element: each
        operand's place advances by its own step; 24 loads in flight a thread (eight of each
        operand: where cond and y are broadcast, x's eight are the only ones that reach DRAM),
        then a round of twelve, then the ragged end's twelve (indices clamped to the chunk's last)."""
        bx = cuda.blockDim.x
        for i in range(cuda.blockIdx.x, ni, cuda.gridDim.x):
            for j in range(cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y, nj, cuda.gridDim.y * cuda.blockDim.y):
                k0 = cuda.blockIdx.z * chunk
                k1 = min(k0 + chunk, inner)
                k = k0 + cuda.threadIdx.x
                po = o_off + i * o_i + j * o_j + k
                pc = c_off + i * c_i + j * c_j + k * _step(kc, c_in)
                px = x_off + i * x_i + j * x_j + k * _step(kx, x_in)
                py = y_off + i * y_i + j * y_j + k * _step(ky, y_in)
                sc, sx, sy = bx * _step(kc, c_in), bx * _step(kx, x_in), bx * _step(ky, y_in)
                while wide and k + 7 * bx < k1:  # eight a round (a broadcast cond and y: x's alone reach DRAM)
                    v = _picks(c, x, y, pc, px, py, sc, sx, sy, 1, 2, 3)
                    u = _picks(c, x, y, pc + 4 * sc, px + 4 * sx, py + 4 * sy, sc, sx, sy, 1, 2, 3)
                    _put(out, po, bx, 1, 2, 3, v)
                    _put(out, po + 4 * bx, bx, 1, 2, 3, u)
                    k += 8 * bx
                    po += 8 * bx
                    pc += 8 * sc
                    px += 8 * sx
                    py += 8 * sy
                while k + 3 * bx < k1:  # then rounds of four (at most one after rounds of eight)
                    _put(out, po, bx, 1, 2, 3, _picks(c, x, y, pc, px, py, sc, sx, sy, 1, 2, 3))
                    k += 4 * bx
                    po += 4 * bx
                    pc += 4 * sc
                    px += 4 * sx
                    py += 4 * sy
                if k < k1:  # the ragged end: the same twelve loads, those past the chunk repeating its last
                    n1 = 1 if k + bx < k1 else 0
                    n2 = 2 if k + 2 * bx < k1 else n1
                    n3 = 3 if k + 3 * bx < k1 else n2
                    _put(out, po, bx, n1, n2, n3, _picks(c, x, y, pc, px, py, sc, sx, sy, n1, n2, n3))

    return _where_rows


_where_rows = where_rows_kernel(-1, -1, -1)  # any inner strides


# where's launch per layout (`_where_plan`: kernel, grid, block, a recipe per buffer, the tail;
# gpu_backend/kernels/recipes.py), by everything it depends on but the memory: each operand's shape and
# strides, the result's, the element size, the offsets' alignment to a word, the word knob.
_where_plans: dict[tuple[object, ...], tuple[Any, ...]] = {}
# Between pooled Memory, those launches ready to go again, by the same key: the driver launch, its grid
# and block, the kept recipes and tail; a repeated where costs its result, a key, a lookup and the launch.
_ready_wheres: KeptLaunches = {}


def clear_plans() -> None:
    """Forget where's plans and kept launches (after a knob changes)."""
    _where_plans.clear()
    _ready_wheres.clear()


@impl(ops.Where)
def where(op: ops.Where, order: Order, cond: DeviceBuffer, x: DeviceBuffer, y: DeviceBuffer) -> DeviceBuffer:
    """out = x where cond else y; a pick of stored values (bfloat16's bits move as they are)."""
    shape = broadcast_shape(broadcast_shape(cond.shape, x.shape), y.shape)
    out = DeviceBuffer.empty(shape, x.dtype, order)
    if out.size == 0:
        return out
    buffers = (out, cond, x, y)
    key = (shape, out.strides, cond.shape, cond.strides, x.shape, x.strides, y.shape, y.strides,
           x.data.dtype.itemsize, y.data.dtype.itemsize, cond.offset % 8, x.offset % 8, y.offset % 8, WHERE_WORDS)
    pooled = type(out.data) is Memory and type(cond.data) is Memory and type(x.data) is Memory \
        and type(y.data) is Memory
    if pooled:
        ready = _ready_wheres.get(key)
        if ready is not None:
            direct, grid, block, recipes, tail = ready
            counts["prepared"] += 1
            direct(grid, block, kept_params(buffers, recipes, tail))
            return out
    plan = _where_plans.get(key)
    if plan is None:
        if len(_where_plans) >= PLANS_KEPT:
            _where_plans.clear()
        plan = _where_plans[key] = _where_plan(out, cond, x, y)
    kernel, grid, block, recipes, tail = plan
    args = recipe_args(buffers, recipes, tail)
    launch(kernel, grid, block, *args)
    if pooled:
        keep_launch(_ready_wheres, key, kernel, args, grid, block, lambda: kept(recipes, tail))
    return out


def _where_plan(out: DeviceBuffer, cond: DeviceBuffer, x: DeviceBuffer, y: DeviceBuffer) -> tuple[Any, ...]:
    """where's launch for these layouts: (kernel, grid, block, a recipe per buffer, the tail).
    Values move as unsigned words of their size: out's, x's and y's memory as them, cond's as bools."""
    shape, n = out.shape, out.size
    views = [out, cond.broadcast_to(shape), x.broadcast_to(shape), y.broadcast_to(shape)]
    walk, strides = coalesce(shape, [v.strides for v in views], out.strides)
    elem = np.dtype(f"u{x.data.dtype.itemsize}")
    words = [(elem,), (BOOL,), (elem,), (elem,)]
    if len(walk) == 1 and all(st == [1] for st in strides):
        threads = fitted(-(-n // 4))
        blocks = max(1, min(-(-n // (threads * 4)), WHERE_BLOCKS * max_blocks()))
        return _where_dense, blocks, threads, tuple((w, 1, ()) for w in words), (n,)
    plan = where_words_plan(elem.itemsize, [v.offset for v in views], walk, strides) if WHERE_WORDS else None
    if plan is not None:  # rows of whole words alike: 8-byte words (gpu_backend/kernels/where_words.py)
        return plan
    if len(walk) <= 3 and walk[-1] >= ROWS_MIN and strides[0][-1] == 1:
        pad = 3 - len(walk)
        (ni, nj, inner), st = [1] * pad + walk, [[0] * pad + st for st in strides]
        grid, block, chunk = rows_geometry(ni, nj, inner)
        recipes = [(w, 1, (s_i, s_j, s_in)) for w, (s_i, s_j, s_in) in zip(words, st)]
        recipes[0] = (words[0], 1, tuple(st[0][:2]))  # out's inner stride: 1
        known = [s_in if s_in in (0, 1) else -1 for _, _, s_in in st[1:]]
        return where_rows_kernel(*known), grid, block, tuple(recipes), (ni, nj, inner, chunk)
    walk, strides = [1, *walk], [[0, *st] for st in strides]  # a mid axis, at worst of extent 1
    outer = padded(walk[:-2], 1)
    bx, by = rows_block(walk[-1])
    geometry, items = walk_geometry(prod(outer), walk[-2], walk[-1], bx)
    by = fitted(items, by)
    recipes = tuple((w, 1, (padded(st[:-2], 0), st[-2], st[-1])) for w, st in zip(words, strides))
    return _where_walk, blocks_for(items, by), (bx, by), recipes, (outer, geometry, items)


@cache
def _iota_kernel(convert: object) -> object:
    @cuda.jit
    def kernel(out: Arr, o_off: int, walk: Ints, items: int, start: int, along_mid: int, along_in: int) -> None:
        """out[(row mid + m) inner + j] = start + m along_mid + j along_in, in memory order."""
        bx = cuda.blockDim.x
        mid, inner = walk[0], walk[1]
        for item in range(cuda.blockIdx.x * cuda.blockDim.y + cuda.threadIdx.y, items,
                          cuda.gridDim.x * cuda.blockDim.y):
            row, m0, m1, j0, j1 = _item(item, walk)
            for m in range(m0, m1):
                base = o_off + (row * mid + m) * inner
                value = start + m * along_mid
                j = j0 + cuda.threadIdx.x
                while j < j1:
                    out[base + j] = convert(np.int64(value + j * along_in))
                    j += bx

    return kernel


@cache
def _iota_words_kernel(f: int, bits: int) -> object:
    """An integer iota of f elements of `bits` bits a word, written as whole 8-byte words."""
    mask = (1 << bits) - 1

    @cuda.jit
    def kernel(o8: Arr, w_off: int, ni: int, nj: int, nw: int, chunk: int, start: int, along_mid: int,
               along_in: int) -> None:
        """Word k of row (i, j) (rows of nw words from word w_off, dense): the low bits of
        start + j along_mid + (k f + q) along_in in its element q, as the cast from i64 wraps."""
        bx = cuda.blockDim.x
        for i in range(cuda.blockIdx.x, ni, cuda.gridDim.x):
            for j in range(cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y, nj,
                           cuda.gridDim.y * cuda.blockDim.y):
                k1 = min(cuda.blockIdx.z * chunk + chunk, nw)
                base = w_off + (i * nj + j) * nw
                k = cuda.blockIdx.z * chunk + cuda.threadIdx.x
                value = start + j * along_mid + k * f * along_in  # element 0 of word k
                step = bx * f * along_in
                while k < k1:
                    word = np.uint64(0)
                    for q in range(f):  # f a constant: unrolled
                        word |= np.uint64((value + q * along_in) & mask) << np.uint64(q * bits)
                    o8[U(base + k)] = word
                    k += bx
                    value += step

    return kernel


def _iota_words(out: DeviceBuffer, rows: int, mid: int, inner: int, start: int, along_mid: int,
                along_in: int) -> bool:
    """An integer iota narrower than a word as whole words, where its rows are whole words and
    long enough (True); else nothing (False)."""
    size = out.data.dtype.itemsize
    f = 8 // size
    if out.dtype.kind not in "iu" or size > 4 or inner % f or out.offset % f or inner < ROWS_MIN:
        return False
    data = out.data if out.data.size % f == 0 else out.data[out.offset:out.offset + out.size]  # whole words
    offset = out.offset if data is out.data else 0
    grid, block, chunk = rows_geometry(rows, mid, inner // f)
    launch(_iota_words_kernel(f, 8 * size), grid, block, as_words(data, np.dtype(np.uint64)), offset // f, rows,
           mid, inner // f, chunk, start, along_mid, along_in)
    return True


def iota_walk(shape: tuple[int, ...], strides: tuple[int, ...], axis: int) -> tuple[tuple[int, int, int], int, int]:
    """A dense buffer's elements in memory order as [rows, mid, inner], and the weights
    of the mid and inner index in an element's index along `axis`: [outer, axis, inner]
    with weights (1, 0); the axis innermost in memory: [outer, 1, axis] with (0, 1)."""
    n, extent = prod(shape), shape[axis]
    if extent == 1:
        return (1, 1, n), 0, 0
    inner = strides[axis]  # dense: the elements of the axes inside it in memory
    if inner == 1:
        return (n // extent, 1, extent), 0, 1
    return (n // (extent * inner), extent, inner), 1, 0


@per_device(ops.Iota)
def iota(op: ops.Iota, order: Order, t: TensorType, device: int, extents: list[int]) -> DeviceBuffer:
    """`device`'s block of an iota of global `extents`: the global indices of its block,
    converted as cast from i64 converts (interp/masks.py iota_block)."""
    shape, start = iota_block_of(op, t, device, extents)
    dtype = t.np_dtype
    out = DeviceBuffer.empty(shape, dtype, order)
    if out.size == 0:
        return out
    (rows, mid, inner), along_mid, along_in = iota_walk(out.shape, out.strides, op.axis)
    if _iota_words(out, rows, mid, inner, start, along_mid, along_in):
        return out
    bx, by = rows_block(inner)
    geometry, items = walk_geometry(rows, mid, inner, bx)
    by = fitted(items, by)
    kernel = _iota_kernel(functions.cast(np.dtype(np.int64), dtype))
    launch(kernel, blocks_for(items, by), (bx, by), out.data, out.offset, geometry, items, start, along_mid,
           along_in)
    return out
