"""The gpu kernels of where, iota and pad's border on every layout, bit for bit against
interp's numpy: operands with gaps, negative steps, permuted axes and broadcast axes,
results in every memory order, short and long rows (the dense, row and walking kernels)."""

from itertools import permutations, product

import numpy as np
import pytest
from test_gpu_kernels import strided

from gpu_backend import impls
from gpu_backend.buffers.buffer import download, upload
from gpu_backend.impls import GPU_IMPLS, PER_DEVICE, compute
from gpu_backend.kernels import masks
from gpu_backend.kernels.where_words import where_words_kernel
from gpu_backend.kernels.window import border
from interp.impls import IMPLS
from interp.masks import iota_block
from refir.ir import ops
from refir.ir.types import DTYPES, Axis, Mesh, TensorType, dense_strides

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(f"u{x.itemsize}")


def _check(out, want: np.ndarray, order: tuple[int, ...]) -> None:
    got = download(out)
    assert got.strides == dense_strides(got.shape, order, got.itemsize)  # dense in the asked layout
    assert got.shape == want.shape and np.array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("words", [True, False])
@pytest.mark.parametrize("dtype", ["f32", "bf16", "i8", "f64", "bool"])
def test_where_on_strided_broadcast_and_dense_operands_in_every_order(dtype, words, monkeypatch):
    monkeypatch.setattr(masks, "WHERE_WORDS", words)
    masks.clear_plans()  # launches kept by earlier tests (pooled memory, on a GPU) would pass the spy by
    rng = np.random.default_rng(3)
    t = DTYPES[dtype]
    walked = []
    real = masks.launch
    monkeypatch.setattr(masks, "launch", lambda k, *a: (walked.append(k), real(k, *a))[1])
    for shape in [(4, 3, 5), (2, 3, 40), (2, 2, 84), (1, 1, 150)]:  # long rows: `_where_rows`, a row in chunks
        c = strided(rng, shape, np.dtype(bool))
        x, y = strided(rng, shape, t), strided(rng, shape, t)
        cases = [(c, x, y), (np.ascontiguousarray(c), np.ascontiguousarray(x), np.ascontiguousarray(y)),
                 (c[:1, :, :1], x, y[:, :1]), (c, x[..., :1], y[:1, :1, :1]),
                 (np.ascontiguousarray(c[:1]), np.ascontiguousarray(x), y[:1, :1, :1])]  # an attention mask
        for args in cases:
            want = IMPLS[ops.Where](ops.Where(), *args)
            for order in permutations(range(3)):
                _check(GPU_IMPLS[ops.Where](ops.Where(), order, *[upload(a) for a in args]), want, order)
    rows = set(walked) - {masks._where_dense, masks._where_walk}  # the row kernels, made per inner steps
    assert {masks._where_dense, masks._where_walk} <= set(walked) and masks._where_rows in rows  # every kernel ran
    made = {key for key in product((-1, 0, 1), repeat=3) if masks.where_rows_kernel(*key) in rows}
    f = 8 // DTYPES[dtype].itemsize
    worded = {key for key in product((0, 1), repeat=3) if f > 1 and where_words_kernel(f, *key) in rows}
    if words and f > 1:  # rows of whole words: the word kernel, unit steps and broadcasts along the rows
        assert (1, 1, 0) in worded and (-1, -1, -1) in made  # (the dedicated test below: the rest)
    else:
        assert {(-1, -1, -1), (1, 1, 1), (1, 1, 0)} <= made and not worded  # any steps; unit; y broadcast


@pytest.mark.parametrize("dtype", ["f32", "bf16", "i8"])
def test_where_as_words_takes_rows_of_whole_words_alike_and_only_those(dtype, monkeypatch):
    """The word kernel: each operand read along the rows or broadcast along them (its row's
    value repeated into words), a long row in chunks; rows starting off a word, or not whole
    words, keep the element kernel; the values bit for bit in every case."""
    rng = np.random.default_rng(8)
    t = DTYPES[dtype]
    f = 8 // t.itemsize
    launched = []
    real = masks.launch
    monkeypatch.setattr(masks, "launch", lambda k, *a: (launched.append(k), real(k, *a))[1])

    def made(*shape):
        return (rng.standard_normal(shape) * 50).astype(t)

    c, x, y = rng.random((3, 2, 96)) < 0.5, made(3, 2, 96), made(3, 2, 104)[:, :, :96]  # y: rows with gaps
    odd = made(3, 2, 97)  # rows at an odd stride: every other one starts off a word
    cases = [((c, x, y), (1, 1, 1)), ((c[:, :, :1], x, y[:1, :1, :1]), (0, 1, 0)),
             ((c, x[:, :, :1], y), (1, 0, 1)), ((c[:1], x, made(1, 1, 1)), (1, 1, 0)),
             ((rng.random((1, 1, 640)) < 0.5, made(1, 1, 640), made(1, 1, 1)), (1, 1, 0)),  # one row, in chunks
             ((c, odd[:, :, :96], y), None),  # x's rows start off a word
             ((c[:, :, :93], x[:, :, :93], y[:, :, :93]), None)]  # not whole words
    for args, key in cases:
        launched.clear()
        want = IMPLS[ops.Where](ops.Where(), *args)
        _check(GPU_IMPLS[ops.Where](ops.Where(), (0, 1, 2), *[upload(a) for a in args]), want, (0, 1, 2))
        if key is None:
            assert not any(k is where_words_kernel(f, *q) for k in launched for q in product((0, 1), repeat=3))
        else:
            assert launched == [where_words_kernel(f, *key)]


def test_where_uploads_a_python_scalar_once_and_keeps_its_bits(monkeypatch):
    """where's scalar operand is held on the device by its bits (an upload a call waited for the
    stream): the same bits upload once, other bits (-0.0 against 0.0, NaN) upload their own."""
    uploads = []
    real = impls.to_device
    monkeypatch.setattr(impls, "to_device", lambda a: (uploads.append(a.copy()), real(a))[1])
    impls._held_scalar.cache_clear()
    rng = np.random.default_rng(5)
    c, x = rng.random((3, 70)) < 0.5, rng.standard_normal((3, 70)).astype(np.float32)
    for value in [float("-inf"), float("-inf"), -0.0, 0.0, float("nan"), -0.0]:
        got = download(compute(ops.Where(), (0, 1), [upload(c), upload(x), value]))
        assert np.array_equal(_bits(got), _bits(IMPLS[ops.Where](ops.Where(), c, x, np.float32(value))))
    held = [-np.inf, -0.0, 0.0, np.nan]  # each once, in the order first met
    assert [_bits(u).tolist() for u in uploads] == [_bits(np.float32([v])).tolist() for v in held]


def _iota_type(dtype: str, extents: tuple[int, ...], order: tuple[int, ...]) -> TensorType:
    return TensorType(dtype, tuple(Axis(n, None) for n in extents), Mesh("m", (1,), (0,)), order)


@pytest.mark.parametrize("dtype", ["i32", "f32", "bf16", "i8", "i64"])
def test_iota_along_every_axis_in_every_order(dtype, monkeypatch):
    launched = []
    real = masks.launch
    monkeypatch.setattr(masks, "launch", lambda k, *a: (launched.append(k), real(k, *a))[1])
    # rows of 96 and 200: integers narrower than 8 bytes as whole words (one row in chunks)
    for extents in [(3, 1, 5), (2, 37, 4), (70, 3, 2), (2, 3, 96), (1, 1, 200)]:
        for axis in range(3):
            op = ops.Iota(axis)
            for order in permutations(range(3)):
                t = _iota_type(dtype, extents, order)
                want = iota_block(op, t, 0, list(extents))
                _check(PER_DEVICE[ops.Iota](op, order, t, 0, list(extents)), want, order)
    size = DTYPES[dtype].itemsize
    words = masks._iota_words_kernel(8 // size, 8 * size) if dtype[0] == "i" and size < 8 else None
    assert (words in launched) == (words is not None)


def test_iota_walk_puts_the_axis_in_the_mid_or_inner_place():
    assert masks.iota_walk((4, 6), (6, 1), 0) == ((1, 4, 6), 1, 0)
    assert masks.iota_walk((4, 6), (6, 1), 1) == ((4, 1, 6), 0, 1)
    assert masks.iota_walk((4, 6), (1, 4), 0) == ((6, 1, 4), 0, 1)
    assert masks.iota_walk((4, 1, 6), (6, 6, 1), 1) == ((1, 1, 24), 0, 0)


def test_pad_border_slabs_cover_the_rest_once():
    for shape, low, inner in [((5, 6, 4), (1, 0, 2), (3, 6, 1)), ((3, 4), (1, 1), (0, 2)), ((2, 2), (0, 0), (2, 2)),
                              ((4, 5), (1, 1), (2, 3)), ((2, 3), (1, 1), (0, 1))]:
        if shape == (4, 5):  # one index each side of the box on both axes: one slab an axis
            assert len(border(shape, low, inner)) == 2
        count = np.zeros(shape, int)
        for slab in border(shape, low, inner):
            count[slab] += 1
        box = np.zeros(shape, int)
        box[tuple(slice(lo, lo + n) for lo, n in zip(low, inner))] = 1
        assert np.array_equal(count + box, np.ones(shape, int)), (shape, low, inner)


@pytest.mark.parametrize("dtype", ["f32", "bf16", "bool"])
def test_pad_of_an_empty_and_of_a_strided_operand_in_every_order(dtype):
    rng = np.random.default_rng(5)
    x = strided(rng, (4, 3, 6), DTYPES[dtype])
    value = 1 if dtype == "bool" else -3
    for arg, op in [(x, ops.Pad((1, 0, 3), (2, 1, 0), value)), (x[:, :0], ops.Pad((1, 2, 0), (0, 1, 1), value)),
                    (x, ops.Pad((0, 0, 0), (0, 0, 0), value)), (x, ops.Pad((1, 1, 0), (1, 1, 2), value))]:
        want = IMPLS[ops.Pad](op, arg)
        for order in permutations(range(3)):
            _check(GPU_IMPLS[ops.Pad](op, order, upload(arg)), want, order)


@pytest.mark.parametrize("rows", [False, True])
@pytest.mark.parametrize("dtype", ["f32", "bf16", "i8"])
def test_pad_writes_its_rows_ends_with_the_interior_copy(dtype, rows, monkeypatch):
    """Rows of narrow elements along the last axis: one row_words launch writes the interior
    and the border either side of each row (frames one a thread, or wider than the block one
    by one), the fills only the other axes' slabs; a frame wider than FRAME_MAX, or short rows,
    copy and fill as before; every case bit for bit, from aligned, shifted and strided operands.
    `rows` (window.PAD_ROWS): the rows before and after along axis -2 blank rows of that launch, the
    fills only the slabs of the axes before it (none for 2-D)."""
    from gpu_backend.kernels import window, window_kernels

    monkeypatch.setattr(window, "PAD_ROWS", rows)
    rng = np.random.default_rng(9)
    t = DTYPES[dtype]
    framed, fills = [], []
    real_launch, real_fill = window_kernels.launch, window.fill_view
    monkeypatch.setattr(window_kernels, "launch", lambda k, *a: (framed.append(k), real_launch(k, *a))[1])
    monkeypatch.setattr(window, "fill_view", lambda v, value: (fills.append(v.shape), real_fill(v, value))[1])
    base = (rng.standard_normal((3, 5, 144)) * 40).astype(t)  # each operand's span whole 8-byte words
    cases = [(base[0, :, :72], (1, 1), (1, 1), True), (base[:, :, 1:73], (0, 2, 3), (1, 0, 5), True),
             (base[:2, ::2, 3:107], (1, 0, 8), (0, 1, 7), True), (base[0, :, :72], (0, 0), (2, 0), False),
             (base[0, :, :72], (1, 9), (1, 1), False), (base[0, :, :40], (1, 1), (1, 1), False)]
    for x, low, high, one_launch in cases:
        op = ops.Pad(low, high, -2)
        framed.clear()
        fills.clear()
        want = IMPLS[ops.Pad](op, x)
        order = tuple(range(x.ndim))
        _check(GPU_IMPLS[ops.Pad](op, order, upload(x)), want, order)
        assert len(framed) == (1 if one_launch else 0), (low, high)
        if one_launch:  # the fills: the slabs of every axis but the last (and, with rows, axis -2)
            assert len(fills) == len(border(want.shape, low, x.shape, x.ndim - (2 if rows else 1)))
    if rows:  # every order of a 3-D result whose last axis stays innermost: axis -2 is j however laid out
        for order in [(0, 1, 2), (1, 0, 2)]:
            x = base[:, :, 1:73]
            op = ops.Pad((1, 2, 1), (2, 1, 1), 5)
            framed.clear()
            fills.clear()
            _check(GPU_IMPLS[ops.Pad](op, order, upload(x)), IMPLS[ops.Pad](op, x), order)
            assert len(framed) == 1 and len(fills) == 2  # axis 0's slabs, before and after
    monkeypatch.setattr(window, "FRAMED", False)
    framed.clear()
    x = base[0, :, :72]
    _check(GPU_IMPLS[ops.Pad](ops.Pad((1, 1), (1, 1), -2), (0, 1), upload(x)),
           IMPLS[ops.Pad](ops.Pad((1, 1), (1, 1), -2), x), (0, 1))
    assert framed == []
