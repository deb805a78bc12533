"""What refir.run keeps between runs of one program (refir/ir/program_cache.py): reused on
the next run of the same signature, never for another program, other shapes,
dtypes or strides, and never the inputs' values."""

import numpy as np
import pytest
from helpers import SEED2

import refir
import refir.running.backends
import refir.running.bindings
import refir.running.prepare
import refir.running.shard_inputs
from interp import spmd
from refir.errors import InputError
from refir.ir.program_cache import Memo, shape_signature


def inputs(m: int, k: int, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.integers(-4, 5, (m, k)).astype(np.float32), "w": rng.integers(-4, 5, (k, n)).astype(np.float32),
            "bias": rng.integers(-4, 5, n).astype(np.float32)}


def expected(given: dict[str, np.ndarray]) -> np.ndarray:
    return np.maximum(given["x"] @ given["w"] + given["bias"], 0)


MEMOS = {"bindings": refir.running.prepare._BOUND, "input blocks": refir.running.shard_inputs._BLOCKS,
         "world": refir.running.backends._WORLDS, "local input checks": refir.running.bindings._LOCAL_OK,
         "communication types": spmd._RESOLVED}


def test_a_second_run_of_one_signature_reuses_every_entry():
    program, given = refir.load(SEED2), inputs(4, 6, 3)
    refir.run(program, given)
    before = {name: memo.hits for name, memo in MEMOS.items()}
    r = refir.run(program, given)
    assert {name: memo.hits - before[name] for name, memo in MEMOS.items()} == dict.fromkeys(MEMOS, 1)
    assert np.array_equal(r.outputs["out"], expected(given)) and r.bindings == {"M": 4, "K": 6, "N": 3}


def test_other_extents_dtypes_and_values_are_never_served_a_kept_entry():
    program = refir.load(SEED2)
    first = inputs(4, 6, 3)
    refir.run(program, first)
    other = inputs(5, 8, 2, seed=1)  # other extents: other bindings, other blocks
    r = refir.run(program, other)
    assert r.bindings == {"M": 5, "K": 8, "N": 2} and np.array_equal(r.outputs["out"], expected(other))
    first["x"][...] = -first["x"]  # the same arrays, changed in place: values are never kept
    assert np.array_equal(refir.run(program, first).outputs["out"], expected(first))
    with pytest.raises(InputError, match="dtype float64"):  # the shapes of a good run, another dtype
        refir.run(program, {**first, "x": first["x"].astype(np.float64)})
    with pytest.raises(InputError, match="but 7 from axis 0"):
        refir.run(program, {**first, "bias": np.zeros(7, np.float32)})


def test_another_program_of_the_same_text_is_bound_afresh():
    given = inputs(4, 6, 3)
    refir.run(refir.load(SEED2), given)
    other = refir.load(SEED2.replace("relu(y)", "neg(y)"))
    assert np.array_equal(refir.run(other, given).outputs["out"], -(given["x"] @ given["w"] + given["bias"]))


def test_local_buffers_of_other_strides_are_checked_again():
    program = refir.load("mesh m = [0, 1]\nfunc main(x: f32[4, 6@DIDx] layout[1, 0]) {\n  y = neg(x)\n  return y\n}\n")
    lowered = refir.run(program, {"x": np.zeros((4, 6), np.float32)}).lowered
    dense = {"x": {d: np.asfortranarray(np.ones((4, 3), np.float32)) for d in (0, 1)}}
    refir.running.bindings.check_local_inputs(lowered.checked, dense, {})
    refir.running.bindings.check_local_inputs(lowered.checked, dense, {})  # kept
    row_major = {"x": {d: np.ones((4, 3), np.float32) for d in (0, 1)}}  # same shapes, other strides
    with pytest.raises(InputError, match="dense in its layout"):
        refir.running.bindings.check_local_inputs(lowered.checked, row_major, {})


def test_a_local_result_is_a_buffer_of_its_own_with_the_declared_strides():
    program = refir.load("mesh m = [0, 1]\nfunc main(x: f32[4, 6@DIDx]) {\n"
                         "  z = neg(x)\n  y: f32[4, 6@DIDx] = set(z)\n  t: f32[4, 6@DIDx] layout[1, 0] = neg(x)\n"
                         "  return y, z, t\n}\n")
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    r = refir.run(program, {"x": x}, keep="all")
    for d in (0, 1):  # the set's result is a copy of z, not z itself
        assert not np.shares_memory(r.kept["y"][d], r.kept["z"][d]) and r.kept["y"][d].strides == (12, 4)
        assert r.kept["z"][d].strides == (12, 4) and r.kept["t"][d].strides == (4, 16)
    assert np.array_equal(r.outputs["y"], -x) and np.array_equal(r.outputs["t"], -x)


def test_a_memo_serves_only_its_owner_and_keeps_the_last_used():
    memo: Memo[int] = Memo(size=2)
    a, b, c = object(), object(), object()
    assert memo.get(a, "s", lambda: 1) == 1 and memo.get(a, "s", lambda: 2) == 1 and memo.hits == 1
    assert memo.get(b, "s", lambda: 3) == 3  # another owner, the same signature
    memo.get(a, "s", lambda: 4)
    memo.get(c, "s", lambda: 5)  # b, the least recently used, goes
    assert memo.get(b, "s", lambda: 6) == 6 and len(memo.entries) == 2
    with pytest.raises(ValueError):
        memo.get(a, "t", lambda: int("x"))
    assert memo.get(a, "t", lambda: 7) == 7  # a failure keeps nothing


def test_a_signature_names_shapes_dtypes_and_strides_of_plain_arrays_only():
    x = np.zeros((2, 3), np.float32)
    assert shape_signature({"x": x}) == (("x", np.dtype(np.float32), (2, 3), (12, 4)),)
    assert shape_signature({"x": x.T})[0][3] == (4, 12)
    assert shape_signature({"x": np.ma.masked_array(x)}) is None and shape_signature({"x": [1.0]}) is None


def test_received_buffers_are_each_devices_own():
    program = refir.load("mesh m = [0, 1, 2]\nfunc main(x: f32[4, 6@DIDx]) {\n"
                         "  s = sum(x, dims=[1])\n  g: f32[4] on m = set(s)\n  return s, g\n}\n")
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    r = refir.run(program, {"x": x}, keep="all")
    for d, e in [(0, 1), (0, 2), (1, 2)]:
        assert not np.shares_memory(r.kept["s"][d], r.kept["s"][e])
    assert np.array_equal(r.outputs["s"], x.sum(1)) and r.kept["s"][0].strides == (4,)


def test_replicas_are_compared_bit_for_bit_in_any_layout():
    from refir.running.assemble_outputs import same_bits

    a = np.array([[np.nan, -0.0], [1.0, 2.0]], np.float32)
    other_nan = a.copy()
    other_nan.view(np.uint32)[0, 0] ^= 1
    assert same_bits(a, np.asfortranarray(a)) and same_bits(a[:, ::-1], a[:, ::-1].copy())
    assert not same_bits(a, np.abs(a)) and not same_bits(a, other_nan)
    assert same_bits(np.array(True), np.array(True)) and not same_bits(np.zeros(2, np.int8), np.ones(2, np.int8))


def test_has_and_put_keep_a_value_only_for_its_owner():
    memo: Memo[None] = Memo(size=2)
    a, b = object(), object()
    assert not memo.has(a, "s")
    memo.put(a, "s", None)  # a kept None is still a value: has() tells it from none kept
    assert memo.has(a, "s") and not memo.has(b, "s") and memo.hits == 1
    memo.put(b, "s", None)
    memo.put(b, "t", None)  # three entries in a memo of two: a's, the oldest, goes
    assert not memo.has(a, "s") and memo.has(b, "t")


def test_result_headers_name_dtypes_by_their_str_where_it_names_them():
    import ml_dtypes

    from refir.world.exchange import entry, wire_dtype

    for dtype in (np.float32, np.dtype(">f8"), np.bool_, np.int8, np.float16, ml_dtypes.bfloat16):
        dtype = np.dtype(dtype)
        assert np.dtype(wire_dtype(dtype)) == dtype
    assert wire_dtype(np.dtype(np.float32)) == "<f4" and wire_dtype(np.dtype(ml_dtypes.bfloat16)) is not None
    assert not isinstance(wire_dtype(np.dtype(ml_dtypes.bfloat16)), str)  # '<V2' would come back as void
    assert entry("y", 1, np.zeros((2, 3), np.float32).T) == ("y", 1, (3, 2), "<f4", (1, 0))
