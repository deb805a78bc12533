"""where's and pad's plans kept per layout (gpu_backend/kernels/masks.py, window.py, window_kernels.py):
a kept plan is never taken for another layout (values bit for bit as layouts change under one
shape), the caches are bounded, and a kept driver launch (pooled memory) hands the driver the
very parameters a launch planned afresh for the same buffers would."""

import numpy as np
import pytest

from gpu_backend import impls
from gpu_backend.buffers import memory
from gpu_backend.buffers.buffer import DeviceBuffer, download, upload
from gpu_backend.buffers.pool import SizeClassPool
from gpu_backend.impls import GPU_IMPLS, compute
from gpu_backend.kernels import elementwise, masks, window, window_kernels
from gpu_backend.launches import launch
from interp.impls import IMPLS
from refir.ir import ops
from refir.ir.types import DTYPES

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(f"u{x.itemsize}")


def test_where_and_pad_take_no_kept_plan_of_another_layout():
    rng = np.random.default_rng(11)
    masks.clear_plans()
    base = {d: (rng.standard_normal((3, 4, 144)) * 30).astype(DTYPES[d]) for d in ("f32", "bf16", "i8", "f64")}
    c = rng.random((3, 4, 144)) < 0.5
    for d, x in base.items():  # one shape [3, 4, 72], each time other strides, offsets or dtype
        views = [x[:, :, :72], x[:, :, 1:73], x[:, :, ::2], x[:, ::-1, 5:77], np.ascontiguousarray(x[:, :, :72])]
        for v in views:
            fixed = np.ascontiguousarray(x[:, :, 8:80])  # only x's layout changes
            for cond, y in [(c[:, :, :72], v[::-1]), (c[:1, :, 2:74], v[:1, :1, :1]), (c[:, :1, 3:75], v),
                            (c[:, :, :72], fixed)]:
                want = IMPLS[ops.Where](ops.Where(), cond, v, y)
                got = download(GPU_IMPLS[ops.Where](ops.Where(), (0, 1, 2), upload(cond), upload(v), upload(y)))
                assert np.array_equal(_bits(got), _bits(want)), (d, v.strides, cond.strides)
            for value in (0.0, -0.0, 1, float("nan")) if d != "i8" else (0, -1):
                op = ops.Pad((1, 0, 1), (0, 2, 1), value)
                for order in [(0, 1, 2), (2, 1, 0)]:
                    want = IMPLS[ops.Pad](op, v)
                    got = download(GPU_IMPLS[ops.Pad](op, order, upload(v)))
                    assert np.array_equal(_bits(got), _bits(want)), (d, v.strides, value, order)


def test_the_plan_caches_are_bounded(monkeypatch):
    monkeypatch.setattr(masks, "PLANS_KEPT", 2)
    monkeypatch.setattr(window, "PAD_PLANS_KEPT", 2)
    rng = np.random.default_rng(2)
    for n in range(3, 9):
        x = rng.standard_normal((2, n)).astype(np.float32)
        c = rng.random((2, n)) < 0.5
        got = download(GPU_IMPLS[ops.Where](ops.Where(), (0, 1), upload(c), upload(x), upload(x[::-1])))
        assert np.array_equal(got, np.where(c, x, x[::-1]))
        pad = ops.Pad((1, 0), (0, 1), 7)
        assert np.array_equal(download(GPU_IMPLS[ops.Pad](pad, (0, 1), upload(x))), IMPLS[ops.Pad](pad, x))
        assert len(masks._where_plans) <= 2 and len(window._pad_plans) <= 2


class _Block:
    def __init__(self, address: int) -> None:
        self.device_pointer_value = address


class _Noted:
    """A signature whose driver launch notes what it is handed."""

    packers = None

    def __init__(self, notes: list) -> None:
        self.direct = lambda grid, block, params: notes.append((grid, block, tuple(params)))


class _Signatures(dict):
    def __init__(self, notes: list) -> None:
        super().__init__()
        self.notes = notes

    def get(self, key, default=None):
        return self.setdefault(key, _Noted(self.notes))


@pytest.fixture
def driver(monkeypatch):
    """Pooled Memory at fake addresses and driver launches that note their parameters."""
    top = [1 << 20]

    def upstream(n):
        top[0] += n
        return _Block(top[0] - n)

    notes: list = []
    monkeypatch.setattr(memory, "_pool", SizeClassPool(upstream))
    monkeypatch.setattr(launch, "FAST", True)
    monkeypatch.setattr(launch, "_signatures", _Signatures(notes))
    monkeypatch.setattr(impls, "to_device", lambda a: memory.empty(a.size, a.dtype))
    impls._held_scalar.cache_clear()  # where's held scalars: of this fake memory only, while it lasts
    masks.clear_plans()
    window_kernels._ready_framed.clear()
    window_kernels._framed_plans.clear()
    yield notes
    impls._held_scalar.cache_clear()
    elementwise.clear_plans()  # copy_into's and the fills' kept launches of the noting driver
    masks.clear_plans()
    window_kernels._ready_framed.clear()
    window_kernels._framed_plans.clear()


def _buffer(shape, dtype, perm=None, index=None) -> DeviceBuffer:
    b = DeviceBuffer.empty(shape, np.dtype(dtype))
    b = b.transpose(perm) if perm else b
    return b[index] if index else b


# where's four kernels: dense; words (an attention mask, a scalar); the element rows (rows off a word);
# the walk (short rows, permuted)
WHERES = [
    lambda: (_buffer((4, 96), bool), _buffer((4, 96), "f4"), _buffer((4, 96), "f4")),
    lambda: (_buffer((1, 64, 64), bool), _buffer((3, 64, 64), "f4"), float("-inf")),
    lambda: (_buffer((3, 97), bool, index=(slice(None), slice(1, 97))), _buffer((3, 98), "f4",
             index=(slice(None), slice(1, 97))), _buffer((3, 96), "f4")),
    lambda: (_buffer((5, 6), bool, perm=(1, 0)), _buffer((6, 5), "f2"), _buffer((5, 6), "f2", perm=(1, 0))),
]


@pytest.mark.parametrize("made", range(len(WHERES)))
def test_a_kept_where_launch_hands_the_driver_what_a_fresh_plan_would(driver, made):
    notes = driver
    compute(ops.Where(), tuple(range(3 if made == 1 else 2)), list(WHERES[made]()))  # planned, launched, kept
    args = list(WHERES[made]())  # other memory, the same layout
    order = tuple(range(3 if made == 1 else 2))
    before = launch.counts["prepared"]
    kept_out = compute(ops.Where(), order, args)
    assert launch.counts["prepared"] == before + 1  # the kept launch
    masks.clear_plans()
    fresh_out = compute(ops.Where(), order, args)  # planned afresh for the same operands (its result: other memory)
    (grid, block, kept), (grid2, block2, fresh) = notes[-2], notes[-1]
    assert (grid, block) == (grid2, block2) and len(kept) == len(fresh)
    differ = [(a, b) for a, b in zip(kept, fresh) if a != b]
    assert differ and set(differ) == {(kept_out.data.ptr, fresh_out.data.ptr)}  # only the result's address


def test_a_kept_framed_pad_hands_the_driver_what_a_fresh_plan_would(driver):
    notes = driver
    op = ops.Pad((1, 1), (1, 1), 0.0)

    def x():
        return _buffer((6, 130), "f4", index=(slice(None), slice(1, 129)))

    compute(op, (0, 1), [x()])
    given = x()
    before = launch.counts["prepared"]
    kept_out = compute(op, (0, 1), [given])
    assert launch.counts["prepared"] == before + 2  # the framed copy and the fill, both kept
    kept = notes[-2]
    window_kernels._ready_framed.clear()
    window_kernels._framed_plans.clear()
    fresh_out = compute(op, (0, 1), [given])
    fresh = notes[-2]
    assert kept[:2] == fresh[:2] and len(kept[2]) == len(fresh[2])
    differ = [(a, b) for a, b in zip(kept[2], fresh[2]) if a != b]
    assert differ == [(kept_out.data.ptr, fresh_out.data.ptr)] * 2  # the result's memory: as elements, as words


def test_slice_and_reshape_take_no_kept_view_of_another_layout():
    """slice's view and reshape's view strides are kept by layout: the same op on operands of one
    shape and other strides (permuted, stepped, reversed, offset) reads each one's own elements."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 8, 10)).astype(np.float32)
    cut, flat = ops.Slice((1, 2), (1, 0), (5, 9), (1, 3)), ops.Reshape((24, 2))
    turned = x.transpose(2, 1, 0)[:4, :6, :2]
    for v in [np.ascontiguousarray(turned), x[:4, :6, :2], x[2:, 2:, 8:], x[::-1, :6, ::-5][:4], turned]:
        for order in [(0, 1, 2), (1, 2, 0)]:
            got = download(GPU_IMPLS[ops.Slice](cut, order, upload(v)))
            assert np.array_equal(got, v[:, 1:5, 0:9:3]), (v.strides, order)
        for order in [(0, 1), (1, 0)]:
            got = download(GPU_IMPLS[ops.Reshape](flat, order, upload(v)))
            assert np.array_equal(got, v.reshape(24, 2)), (v.strides, order)


def test_where_holds_a_scalar_by_its_type_and_exact_value():
    """where's held scalar is kept by the literal's type and exact bits: -0.0, 0.0, a NaN, an int,
    a bool and a numpy scalar each give their own values in the operand's dtype."""
    impls._held_scalar.cache_clear()
    rng = np.random.default_rng(6)
    c, x = rng.random((2, 70)) < 0.5, rng.standard_normal((2, 70)).astype(np.float32)
    for value in [0.0, -0.0, 0.0, float("nan"), 3, True, np.float64(-0.0), np.array(2.5), -0.0]:
        got = download(compute(ops.Where(), (0, 1), [upload(c), upload(x), value]))
        assert np.array_equal(_bits(got), _bits(np.where(c, x, np.float32(value)))), value
    assert impls._held_scalar.cache_info().currsize == 7  # 0.0, -0.0, nan, 3, True and the two numpy ones
