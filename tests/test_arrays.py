"""refir.run takes host arrays through DLPack or __array__, without a copy, and
refuses device arrays, lists and object arrays with what to do instead."""

import numpy as np
import pytest

import refir
from refir.errors import InputError
from refir.running.input_arrays import host_array

PROGRAM = """mesh m = [0, 1]
func main(x: f32[4@DIDx, 3]) {
  y: f32[4, 3] = set(x)
  return y
}
"""


class DLPackOnly:
    """A host tensor that speaks only DLPack (like a torch CPU tensor)."""

    def __init__(self, a, device=(1, 0)):
        self.a, self.device = a, device

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.device


class ArrayOnly:
    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a


def test_dlpack_host_arrays_are_seen_without_a_copy():
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    seen = host_array("x", DLPackOnly(a))
    assert np.shares_memory(seen, a)
    got = refir.run(PROGRAM, {"x": DLPackOnly(a)}, backend="spmd").outputs["y"]
    np.testing.assert_array_equal(got, a)
    got = refir.run(PROGRAM, {"x": ArrayOnly(a)}, backend="global").outputs["y"]
    np.testing.assert_array_equal(got, a)


@pytest.mark.parametrize("value, message", [
    (DLPackOnly(np.zeros((4, 3), np.float32), device=(2, 0)), "on a CUDA device"),
    ([[1.0] * 3] * 4, "has no dtype"),
    (np.empty((4, 3), object), "Python objects"),
    ("text", "takes numpy arrays"),
])
def test_refusals_say_what_to_do(value, message):
    with pytest.raises(InputError, match=message):
        refir.run(PROGRAM, {"x": value}, backend="spmd")
