"""`refir.run`: checking inputs, handing each device its block, gathering results,
and the errors that name what is wrong."""

import numpy as np
import pytest
from helpers import EXAMPLES, needs_shared, shared_example
from hypothesis import given
from hypothesis import strategies as st

import refir
from interp.backend import run_spmd
from interp.spmd import NumpyLocal, execute
from interp.transport import InProcess
from refir.errors import InputError, MismatchError, RunError
from refir.ir.types import materialize, memory_order, receive_into, wire_bytes
from refir.lowering.lower import lower
from refir.running.inputs import default_bindings, draw_inputs

LAYOUTS = shared_example("layouts")
TWO_MESHES = shared_example("two_meshes")
SEEN = {}


def capture(lowered, inputs, scalars, world):
    """A backend (`test_runner:capture`) that keeps what the runner handed it."""
    SEEN.clear()
    SEEN.update(inputs)
    return run_spmd(lowered, inputs, scalars, world)


@needs_shared
def test_inputs_without_a_layout_are_views_and_with_one_are_dense_copies():
    x = np.arange(96, dtype=np.float32).reshape(12, 8)[::2]  # (6, 8), every other row: gaps
    y = np.ascontiguousarray(np.arange(48, dtype=np.float32).reshape(8, 6))
    r = refir.run(refir.load(LAYOUTS), {"x": x, "y": y}, backend="test_runner:capture")
    assert np.array_equal(r.outputs["g"], x.T + y)
    for d, cols in [(0, slice(0, 4)), (1, slice(4, 8))]:
        block = SEEN["x"][d]
        assert np.shares_memory(block, x) and block.strides == (64, 4)
        assert np.array_equal(block, x[:, cols])
        yd = SEEN["y"][d]  # y: f32[8, 6] layout[1, 0] reaches the backend column-major
        assert not np.shares_memory(yd, y) and yd.strides == (4, 32) and np.array_equal(yd, y)


def test_a_sharded_input_with_a_layout_reaches_each_device_dense_in_it():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    text = "mesh m = [1, 0]\nfunc main(x: f32[4@DIDx, 6] layout[1, 0]) {\n  y = neg(x)\n  return x, y\n}\n"
    r = refir.run(text, {"x": x}, backend="test_runner:capture")
    for d, rows in [(1, slice(0, 2)), (0, slice(2, 4))]:
        assert SEEN["x"][d].strides == (4, 8) and np.array_equal(SEEN["x"][d], x[rows])
        assert r.shards["x"][d].strides == (4, 8)  # a parameter returned as it is
        assert r.shards["y"][d].strides == (24, 4) and np.array_equal(r.shards["y"][d], -x[rows])
    assert r.lowered.segments[0].kind == "compute" and np.array_equal(r.outputs["x"], x)


@needs_shared
def test_negative_strides_and_gaps_in_inputs():
    big = np.arange(16 * 18, dtype=np.float32).reshape(16, 18) / 3
    x = big[::-2, 1:17:2][:6]  # (6, 8), strides (-144, 8)
    y = big[::2, ::-3]  # (8, 6), strides (144, -12)
    assert x.strides == (-144, 8) and y.strides == (144, -12)
    for backend in ("global", "spmd"):
        r = refir.run(refir.load(LAYOUTS), {"x": x, "y": y}, backend=backend)
        assert np.array_equal(r.outputs["g"], x.T + y)


@needs_shared
@pytest.mark.parametrize("backend", ["global", "spmd"])
def test_a_backend_never_writes_to_the_callers_inputs(backend):
    for path in EXAMPLES:
        checked = refir.verify(refir.load(path))
        inputs = draw_inputs(checked, default_bindings(checked), 0)
        before = {k: v.copy() for k, v in inputs.items()}
        for v in inputs.values():
            v.setflags(write=False)  # a write would raise
        refir.run(checked.program, inputs, backend=backend)
        assert all(np.array_equal(inputs[k], before[k]) for k in inputs)


@needs_shared
def test_run_result_fields():
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    s = np.ones((4, 6), np.float32)
    r = refir.run(str(TWO_MESHES), {"x": x, "s": s}, backend="spmd", world=6)
    assert r.backend == "spmd" and r.bindings == {}
    assert [seg.kind for seg in r.lowered.segments] == ["communication"] * 3 + ["compute", "communication"]
    assert set(r.shards["moved"]) == {2, 3} and set(r.shards["r"]) == {3}  # ranks 4 and 5 hold nothing
    g = refir.run(str(TWO_MESHES), {"x": x, "s": s}, backend="global")
    assert g.backend == "global" and g.shards == {} and g.lowered is None
    assert all(np.array_equal(g.outputs[k], r.outputs[k]) for k in g.outputs)


def test_choosing_a_function():
    text = "mesh m = [0]\nfunc double(x: i32[2]) {\n  y = add(x, x)\n  return y\n}\n" \
           "func square(x: i32[2]) {\n  y = mul(x, x)\n  return y\n}\n"
    x = np.array([3, -4], np.int32)
    assert refir.run(text, {"x": x}, func="square").outputs["y"].tolist() == [9, 16]
    assert refir.run(text, {"x": x}, func="double").outputs["y"].tolist() == [6, -8]
    with pytest.raises(InputError, match=r"no function named 'main' \(functions: double, square\)"):
        refir.run(text, {"x": x})


# ---- input errors name the input, axis, symbol or device --------------------------------

X68 = np.zeros((6, 8), np.float32)
Y86 = np.zeros((8, 6), np.float32)


@pytest.mark.parametrize("backend", ["global", "spmd"])
@pytest.mark.parametrize("inputs, message", [
    ({"x": X68}, "missing input 'y': main takes y: f32[8, 6] on m layout[1, 0] (inputs given: x)"),
    ({"x": X68, "y": Y86, "z": Y86}, "unknown input 'z': main takes x, y"),
    ({"x": X68.astype(np.float64), "y": Y86}, "input 'x' has dtype float64, but x: f32[6, 8@DIDx] on m needs float32"),
    ({"x": X68[0], "y": Y86}, "input 'x' has shape (8,) (rank 1), but x: f32[6, 8@DIDx] on m has rank 2"),
    ({"x": np.zeros((6, 9), np.float32), "y": Y86},
     "axis 1 of input 'x' has extent 9, but x: f32[6, 8@DIDx] on m declares 8@DIDx"),
    ({"x": X68.tolist(), "y": Y86}, "input 'x' is a list, not a numpy array, and has no dtype: "
     "pass np.asarray(value, dtype=...) with the parameter's dtype"),
])
@needs_shared
def test_bad_inputs(backend, inputs, message):
    with pytest.raises(InputError) as info:
        refir.run(refir.load(LAYOUTS), inputs, backend=backend)
    assert str(info.value) == message


def test_bad_symbols_and_broadcast_axes():
    text = "mesh m = [0, 1]\nmesh q = [0, 1, 2]\nfunc main(x: f32[R@DIDx, C] on m, y: f32[C, R] on m, " \
           "z: f32[b, C] on m) {\n  w: f32[C@DIDx, R] on q = set(y)\n  return w\n}\n"
    ok = {"x": np.zeros((4, 3), np.float32), "y": np.zeros((3, 4), np.float32), "z": np.zeros((1, 3), np.float32)}
    assert refir.run(text, ok).outputs["w"].shape == (3, 4)
    cases = [
        ({**ok, "y": np.zeros((4, 4), np.float32)},
         "symbol C is 3 from axis 1 of input 'x', but 4 from axis 0 of input 'y'"),
        ({**ok, "z": np.zeros((2, 3), np.float32)},
         "axis 0 of input 'z' has extent 2, but z: f32[b, C] on m declares b"),
    ]
    for inputs, message in cases:
        for backend in ("global", "spmd"):
            with pytest.raises(InputError) as info:
                refir.run(text, inputs, backend=backend)
            assert str(info.value) == message


def test_extents_that_do_not_divide_run_in_short_and_empty_blocks():
    text = "mesh m = [0, 1]\nmesh q = [0, 1, 2]\nfunc main(x: f32[R@DIDx, C] on m, y: f32[C, R] on m) {\n" \
           "  w: f32[C@DIDx, R] on q = set(y)\n  v: f32[R, C] on m = set(x)\n  return w, v\n}\n"
    x = np.arange(10, dtype=np.float32).reshape(5, 2)  # R = 5 over 2 devices: blocks 3, 2
    y = np.arange(10, dtype=np.float32).reshape(2, 5)  # C = 2 over 3 devices: blocks 1, 1, 0
    r = refir.run(text, {"x": x, "y": y})
    assert np.array_equal(r.outputs["w"], y) and np.array_equal(r.outputs["v"], x)
    assert [r.shards["w"][d].shape for d in range(3)] == [(1, 5), (1, 5), (0, 5)]
    assert [r.shards["w"][d].strides for d in range(3)] == [(20, 4), (20, 4), (20, 4)]
    assert np.array_equal(r.shards["w"][1], y[1:2])
    assert [r.shards["v"][d].shape for d in range(2)] == [(5, 2), (5, 2)]


@needs_shared
def test_a_mesh_naming_a_device_outside_the_world():
    x, s = np.zeros((2, 6), np.float32), np.zeros((4, 6), np.float32)
    with pytest.raises(InputError) as info:
        refir.run(str(TWO_MESHES), {"x": x, "s": s}, world=3)
    assert str(info.value) == "mesh 'b' names device 3, outside a world of 3 ranks (run with --world 4 or mpirun -n 4)"


@needs_shared
def test_unknown_backend():
    with pytest.raises(InputError, match=r"unknown backend 'numpy' \(global, spmd, gpu, or module:callable\)"):
        refir.run(str(LAYOUTS), {"x": X68, "y": Y86}, backend="numpy")
    with pytest.raises(InputError, match="cannot load backend 'nowhere:run'"):
        refir.run(str(LAYOUTS), {"x": X68, "y": Y86}, backend="nowhere:run")


# ---- what comes back from a backend is checked ----------------------------------------------

REPLICATED = "mesh m = [0, 1]\nfunc main(x: i32[2, 2]) {\n  y = neg(x)\n  return y\n}\n"


def disagreeing(lowered, inputs, scalars, world):
    out = run_spmd(lowered, inputs, scalars, world)
    out["y"][1] = out["y"][1] + 1
    return out


def wrong_shape(lowered, inputs, scalars, world):
    out = run_spmd(lowered, inputs, scalars, world)
    out["y"] = {0: out["y"][0][:1], 1: out["y"][1][:1]}
    return out


def missing_device(lowered, inputs, scalars, world):
    out = run_spmd(lowered, inputs, scalars, world)
    del out["y"][1]
    return out


@pytest.mark.parametrize("backend, error, message", [
    ("disagreeing", MismatchError, "replicas of 'y' disagree: device 0 and device 1 hold different values"),
    ("wrong_shape", MismatchError,
     r"device 0 holds 'y' with local shape \(1, 2\) and dtype int32, expected \(2, 2\) and int32"),
    ("missing_device", RunError, "the backend returned no buffer of 'y' for device 1"),
])
def test_results_from_a_backend_are_checked(backend, error, message):
    with pytest.raises(error, match=message):
        refir.run(REPLICATED, {"x": np.eye(2, dtype=np.int32)}, backend=f"test_runner:{backend}")


# ---- run errors name the equation, its neighbours, and the rank -----------------------------


class OneRank:
    """A transport for a process that hosts device 1 only (as under MPI)."""

    hosted = (1,)

    def communicate(self, op, src, dst, buffers):
        raise AssertionError("no communication expected")


def failing_local(types, device):
    local = NumpyLocal(types)

    def run(step, d, args):
        if step.out == "y" and d == device:
            raise ValueError("boom")
        return local(step, d, args)

    return run


def test_run_error_names_the_equation_and_rank():
    text = "mesh m = [0, 1]\nfunc main(x: i32[2]) {\n  w = neg(x)\n  y = abs(w)\n  z = add(y, 1)\n  return z\n}\n"
    low = lower(refir.verify(refir.parse(text, "p.rir")))
    x = np.array([1, -2], np.int32)
    with pytest.raises(RunError) as info:
        execute(low, {"x": {1: x}}, {}, failing_local(low.types, 1), OneRank())
    assert str(info.value) == (
        "while running y = abs(w) on rank 1 (p.rir:4:3):\n"
        "  in lowered step y = abs: ValueError: boom\n"
        "     w: i32[2] on m = neg(x)\n"
        "  -> y: i32[2] on m = abs(w)\n"
        "     z: i32[2] on m = add(y, 1)"
    )
    with pytest.raises(RunError, match=r"^while running y = abs\(w\) \(p.rir:4:3\):"):
        execute(low, {"x": {0: x, 1: x}}, {}, failing_local(low.types, 0), InProcess(2))


# ---- shards keep their strides across processes ------------------------------------------------


@given(st.lists(st.integers(0, 3), min_size=0, max_size=4).flatmap(
    lambda shape: st.tuples(st.just(tuple(shape)), st.permutations(list(range(len(shape)))))))
def test_a_dense_buffer_travels_and_comes_back_with_its_very_strides(case):
    """What refir.world.exchange does for each buffer under MPI: its bytes dense in its own order, then back."""
    shape, order = case
    x = materialize(np.arange(int(np.prod(shape)), dtype=np.int16).reshape(shape), tuple(order))
    o = memory_order(x)
    back, buf = receive_into(x.shape, x.dtype, o)
    buf[...] = wire_bytes(x, o)
    assert np.array_equal(back, x)
    assert back.strides == x.strides or x.size == 0


@needs_shared
@pytest.mark.parametrize("backend", ["spmd", "gpu"])
def test_local_buffers_handed_straight_to_a_backend_are_checked(backend):
    from refir.running.backends import backend_named
    from refir.world.ranks import local_world

    low = lower(refir.verify(refir.load(LAYOUTS)))
    run = backend_named(backend)
    x = np.arange(48, dtype=np.float32).reshape(6, 8)
    y_dense = np.asfortranarray(np.arange(48, dtype=np.float32).reshape(8, 6))  # layout[1, 0]: column-major
    blocks = {0: x[:, :4], 1: x[:, 4:]}
    with pytest.raises(InputError, match=r"input 'y' on device 0 has strides \(24, 4\), but y: f32\[8, 6\] on m "
                                         r"layout\[1, 0\] needs a buffer dense in its layout \(strides \(4, 32\)\)"):
        run(low, {"x": blocks, "y": {0: np.ascontiguousarray(y_dense), 1: y_dense}}, {}, local_world(2))
    with pytest.raises(InputError, match=r"input 'x' on device 1 has local extent 3 on axis 1, but "
                                         r"x: f32\[6, 8@DIDx\] on m needs 4"):
        run(low, {"x": {0: x[:, :4], 1: x[:, 4:7]}, "y": {0: y_dense, 1: y_dense}}, {}, local_world(2))
    with pytest.raises(InputError, match=r"input 'x' on device 0 is int32\[6, 4\]"):
        run(low, {"x": {0: x[:, :4].astype(np.int32), 1: x[:, 4:]}, "y": {0: y_dense, 1: y_dense}}, {},
            local_world(2))
    out = run(low, {"x": blocks, "y": {0: y_dense, 1: y_dense}}, {}, local_world(2))
    for d in (0, 1):
        assert np.array_equal(out["g"][d], x.T + y_dense) and out["g"][d].strides == (4, 32)


def test_a_rank_0_input_reaches_the_backend_as_an_array():
    prog = refir.load("mesh m = [0, 1]\nfunc main(s: f32[]) {\n  y = add(s, 1.0)\n  return y\n}\n")
    r = refir.run(prog, {"s": np.array(2.5, np.float32)}, backend="test_runner:capture")
    assert all(isinstance(b, np.ndarray) and b.shape == () for b in SEEN["s"].values())
    assert r.outputs["y"].shape == () and r.outputs["y"] == np.float32(3.5)


def test_close_without_mpi_has_nothing_to_free():
    prog = refir.load("mesh m = [0, 1]\nfunc main(x: f32[4@DIDx]) {\n  s = sum(x, dims=[0])\n  return s\n}\n")
    x = np.arange(4, dtype=np.float32)
    assert refir.run(prog, {"x": x}).outputs["s"] == 6.0
    refir.close()
    refir.close()  # twice is fine
    assert refir.run(prog, {"x": x}).outputs["s"] == 6.0


def test_result_headers_are_vetted_again_unless_the_round_handed_back_the_same_list(monkeypatch):
    """vet_headers skips its work only for the very list found good last time
    (what allgather_obj's `reuse` hands back for the same bytes); an equal but
    new list is vetted, and a bad one fails every time."""
    import numpy as np

    import refir
    from benchmarks.phases import PATTERN
    from refir.running.prepare import bind_and_check, verified
    from refir.world import result_headers
    from refir.world.exchange import entry

    checked = verified(refir.load(PATTERN.format(devices="0, 1")), None)
    x, w, b = np.zeros((8, 16), np.float32), np.zeros((16, 8), np.float32), np.zeros(8, np.float32)
    bindings = bind_and_check(checked, {"x": x, "w": w, "bias": b})
    vetted = []
    real = result_headers._vet_headers
    monkeypatch.setattr(result_headers, "_vet_headers", lambda *a: vetted.append(a[2]) or real(*a))
    every = [[entry("out", 0, np.zeros((8, 8), np.float32))], []]
    assert result_headers.vet_headers(checked, bindings, every) is None
    assert result_headers.vet_headers(checked, bindings, every) is None
    assert vetted == [every]
    again = [list(e) for e in every]
    assert result_headers.vet_headers(checked, bindings, again) is None and len(vetted) == 2
    bad = [[entry("out", 0, np.zeros((8, 7), np.float32))], []]
    for _ in range(2):
        assert "local shape (8, 7)" in str(result_headers.vet_headers(checked, bindings, bad))
    assert len(vetted) == 4
