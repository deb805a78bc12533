"""Every gpu kernel against interp.impls (the numpy meaning of each op), on random
shapes, dtypes, operand strides (gaps, transposes, negative steps) and result
layouts. Under CI the kernels run on the CUDA simulator; the device session
runs this file on a real GPU (NUMBA_ENABLE_CUDASIM=0)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_backend.buffers.buffer import DeviceBuffer, download, upload
from gpu_backend.device import SIMULATED, cuda
from gpu_backend.impls import compute
from gpu_backend.kernels import elementwise as kernels
from gpu_backend.kernels import functions, transpose
from gpu_backend.kernels.elementwise import copy_into
from gpu_backend.kernels.matmul import matmul_into
from gpu_backend.kernels.reduce import reduce_into
from interp import impls
from refir.ir import ops
from refir.ir.types import DTYPES, finfo, has_layout, is_float

# Simulated kernels compute with numpy scalars, which warn where a GPU wraps silently.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

NUMERIC = [n for n in DTYPES if n != "bool"]
FLOATS = ["f16", "bf16", "f32", "f64"]
SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.5, -0.5, 2.5, -2.5, 127.9, -128.9, 255.5, 300.7, -300.7,
           65504.0, 1e10, -1e10, 2.0**31, 2.0**63, -(2.0**63), 3e38]


def values(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, special: bool = False) -> np.ndarray:
    """Integers over the whole range (overflow must wrap), small integer-valued
    floats (every summation order then agrees), and, if asked, floats that
    probe NaN, infinities, rounding and saturation."""
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)
    x = rng.integers(-4, 5, shape).astype(np.float64)
    if special:
        mask = rng.random(shape) < 0.4
        x[mask] = rng.choice(SPECIAL, int(mask.sum()))
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def strided(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, special: bool = False) -> np.ndarray:
    """An array of `shape` that is a view with gaps, negative steps and permuted axes."""
    rank = len(shape)
    perm = rng.permutation(rank)
    steps = rng.choice([1, 1, 2, -1, -2], rank)
    starts = rng.integers(0, 2, rank)
    base = values(rng, tuple(shape[p] * abs(steps[p]) + 1 for p in perm), dtype, special)
    index = []
    for p in perm:
        n, step, start = shape[p], int(steps[p]), int(starts[p])
        last = start + (n - 1) * abs(step)
        index.append(slice(start, last + 1, step) if step > 0 else slice(last, start - 1 if start else None, step))
    return base[(*index, Ellipsis)].transpose(np.argsort(perm))  # Ellipsis: 0-d stays an array


def views(shape: tuple[int, ...], dtype: np.dtype, special: bool = False) -> st.SearchStrategy:
    return st.integers(0, 2**32 - 1).map(lambda seed: strided(np.random.default_rng(seed), shape, dtype, special))


def shapes(min_rank: int = 0, max_rank: int = 3, max_side: int = 5) -> st.SearchStrategy:
    return st.lists(st.integers(1, max_side), min_size=min_rank, max_size=max_rank).map(tuple)


def orders(rank: int) -> st.SearchStrategy:
    return st.permutations(range(rank)).map(tuple)


def run(op: object, order: tuple[int, ...], *args: object) -> np.ndarray:
    """The op on the device, from host operands; the result must be dense in `order`."""
    out = download(compute(op, order, [upload(a) if isinstance(a, np.ndarray) else a for a in args]))
    assert has_layout(out, order), (out.shape, out.strides, order)
    return out


def reference(op: object, *args: object) -> np.ndarray:
    dtype = next(a.dtype for a in args if isinstance(a, np.ndarray))
    return np.asarray(impls.compute(op, list(args), dtype))


def same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values, NaN where NaN (and -0.0 == 0.0, as the spec compares)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=is_float(got.dtype)), (got, want)


def close(got: np.ndarray, want: np.ndarray, ulps: int) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    eps = float(finfo(got.dtype).eps)
    g, w = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore"):
        ok = (g == w) | (np.isnan(g) & np.isnan(w)) | (np.abs(g - w) <= ulps * eps * np.abs(w))
    assert ok.all(), (got, want)


# ---- buffers -------------------------------------------------------------------------


@given(st.data(), shapes(), st.sampled_from(list(DTYPES)))
def test_upload_download_keep_strides(data, shape, name):
    x = data.draw(views(shape, DTYPES[name]))
    back = download(upload(x))
    assert back.strides == x.strides and np.array_equal(back, x)


def test_contiguous_blocks_go_up_and_down_without_host_copies_and_keep_odd_strides():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = upload(x)
    assert (b.offset, b.strides) == (0, (3, 1)) and download(b).strides == (12, 4)
    odd = np.lib.stride_tricks.as_strided(x, shape=(2, 1, 3), strides=(12, 100, 4))  # C-contiguous all the same
    assert odd.flags.c_contiguous
    back = download(upload(odd))
    assert back.strides == (12, 100, 4) and np.array_equal(back, odd)


# ---- elementwise -----------------------------------------------------------------------


@pytest.mark.parametrize("name", list(DTYPES))
@given(st.data(), shapes(1))
def test_binary(name, data, shape):
    dtype = DTYPES[name]
    allowed = {"maximum", "minimum"} if name == "bool" else {"add", "sub", "mul", "maximum", "minimum"}
    op = ops.Binary(data.draw(st.sampled_from(sorted(allowed | ({"div"} if name in FLOATS else set())))))
    a = data.draw(views(shape, dtype, special=True))
    b_shape = tuple(1 if data.draw(st.booleans()) else n for n in shape)  # `b` axes broadcast
    kind = data.draw(st.sampled_from(["tensor", "scalar", "scalar first"]))
    if kind == "tensor":
        args = [a, data.draw(views(b_shape, dtype, special=True))]
    else:
        scalar = data.draw(st.floats(-300, 300, allow_subnormal=False) if name in FLOATS else st.integers(-300, 300))
        args = [a, scalar] if kind == "scalar" else [scalar, a]
    if data.draw(st.booleans()) and kind == "tensor":
        args.reverse()
    same(run(op, data.draw(orders(len(shape))), *args), reference(op, *args))


@pytest.mark.parametrize("fn", ["neg", "abs", "relu", "exp", "log", "sqrt"])
@given(st.data(), shapes(), st.sampled_from(NUMERIC))
def test_unary(fn, data, shape, name):
    if fn in ("exp", "log", "sqrt") and name not in FLOATS:
        name = "f32"
    op = ops.Unary(fn)
    x = data.draw(views(shape, DTYPES[name], special=True))
    got, want = run(op, data.draw(orders(len(shape))), x), reference(op, x)
    if fn in ("exp", "log"):  # math libraries differ in the last bit
        close(got, want, ulps=2)
    else:
        same(got, want)


@pytest.mark.parametrize("source", list(DTYPES))
@given(st.data(), shapes(), st.sampled_from(list(DTYPES)))
def test_cast(source, data, shape, target):
    op = ops.Cast(target)
    x = data.draw(views(shape, DTYPES[source], special=True))
    with np.errstate(all="ignore"):
        same(run(op, data.draw(orders(len(shape))), x), reference(op, x))


def test_cast_saturates_at_the_edges():
    """Exactly at an integer type's bounds (2**63 is where int64 saturates)."""
    edges = [2.0**63, -(2.0**63), 2.0**31, -(2.0**31) - 1, 127.0, 127.5, -128.0, -128.5, 255.0, 256.0,
             -0.99, 0.99, 32767.0, -32768.5, np.nan, np.inf, -np.inf]
    for source in FLOATS[1:]:
        x = np.array(edges, DTYPES[source])
        for target in ["i8", "u8", "i16", "i32", "i64"]:
            same(run(ops.Cast(target), (0,), x), reference(ops.Cast(target), x))


# ---- data movement ---------------------------------------------------------------------


@pytest.mark.parametrize("permute", [True, False])
@given(st.data(), shapes(1, 4, 6), st.sampled_from(["bool", "i16", "f16", "f32", "f64"]))
def test_permute_and_copy(permute, data, shape, name):
    """Bits move unchanged (NaN payloads included) into the result's layout."""
    x = data.draw(views(shape, DTYPES[name], special=True))
    op = ops.Permute(tuple(data.draw(st.permutations(range(len(shape)))))) if permute else ops.Copy()
    got, want = run(op, data.draw(orders(len(shape))), x), reference(op, x)
    word = f"u{x.itemsize}"
    assert got.shape == want.shape and np.array_equal(got.view(word), want.view(word))


@pytest.mark.parametrize("shape, perm", [((33, 70), (1, 0)), ((3, 9, 37), (2, 0, 1)), ((5, 10, 9), (0, 2, 1))])
def test_tiled_transpose_crosses_tile_edges(shape, perm):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    same(run(ops.Permute(perm), tuple(range(len(shape))), x), np.transpose(x, perm))


def test_tiled_transpose_of_short_axes_takes_a_fitted_tile():
    """Where both tiled axes are short, the tile shrinks (not to one mostly empty),
    each transpose plan kept per layout."""
    transpose.clear_plans()
    side = transpose.TRANSPOSE_SIDE_MIN
    x = np.arange(7 * side * 5 * side, dtype=np.float32).reshape(7, side, 5, side) * 0.5
    for perm in [(2, 0, 3, 1), (0, 3, 2, 1)]:
        out = copy_into(DeviceBuffer.empty(tuple(x.shape[p] for p in perm), x.dtype), upload(x).transpose(perm))
        same(download(out), np.transpose(x, perm))
    assert [p.block[0] for p in transpose._plans.values()] == [side, side]


@pytest.mark.parametrize("walk", [transpose.ALONG_A, transpose.ALONG_B, transpose.DIAGONAL])
@pytest.mark.parametrize("shape, perm", [((5, 9), (1, 0)), ((3, 5, 6), (2, 1, 0)), ((2, 3, 5, 6), (2, 0, 3, 1))])
def test_tiled_transpose_walks(monkeypatch, walk, shape, perm):
    """Every order of visiting tiles, edge tiles included, with no batch axis,
    one and two; values and the result's strides."""
    monkeypatch.setattr(transpose, "TRANSPOSE_WALK", walk)
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    out = run(ops.Permute(perm), tuple(range(len(shape))), x)
    same(out, np.transpose(x, perm))
    assert out.strides == np.ascontiguousarray(np.transpose(x, perm)).strides


def test_tiled_transpose_of_three_batch_axes():
    """Five axes that no stride merges: the kernel that unravels its batch."""
    x = np.arange(2 * 3 * 2 * 5 * 6, dtype=np.int16).reshape(2, 3, 2, 5, 6)
    perm = (4, 2, 0, 3, 1)
    out = run(ops.Permute(perm), tuple(range(5)), x)
    same(out, np.transpose(x, perm))
    assert out.strides == np.ascontiguousarray(np.transpose(x, perm)).strides


@given(st.data(), shapes(0, 3), st.sampled_from(["u8", "f32"]))
def test_unsqueeze(data, shape, name):
    x = data.draw(views(shape, DTYPES[name]))
    rank = len(shape) + data.draw(st.integers(1, 2))
    op = ops.Unsqueeze(tuple(sorted(data.draw(st.permutations(range(rank)))[: rank - len(shape)])))
    same(run(op, data.draw(orders(rank)), x), reference(op, x))


def test_views_slice_like_numpy():
    x = np.arange(6 * 7, dtype=np.int16).reshape(6, 7)
    index = (slice(5, 0, -2), slice(None, None, -3))
    same(download(upload(x)[index]), x[index])


def test_copy_into_a_strided_destination():
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    dst = DeviceBuffer.empty((8, 12), np.dtype(np.int32))
    copy_into(dst[(slice(None, None, 2), slice(None, None, 2))].transpose((0, 1)), upload(x))
    assert np.array_equal(download(dst)[::2, ::2], x)


@pytest.mark.parametrize("name", ["u8", "i16", "f32"])
def test_row_copies_widen_to_words_where_rows_align(name):
    """Permutes that keep the innermost axis copy rows, as 8-byte words where
    every row starts and ends on one (here 32 elements of 1, 2 or 4 bytes),
    element by element where an offset breaks that (the column slice)."""
    x = np.arange(3 * 5 * 32, dtype=DTYPES[name]).reshape(3, 5, 32)
    same(run(ops.Permute((1, 0, 2)), (0, 1, 2), x), np.transpose(x, (1, 0, 2)))
    dst = DeviceBuffer.empty((5, 3, 33), x.dtype)
    copy_into(dst[(slice(None), slice(None), slice(1, None))], upload(x).transpose((1, 0, 2)))
    assert np.array_equal(download(dst)[:, :, 1:], np.transpose(x, (1, 0, 2)))


def test_word_views_are_made_once_per_array():
    """A copy's reinterpreting view of a numba array is kept while the array
    lives (numba takes tens of µs to make one; a pooled Memory's view is a
    small object, made anew); it shows the same bits."""
    x = np.arange(8, dtype=np.float32) - 3.5
    data = cuda.to_device(x)  # numba's own array, whatever upload makes
    words = kernels.as_words(data, np.dtype(np.uint32))
    assert kernels.as_words(data, np.dtype(np.uint32)) is words
    assert kernels.as_words(data, np.dtype(np.float32)) is data
    assert np.array_equal(download(DeviceBuffer.dense(words, (8,))), x.view(np.uint32))


def test_elementwise_unrolled_and_tail():
    """Rows long enough that each thread loads four elements at once, and a
    ragged tail that it takes one at a time."""
    a = np.arange(3 * 37, dtype=np.float32).reshape(3, 37) - 50
    b = np.arange(37, dtype=np.float32)[::-1].copy()
    same(run(ops.Binary("add"), (0, 1), a, b), a + b)
    same(run(ops.Cast("f16"), (1, 0), a), a.astype(np.float16))
    # Operands that are one unit-stride run each: the plain grid-stride kernels.
    same(run(ops.Binary("mul"), (0, 1), a, a), a * a)
    same(run(ops.Unary("neg"), (0, 1), a), -a)


def test_launch_plans_are_kept_by_layout_and_serve_other_data_and_offsets():
    """elementwise and copy_into work out a launch once per shapes and strides
    (and, for copies, word alignment); a later call at other offsets into other
    memory reuses it and computes its own values."""
    kernels._plans.clear()
    kernels._copies.clear()
    base = np.arange(4 * 20, dtype=np.float32).reshape(4, 20)
    up = upload(base)
    outs = []
    for start in (0, 3, 8):  # three column windows: one layout, three offsets
        out = DeviceBuffer.empty((4, 8), np.dtype(np.float32))
        kernels.elementwise(functions.binary("add", np.dtype(np.float32)), out, up.take(1, start, start + 8),
                            up.take(1, 12, 20))
        outs.append(download(out))
    assert len(kernels._plans) == 1
    for start, got in zip((0, 3, 8), outs):
        same(got, base[:, start:start + 8] + base[:, 12:20])
    copies = []
    for start in (0, 8, 1):  # an even column offset moves 8-byte words, an odd one cannot
        dst = DeviceBuffer.empty((4, 8), np.dtype(np.float32))
        copy_into(dst, up.take(1, start, start + 8))
        copies.append(download(dst))
    assert [p[:2] for p in kernels._copies.values()] == [("rows", 2), ("rows", 1)]
    for start, got in zip((0, 8, 1), copies):
        same(got, base[:, start:start + 8])
    from gpu_backend.kernels import reduce

    reduce.clear_plans()
    # a reduction: one plan (and one for its second pass over the chunks' partials) for offsets of one
    # 16-byte alignment (which the plans also key on: reduce._lanes)
    for start in (0, 4):
        out = reduce_into(DeviceBuffer.empty((4,), np.dtype(np.float32)), up.take(1, start, start + 8), (1,), "sum", 2)
        same(download(out), base[:, start:start + 8].sum(1))
    assert len(reduce._plans) == 2


@pytest.mark.skipif(not SIMULATED, reason="the plans below are the simulator's (on a GPU every launch checks them)")
def test_kept_launches_hand_the_driver_what_the_full_path_would(monkeypatch):
    """Between pooled Memory, reduce_into and the tiled transpose keep a launch
    per layout; a later call on other memory at other offsets passes the
    driver exactly the parameters the full path computes for it. A copy between
    two dense runs alike is one driver copy of the right bytes."""
    from gpu_backend.buffers.memory import Memory
    from gpu_backend.kernels import reduce
    from gpu_backend.launches import launch as launcher

    launched, direct, copied = [], [], []
    record = lambda kernel, grid, block, *args: launched.append((grid, block, launcher.values(args)))  # noqa: E731
    ready = lambda kernel, args: lambda grid, block, vals: direct.append((grid, block, list(vals)))  # noqa: E731
    for module in (reduce, kernels):
        monkeypatch.setattr(module, "launch", record)
    monkeypatch.setattr(launcher, "prepared", ready)  # what KeptLaunches.keep asks for the driver launch
    for scratch in ("_scratch", "_unused"):  # the kernels' own buffers, pooled on a GPU
        monkeypatch.setattr(reduce, scratch, lambda *shape: Memory(1 << 40, 64, np.dtype(np.float64), None))
    monkeypatch.setattr(reduce, "_counter", lambda: Memory(1 << 41, 1, np.dtype(np.int32), None))
    monkeypatch.setattr(kernels, "SIMULATED", False)
    monkeypatch.setattr(kernels, "copy_bytes", lambda dst, src, nbytes: copied.append((dst, src, nbytes)))
    f32 = np.dtype(np.float32)

    def memory(base: int, offset: int, shape: tuple[int, ...], perm: tuple[int, ...] | None = None) -> DeviceBuffer:
        b = DeviceBuffer.dense(Memory(base, int(np.prod(shape)) + offset + 3, f32, None), shape)
        b = DeviceBuffer(b.data, offset, b.shape, b.strides)
        return b.transpose(perm) if perm else b

    def full_then_kept(call, clear) -> None:
        call(0)  # the full path, the launch kept
        call(1)  # other memory and offsets (of the same 16-byte alignment): the kept launch
        clear()
        call(1)  # the full path again, for the same buffers
        assert direct[-1] == launched[-1]

    monkeypatch.setattr(reduce, "VECTOR_BYTES", {"sum": 16})  # the column kernel's sums by vectors too
    reduce.clear_plans()
    for dims, chunks in [((0, 1, 2), 4), ((0,), None), ((2,), None)]:
        out_shape = tuple(m for a, m in enumerate((4, 8, 32)) if a not in dims)
        full_then_kept(lambda k: reduce_into(memory((16 + k) << 20, 2 * k, out_shape),  # noqa: B023
                                             memory((64 + k) << 20, 4 * k, (4, 8, 32)), dims, "sum", chunks),  # noqa: B023
                       reduce._ready.clear)
    assert {p.path for p in reduce._plans.values()} == {"total", "columns", "plane"}
    assert {p.lanes for p in reduce._plans.values() if p.path == "columns"} == {4}  # 16-byte loads of 4 columns
    kernels.clear_plans()
    transposed = lambda k: memory((64 + k) << 20, 24 * k, (4, 6, 16), (2, 0, 1))  # noqa: E731
    full_then_kept(lambda k: copy_into(memory((16 + k) << 20, 8 * k, (16, 4, 6)), transposed(k)),
                   kernels._ready_copies.clear)
    rows = lambda k: memory((64 + k) << 20, 24 * k, (6, 4, 16), (1, 0, 2))  # noqa: E731
    full_then_kept(lambda k: copy_into(memory((16 + k) << 20, 8 * k, (4, 6, 16)), rows(k)), kernels._ready_copies.clear)
    assert [p[:2] for p in kernels._copies.values()] == [("tiles", np.dtype(np.uint32)), ("rows", 2)]
    copy_into(memory(16 << 20, 3, (4, 6, 16)), memory(64 << 20, 5, (4, 6, 16)))
    assert copied == [((16 << 20) + 12, (64 << 20) + 20, 4 * 6 * 16 * 4)]  # byte addresses, bytes
    add, relu = functions.binary("add", f32), functions.unary("relu", f32)
    bias = lambda k: DeviceBuffer(Memory((96 + k) << 20, 16 + k, f32, None), k, (1, 16), (16, 1))  # noqa: E731
    cases = [  # a broadcast add (the walk), a strided relu (rows), a dense add, a dense op with a scalar
        lambda k: kernels.elementwise(add, memory((16 + k) << 20, 0, (4, 16)), memory((64 + k) << 20, 5 * k, (4, 16)),
                                      bias(k)),
        lambda k: kernels.elementwise(relu, memory((16 + k) << 20, 3 * k, (4, 6, 16)), rows(k)),
        lambda k: kernels.elementwise(add, memory((16 + k) << 20, k, (96,)), memory((64 + k) << 20, 2 * k, (96,)),
                                      memory((32 + k) << 20, 0, (96,))),
        lambda k: kernels.elementwise(add, memory((16 + k) << 20, k, (96,)), memory((64 + k) << 20, 2 * k, (96,)),
                                      scalar=1.5 + k),
    ]
    kernels._plans.clear()
    for case in cases:
        full_then_kept(case, kernels._ready_maps.clear)
    assert len({plan[0] for plan in kernels._plans.values()}) == 4  # four kernels: each case took its own path


def test_kept_launches_keep_only_direct_launches_and_are_bounded(monkeypatch):
    from gpu_backend.launches import launch as launcher

    kept: launcher.KeptLaunches = {}
    monkeypatch.setattr(launcher, "prepared", lambda kernel, args: None)  # no direct launch for this signature
    launcher.keep_launch(kept, "a", "kernel", (), 1, 1, lambda: pytest.fail("constants made for a launch not kept"))
    assert kept == {}
    monkeypatch.setattr(launcher, "prepared", lambda kernel, args: ("direct", kernel, args))
    monkeypatch.setattr(launcher, "LAUNCHES_KEPT", 2)
    for name in "abc":
        launcher.keep_launch(kept, name, name.upper(), (1, 2), (4, 1), 32, lambda name=name: (name, (5, 6)))
        assert kept[name] == (("direct", name.upper(), (1, 2)), (4, 1), 32, name, (5, 6))
    assert list(kept) == ["c"]  # full at two entries: it started again


# ---- reductions ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sum", "prod", "max", "min", "band", "bor", "bxor"])
@given(st.data(), shapes(1, 4), st.sampled_from(list(DTYPES)), st.sampled_from([None, 2, 3]))
def test_reduction(kind, data, shape, name, chunks):
    if name == "bool" and kind in ("sum", "prod") or name in FLOATS and kind in ("band", "bor", "bxor"):
        kind = "max"
    dtype = DTYPES[name]
    x = data.draw(views(shape, dtype, special=data.draw(st.booleans())))
    dims = tuple(sorted(set(data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape))))))
    op = ops.Reduction(kind, dims)
    kept = tuple(n for i, n in enumerate(shape) if i not in dims)
    order = data.draw(orders(len(kept)))
    out = download(reduce_into(DeviceBuffer.empty(kept, dtype, order), upload(x), dims, kind, chunks))
    assert has_layout(out, order)
    want = reference(op, x)
    if name in FLOATS and kind in ("sum", "prod"):
        terms = max(int(np.prod([shape[d] for d in dims])), 1)
        close(out, want, ulps=2 * terms)  # any order of summation, within the spec's bound
    else:
        same(out, want)


def test_reduction_per_block_and_chunked():
    """The fastest axis reduced, and over many elements: the block-wide tree,
    then a second pass over the chunks' partials."""
    x = np.arange(300 * 7, dtype=np.float32).reshape(7, 300) % 13 - 6
    x[3, 17] = np.nan
    for chunks in (None, 2, 5):
        out = download(reduce_into(DeviceBuffer.empty((7,), x.dtype), upload(x), (1,), "sum", chunks))
        same(out, x.sum(1, dtype=np.float64).astype(np.float32))
        top = download(reduce_into(DeviceBuffer.empty((), x.dtype), upload(x), (0, 1), "max", chunks))
        assert np.isnan(top)


@pytest.mark.parametrize("loads, pairs, split", [(8, False, 1), (16, True, 1), (8, False, 2)])
def test_reduction_to_one_value_in_one_launch(monkeypatch, loads, pairs, split):
    """All axes into one value over several chunks: one launch whose last block
    folds the chunks' partials, and leaves its count at zero for the next. With
    fewer blocks than chunks (the simulator's two blocks, or one), each block
    takes chunks in turn."""
    from gpu_backend.kernels import reduce

    monkeypatch.setattr(reduce, "WIDE_LOADS", loads)
    monkeypatch.setattr(reduce, "PAIRED", frozenset({"sum", "max", "min"} if pairs else ()))
    monkeypatch.setattr(reduce, "TOTAL_SPLIT", split)
    reduce.clear_plans()
    x = (np.arange(5 * 61, dtype=np.float32).reshape(5, 61) % 11 - 5) * 0.25
    for chunks in (2, 3, 5):
        for kind, want in [("sum", x.sum(dtype=np.float64)), ("max", x.max()), ("min", x.min())]:
            out = download(reduce_into(DeviceBuffer.empty((), x.dtype), upload(x), (0, 1), kind, chunks))
            same(out, np.float32(want))
            assert download(DeviceBuffer.dense(reduce._counter(), (1,)))[0] == 0
    # A column per thread, its whole range in one pass, 16 loads at a time where they fit.
    y = np.arange(40 * 3, dtype=np.int64).reshape(40, 3) * 7919 % 1000 - 500
    same(download(reduce_into(DeviceBuffer.empty((3,), y.dtype), upload(y), (0,), "sum")), y.sum(0))


@pytest.mark.parametrize("name, kind", [("i64", "sum"), ("f32", "sum"), ("f32", "max"), ("f64", "min"),
                                        ("bool", "max"), ("bf16", "sum"), ("u8", "bxor")])
def test_reduction_over_contiguous_rows_takes_a_warp_a_row(monkeypatch, name, kind):
    """Rows reduced over their contiguous inner axis, a warp each, folded by
    shuffles (a GPU path: the simulator has no shuffles); row lengths no
    multiple of the warp or of its loads, rows apart by a gap."""
    from gpu_backend.kernels import reduce

    if reduce.SIMULATED:
        pytest.skip("warp shuffles run on a GPU only (the simulator takes the group kernel)")
    built, launched = reduce.warp_rows_kernel, []

    def spy(*args):
        launched.append(args)
        return built(*args)

    monkeypatch.setattr(reduce, "warp_rows_kernel", spy)  # where _reduce looks it up
    monkeypatch.setattr(reduce, "WARP_ROWS_FROM", 1)
    monkeypatch.setattr(reduce, "_plans", {})  # plans of the default threshold are not reused, nor these after
    dtype = DTYPES[name]
    rng = np.random.default_rng(7)
    whole = rng.integers(-40, 40, (37, 611)).astype(np.float64) * 0.375
    for cols in (300, 599):
        x = (whole > 0 if name == "bool" else whole.astype(dtype))[:, :cols]  # rows 611 apart
        if name == "f32":
            x[5, 3] = np.nan
        out = download(reduce_into(DeviceBuffer.empty((37,), dtype), upload(x), (1,), kind))
        same(out, reference(ops.Reduction(kind, (1,)), x))
    assert len(launched) == 2


@pytest.mark.parametrize("name", ["f32", "f64", "i32", "f16", "bf16"])
def test_outer_reductions_read_neighbouring_columns_by_vectors(monkeypatch, name):
    """An outer-axis reduction reads 4 or 2 neighbouring columns a thread by one
    vector load (16 bytes, else 8) where the columns are x's neighbouring
    elements, whole groups and aligned: every column folds in the scalar
    kernel's order, so the bits are those of a column a thread (no
    VECTOR_BYTES), NaN and all. An odd offset falls back to a column a thread."""
    from gpu_backend.kernels import reduce

    dtype = DTYPES[name]
    rng = np.random.default_rng(11)
    whole = (rng.integers(-40, 40, (37, 26)) * 0.3125).astype(dtype)
    if name == "f32":
        whole[4, 1], whole[30, 6] = np.nan, -np.inf
    size = dtype.itemsize
    up = upload(whole)
    # 24 columns of 24: 16-byte loads (2-byte dtypes: 8-byte ones, four lanes); 26 of 26: no whole number
    # of 4-lane groups, 8-byte loads (2-byte dtypes: none); 24 from the second column on: no aligned start
    for x, view, want_lanes in [(whole[:, :24], upload(np.ascontiguousarray(whole[:, :24])), 16 // max(size, 4)),
                                (whole, up, 2 if size >= 4 else 1), (whole[:, 1:25], up.take(1, 1, 25), 1)]:
        for kind in ("sum", "max", "min"):
            got = {}
            for vector_bytes in (16, 0):
                monkeypatch.setattr(reduce, "VECTOR_BYTES", {kind: vector_bytes})
                reduce.clear_plans()
                got[vector_bytes] = download(reduce_into(DeviceBuffer.empty((x.shape[1],), dtype), view, (0,), kind))
                (plan,) = reduce._plans.values()
                assert plan.path == "columns" and plan.lanes == (want_lanes if vector_bytes else 1)
            assert got[16].tobytes() == got[0].tobytes()
            same(got[16], reference(ops.Reduction(kind, (0,)), x))
    reduce.clear_plans()  # no launch kept under these knobs


@pytest.mark.parametrize("name", ["f32", "f64"])
def test_max_of_all_reads_vectors(monkeypatch, name):
    """max and min over all axes in one launch read vectors of neighbouring
    elements where aligned (their result is the same in any order); a sum
    keeps its scalar reads (its order) even where asked for vectors, and an
    unaligned run reads scalars."""
    from gpu_backend.kernels import reduce

    monkeypatch.setattr(reduce, "VECTOR_BYTES", {"max": 16, "min": 16, "sum": 16})

    dtype = DTYPES[name]
    n = 1040 if SIMULATED else 16640  # 64 values a thread of a block (8 threads under the simulator, 256 on a GPU)
    x = ((np.arange(n + 1) * 7919 % 2003 - 1001) * 0.25).astype(dtype)
    x[n // 2 + 3] = 900.5
    up = upload(x)
    for view, host, want_lanes in [(up.take(0, 0, n), x[:n], 16 // dtype.itemsize), (up.take(0, 1, n + 1), x[1:], 1)]:
        for kind in ("max", "min", "sum"):
            reduce.clear_plans()
            out = download(reduce_into(DeviceBuffer.empty((), dtype), view, (0,), kind, 3))
            (plan,) = reduce._plans.values()
            assert plan.path == "total" and plan.lanes == (1 if kind == "sum" else want_lanes)
            same(out, reference(ops.Reduction(kind, (0,)), host))
    reduce.clear_plans()


def test_reduction_groups_share_a_block():
    """A short reduced range: several outputs per block, each folded by its own
    group of threads, the last block's surplus groups folding nothing."""
    x = (np.arange(13 * 24, dtype=np.int64).reshape(13, 24) * 7919) % 1000 - 500
    for kind, want in [("sum", x.sum(1)), ("max", x.max(1))]:
        out = download(reduce_into(DeviceBuffer.empty((13,), x.dtype), upload(x), (1,), kind))
        same(out, want)


def test_reduction_across_rows_of_unmergeable_axes():
    """Reduced axes that no stride merges: the fold walks row after row."""
    x = np.arange(2 * 3 * 9, dtype=np.int32).reshape(2, 3, 9)[:, :, ::2]
    for dims in [(1, 2), (0, 1, 2), (0, 2)]:
        for chunks in (None, 2, 4):
            kept = tuple(n for i, n in enumerate(x.shape) if i not in dims)
            out = download(reduce_into(DeviceBuffer.empty(kept, x.dtype), upload(x), dims, "sum", chunks))
            same(out, x.sum(dims, dtype=np.int32))


def test_empty_reduction_gives_the_identity():
    x = np.zeros((0, 3), np.int8)
    for kind, want in [("sum", 0), ("prod", 1), ("max", -128), ("min", 127), ("band", -1)]:
        out = download(reduce_into(DeviceBuffer.empty((3,), x.dtype), upload(x), (0,), kind))
        same(out, np.full(3, want, np.int8))


# ---- matmul ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["i8", "u8", "i64", "f16", "f32", "f64"])
@given(st.data(), shapes(0, 2, 3), st.integers(1, 7), st.integers(1, 7), st.integers(1, 7), st.booleans())
def test_matmul(name, data, batch, m, k, n, library):
    dtype = DTYPES[name]
    a = data.draw(views((*batch, m, k), dtype))
    b = data.draw(views((*batch, k, n), dtype))
    order = data.draw(orders(len(batch) + 2))
    out = DeviceBuffer.empty((*batch, m, n), dtype, order)
    got = download(matmul_into(out, upload(a), upload(b), library))
    assert has_layout(got, order)
    same(got, reference(ops.Matmul(), a, b))  # integer-valued floats: exact in any order


def test_host_copies_hand_the_driver_addresses_and_bytes(monkeypatch):
    """Memory's uploads and downloads are one driver call each, with the device
    address, the host array's own address and its byte count; a refusal raises."""
    from gpu_backend.buffers import memory
    from gpu_backend.launches.driver_launch import LaunchError

    calls = []
    answer = [0]
    copies = (lambda dst, src, n: calls.append(("up", dst, src, n)) or answer[0],
              lambda dst, src, n: calls.append(("down", dst, src, n)) or answer[0],
              lambda host, readonly=False: host.ctypes.data)
    monkeypatch.setattr(memory, "_host_copies", lambda: copies)
    device = memory.Memory(1 << 40, 6, np.dtype(np.float32), None)
    host = np.arange(6, dtype=np.float32)
    device.upload(host)
    device.download(host)
    assert calls == [("up", 1 << 40, host.ctypes.data, 24), ("down", host.ctypes.data, 1 << 40, 24)]
    answer[0] = 1
    with pytest.raises(LaunchError, match="cuMemcpyHtoD"):
        device.upload(host)
