"""A binary op's Python scalar operand reaches the kernel as an argument in the
tensor dtype (gpu_backend/kernels/scalars.py), bit for bit as interp.impls converts
it, and without a device buffer of its own."""

import numpy as np
import pytest

import gpu_backend.impls as gi
from gpu_backend.buffers.buffer import download, upload
from interp.impls import compute as reference
from refir.ir import ops
from refir.ir.types import BF16

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # simulated wraps warn in numpy
CASES = [(np.float32, 2.5), (np.int8, 300), (np.uint8, -3), (np.int64, 2**70 + 5), (BF16, 1.5),
         (np.float16, 0.1), (np.float64, -7.25)]


# Each of elementwise's one-operand kernels: operands alike and dense (the
# grid-stride loop), unit-stride rows with gaps between them (the row kernel),
# and a result in another order (the general walk).
PATHS = {"dense": ((0, 1), 3), "rows": ((0, 1), 5), "walk": ((1, 0), 3)}


@pytest.mark.parametrize("dtype,value", CASES)
@pytest.mark.parametrize("scalar_first", [False, True])
@pytest.mark.parametrize("path", PATHS)
def test_a_scalar_operand_is_a_kernel_argument(monkeypatch, dtype, value, scalar_first, path):
    order, width = PATHS[path]
    x = (np.arange(2 * width) - 2).astype(dtype).reshape(2, width)[:, :3]  # width 5: rows 5 apart
    device = upload(x)
    assert device.strides == (width, 1)
    monkeypatch.setattr(gi, "to_device", lambda *_: pytest.fail("a scalar was uploaded"))
    for name in ("add", "sub", "mul", "maximum"):
        args = [value, x] if scalar_first else [x, value]
        got = download(gi.compute(ops.Binary(name), order, [device if a is x else a for a in args]))
        want = np.asarray(reference(ops.Binary(name), args, np.dtype(dtype)), dtype)
        bits = f"u{want.itemsize}"
        item = want.itemsize
        assert got.strides == ((3 * item, item) if order == (0, 1) else (item, 2 * item))  # dense in `order`
        np.testing.assert_array_equal(got.view(bits), want.view(bits))


def test_kernel_scalars_kept_only_where_equal_values_have_equal_bits():
    from gpu_backend.kernels import scalars

    f32 = np.dtype(np.float32)
    scalars._kernel_scalars.clear()
    assert scalars.kernel_scalar(0.5, f32) is scalars.kernel_scalar(0.5, f32)  # kept
    assert np.signbit(scalars.kernel_scalar(-0.0, f32)) and not np.signbit(scalars.kernel_scalar(0.0, f32))
    assert np.isnan(scalars.kernel_scalar(float("nan"), f32))
    assert scalars.kernel_scalar(True, f32) == 1 and scalars.kernel_scalar(300, np.dtype(np.int8)) == 44
    assert set(scalars._kernel_scalars) == {(float, 0.5, f32), (int, 300, np.dtype(np.int8))}  # no 0, NaN, bool
