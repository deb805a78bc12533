"""Lowering: segments, teams, the `refir lower` listing, and the two bug classes
refir was made for: a scatter of a non-row-major buffer, and the segment after an
allreduce that must run without the reduced axis's symbol."""

from dataclasses import replace

import numpy as np
import pytest
from helpers import SHARED, needs_shared

import refir
from interp.spmd import NumpyLocal, NumpyTransport, execute
from interp.transport import InProcess
from refir.errors import RunError
from refir.explain.lowered_listing import format_lowered
from refir.ir import ops
from refir.ir.ops import op_name
from refir.ir.types import Mesh, dense_strides
from refir.lowering.lower import lower
from refir.lowering.teams import Team, teams
from refir.running.bindings import bind_inputs
from refir.running.shard_inputs import shard_inputs

EXAMPLES = SHARED / "examples"


def _shared_text(name: str) -> str:
    """A shared example's text; empty when absent (its tests are marked needs_shared)."""
    path = EXAMPLES / f"{name}.rir"
    return path.read_text() if path.is_file() else ""


def lowered(text):
    return lower(refir.verify(refir.load(text)))


def step_names(low):
    return [op_name(s.op) for s in low.steps]


class Recording:
    """spmd with every intermediate buffer kept, per step and device."""

    def __init__(self, low, world):
        self.seen = {}
        self.local = NumpyLocal(low.types)
        self.transport = NumpyTransport(InProcess(world))
        self.hosted = self.transport.hosted
        self.comms = iter([s.out for s in low.steps if s.is_communication])

    def __call__(self, step, device, args):
        out = self.local(step, device, args)
        self.seen.setdefault(step.out, {})[device] = out
        return out

    def communicate(self, op, src, dst, buffers):
        got = self.transport.communicate(op, src, dst, buffers)
        self.seen[next(self.comms)] = got
        return got


def trace(text, inputs, world):
    low = lowered(text)
    rec = Recording(low, world)
    bindings = bind_inputs(low.checked, inputs)
    execute(low, shard_inputs(low.checked, inputs, rec.hosted), bindings, rec, rec)
    return low, rec.seen


# ---- bug class 1: the scatter of a permuted, non-row-major buffer ------------------------

SCATTER = _shared_text("scatter_after_permute")
X = (np.arange(180, dtype=np.float32).reshape(3, 4, 3, 5) * 0.25) % 7


@needs_shared
def test_scatter_source_is_the_permuted_non_row_major_buffer():
    low = lowered(SCATTER)
    (scatter,) = [s for s in low.steps if s.is_communication]
    assert scatter.op == ops.Scatter(axis=0, root=0)
    (src,) = scatter.tensor_args()
    assert src == "t2"
    assert str(low.types["t2"]) == "f32[4, 3, 3] on m0 layout[1, 0, 2]"
    assert low.types["t2"].order == (1, 0, 2)
    assert dense_strides((4, 3, 3), low.types["t2"].order, 4) == (12, 48, 4)
    listing = format_lowered(low).split("\n")
    i = listing.index("    t2: f32[4, 3, 3] on m0 layout[1, 0, 2] = permute(t1, [1, 0, 2])")
    assert listing[i + 1] == "        local [4, 3, 3] strides [3, 12, 1] on devices (0)"
    assert listing[i + 3] == "    t3: f32[4@DIDx, 3, 3] on m1 = scatter(t2, axis=0, root=0)"


@needs_shared
def test_scatter_of_a_permuted_buffer_gives_every_device_its_block():
    low, seen = trace(SCATTER, {"x": X}, 4)
    t1 = X.sum(3)
    t2 = seen["t2"][0]
    assert t2.strides == (12, 48, 4)  # elements (3, 12, 1): the buffer is not row-major
    assert np.array_equal(t2, t1.transpose(1, 0, 2))
    # what a scatter of raw memory would send: a different (wrong) block on every device
    raw = np.frombuffer(np.ascontiguousarray(t2.transpose(1, 0, 2)).tobytes(), np.float32).reshape(4, 3, 3)
    for k in range(4):
        block = seen["t3"][k]
        assert block.shape == (1, 3, 3) and block.strides == (36, 12, 4)
        assert np.array_equal(block, t1[:, k:k + 1, :].transpose(1, 0, 2))
        assert not np.array_equal(block, raw[k:k + 1])
        out = seen["out"][k]
        assert out.shape == (3, 1, 3) and out.strides == (12, 12, 4)
        assert np.array_equal(out, 2 * t1[:, k:k + 1, :])


@needs_shared
@pytest.mark.parametrize("mesh0", [[0], [1]], ids=str)
@pytest.mark.parametrize("mesh1", [[0, 1, 2, 3], [1, 0], [3, 1, 0, 2]], ids=str)
def test_scatter_after_permute_sweep(mesh0, mesh1):
    text = SCATTER.replace("mesh m0 = [0]", f"mesh m0 = {mesh0}")
    text = text.replace("mesh m1 = [0, 1, 2, 3]", f"mesh m1 = {mesh1}")
    r = refir.run(text, {"x": X}, backend="spmd", world=4)
    n = len(mesh1)
    assert [op_name(s.op) for s in r.lowered.steps] == ["sum", "permute", "scatter", "permute", "add"]
    assert r.lowered.steps[2].op == ops.Scatter(0, mesh0[0])
    assert set(r.shards["out"]) == set(mesh1)
    width = 4 // n
    for k, d in enumerate(mesh1):
        got = r.shards["out"][d]
        assert got.shape == (3, width, 3) and got.strides == (12 * width, 12, 4)
        assert np.array_equal(got, 2 * X.sum(3)[:, k * width:(k + 1) * width, :])
    assert np.array_equal(r.outputs["out"], 2 * X.sum(3))


# ---- bug class 2: the segment after an allreduce runs without the reduced symbol ----------

BIAS = _shared_text("allreduce_then_bias")


@needs_shared
def test_allreduce_then_bias_segments():
    low = lowered(BIAS)
    got = [(s.kind, [st.out for st in s.steps], s.inputs, s.scalars, s.outputs) for s in low.segments]
    assert got == [
        ("compute", ["at", "c0", "c~1"], ("a", "w"), (), ("c~1",)),
        ("communication", ["c"], ("c~1",), (), ("c",)),
        ("compute", ["c32", "bias32", "bb", "out"], ("c", "bias"), (), ("out",)),
    ]
    assert str(low.types["c~1"]) == "f16[M, N] on m partial[sum@DIDx]"
    assert low.segments[1].steps[0].op == ops.Allreduce("sum", ("DIDx",))
    # nothing the last segment reads carries D
    last = low.segments[2]
    assert set().union(*(low.types[name].symbols() for name in last.inputs)) == {"M", "N"}


@needs_shared
def test_the_segment_after_the_allreduce_runs_alone_knowing_only_its_inputs():
    low = lowered(BIAS)
    last = low.segments[2]
    alone = replace(low, segments=(last,))
    c = np.array([[1.5, -2.0, 0.25], [4.0, 8.0, -0.5]], np.float16)  # M=2, N=3
    bias = np.array([0.5, 1.0, -1.0], np.float16)
    inputs = {"c": {0: c, 1: c}, "bias": {0: bias, 1: bias}}
    got = execute(alone, inputs, {}, NumpyLocal(low.types), NumpyTransport(InProcess(2)))
    want = np.array([[2.0, -1.0, -0.75], [4.5, 9.0, -1.5]], np.float32)
    for d in (0, 1):
        assert got["out"][d].dtype == np.float32 and np.array_equal(got["out"][d], want)


@needs_shared
def test_allreduce_then_bias_runs_with_symbolic_extents():
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (4, 3, 2)).astype(np.float16)  # D=4, K=3, M=2
    w = rng.integers(-3, 4, (4, 3, 5)).astype(np.float16)  # N=5
    bias = rng.integers(-3, 4, 5).astype(np.float16)
    r = refir.run(BIAS, {"a": a, "w": w, "bias": bias}, backend="spmd")
    assert r.bindings == {"D": 4, "K": 3, "M": 2, "N": 5}
    want = np.einsum("dkm,dkn->mn", a.astype(np.float32), w.astype(np.float32)) + bias.astype(np.float32)
    for d in (0, 1):
        assert r.shards["out"][d].strides == (20, 4)
        assert np.array_equal(r.shards["out"][d], want)


@needs_shared
def test_a_symbol_used_as_a_value_after_an_allreduce_is_a_scalar_input():
    text = BIAS.replace("out: f32[M, N] on m = add(c32, bb)", "cb: f32[M, N] on m = add(c32, bb)\n"
                        "  out: f32[M, N] on m = add(cb, D)")
    low = lowered(text)
    last = low.segments[2]
    assert last.inputs == ("c", "bias") and last.scalars == ("D",)
    c = np.array([[1.0, 2.0]], np.float16)
    bias = np.array([0.0, 10.0], np.float16)
    got = execute(replace(low, segments=(last,)), {"c": {0: c, 1: c}, "bias": {0: bias, 1: bias}}, {"D": 6},
                  NumpyLocal(low.types), NumpyTransport(InProcess(2)))
    assert got["out"][1].tolist() == [[7.0, 18.0]]
    assert "segment 2 (compute): inputs c, bias + scalars D -> outputs out" in format_lowered(low)


@needs_shared
def test_shard_c2_a_segment_gets_the_global_extent_and_never_guesses_it():
    low = lowered((EXAMPLES / "global_extent.rir").read_text())
    assert [(s.kind, s.inputs, s.scalars, s.extents) for s in low.segments] == [
        ("compute", ("x",), (), ("D",)), ("communication", ("rs~1",), (), ("D",)), ("compute", ("rs",), (), ("D",)),
    ]
    assert low.segments[1].steps[0].op == ops.ReduceScatter("sum", "DIDx", 0)
    alone = replace(low, segments=(low.segments[2],))
    rs = {d: np.full((2, 4), float(d), np.float32) for d in range(4)}  # D = 8: 2 rows on each of 4 devices
    got = execute(alone, {"rs": rs}, {"D": 8}, NumpyLocal(low.types), NumpyTransport(InProcess(4)))
    for d in range(4):
        assert np.array_equal(got["out"][d], np.full((2, 4), d + 8.0, np.float32))
    # D = 7: blocks 2, 2, 2, 1; the same local block on device 0 means another global extent
    rs = {d: np.full((2 if d < 3 else 1, 4), float(d), np.float32) for d in range(4)}
    got = execute(alone, {"rs": rs}, {"D": 7}, NumpyLocal(low.types), NumpyTransport(InProcess(4)))
    assert got["out"][3].shape == (1, 4) and np.array_equal(got["out"][0], np.full((2, 4), 7.0, np.float32))
    with pytest.raises(RunError, match=r"segment 2 needs symbol D, a global extent .* \[shard_c2\]"):
        execute(alone, {"rs": rs}, {}, NumpyLocal(low.types), NumpyTransport(InProcess(4)))
    assert "segment 2 (compute): inputs rs + extents D -> outputs out" in format_lowered(low)


# ---- segments in general -------------------------------------------------------------------


@needs_shared
def test_each_communication_is_its_own_segment():
    low = lowered((EXAMPLES / "collectives.rir").read_text())
    assert [(s.kind, [op_name(st.op) for st in s.steps]) for s in low.segments] == [
        ("communication", ["allgather"]),
        ("communication", ["all_to_all"]),
        ("compute", ["sum"]),
        ("communication", ["allreduce"]),
        ("compute", ["sum"]),
        ("communication", ["reduce_scatter"]),
    ]
    assert [s.outputs for s in low.segments] == [("full",), ("cols",), ("total~1",), ("total",), ("part~1",),
                                                 ("part",)]


# ---- choices that are not reshardings ------------------------------------------------------


@pytest.mark.parametrize("body, want", [
    ("y: f32[4@DIDx, 6] layout[1, 0] = set(x)", ["copy"]),  # same placement, another layout
    ("y = set(x)", ["copy"]),
    ("y = sum(x, dims=[1])", ["sum"]),  # the sharded axis is kept
    ("y = add(x, r)", ["add"]),  # a b operand needs no slice
    ("y = permute(x, [1, 0])", ["permute"]),
    ("y = unsqueeze(x, dims=[1])", ["unsqueeze"]),
    ("y: f32[4@DIDx] layout[0] = max(x, dims=[1])", ["max"]),
    ("y = add(x, f)", ["keep_block", "add"]),  # a replicated operand is sliced locally
    ("y: f32[4@DIDx, 6] = set(f)", ["keep_block"]),
])
def test_lowering_choices_on_one_mesh(body, want):
    text = f"mesh m = [0, 1]\nfunc main(x: f32[4@DIDx, 6], r: f32[b, 6], f: f32[4, 6]) {{\n  {body}\n  return y\n}}\n"
    assert step_names(lowered(text)) == want


def test_intermediate_buffers_are_row_major_and_the_last_step_has_the_declared_layout():
    low = lowered("mesh g = [[0, 1], [2, 3]]\nmesh l = [3]\nfunc main(x: f32[4@DIDy, 6@DIDx] on g) {\n"
                  "  y: f32[4, 6] on l layout[1, 0] = set(x)\n  return y\n}\n")
    assert [(s.out, op_name(s.op), s.type.layout) for s in low.steps] == [
        ("y~1", "allgather", None), ("y~2", "allgather", None), ("y", "broadcast", (1, 0)),
    ]


# ---- teams ---------------------------------------------------------------------------------


def test_mesh_team_on_a_permuted_grid():
    g = Mesh("g", (2, 2), (3, 1, 0, 2))
    assert [g.team(d, ["DIDx"]) for d in (3, 1, 0, 2)] == [(3, 1), (3, 1), (0, 2), (0, 2)]
    assert [g.team(d, ["DIDy"]) for d in (3, 1, 0, 2)] == [(3, 0), (1, 2), (3, 0), (1, 2)]
    assert g.team(2, ["DIDx", "DIDy"]) == (3, 1, 0, 2)
    assert [g.coords(d) for d in (3, 1, 0, 2)] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_teams_of_each_communication():
    low = lowered("mesh a = [1, 2]\nmesh b = [0, 2]\nmesh c = [2, 0]\n"
                  "func main(x: f32[4@DIDx, 2] on a, r: f32[4, 2] on a) {\n"
                  "  g: f32[4, 2] on b = set(x)\n  s: f32[4@DIDx, 2] on b = set(r)\n"
                  "  sr: f32[4@DIDx, 2] on c = set(x)\n  rd: f32[2] on b = sum(x, dims=[0])\n"
                  "  return g, s, sr, rd\n}\n")
    got = {}
    for s in low.steps:
        if s.is_communication:
            (src,) = s.tensor_args()
            got[op_name(s.op)] = teams(s.op, low.types[src], s.type)
    assert got == {
        "gather": [Team((1, 2, 0), (1, 2), (0, 2))],
        "scatter": [Team((2, 0), (2,), (0, 2))],
        "send_recv": [Team((1, 2), (1,), (2,)), Team((2, 0), (2,), (0,))],
        "reduce": [Team((1, 2, 0), (1, 2), (0, 2))],
    }


# ---- the listing ---------------------------------------------------------------------------


@needs_shared
def test_listing_of_scatter_after_permute():
    assert format_lowered(lowered(SCATTER)) == """\
func main: 3 segments
  input x: f32[3, 4, 3, 5] on m0  local [3, 4, 3, 5] strides [60, 15, 5, 1] (any strides accepted)
  segment 0 (compute): inputs x -> outputs t2
    t1: f32[3, 4, 3] on m0 = sum(x, dims=[3])
        local [3, 4, 3] strides [12, 3, 1] on devices (0)
    t2: f32[4, 3, 3] on m0 layout[1, 0, 2] = permute(t1, [1, 0, 2])
        local [4, 3, 3] strides [3, 12, 1] on devices (0)
  segment 1 (scatter): inputs t2 -> outputs t3
    t3: f32[4@DIDx, 3, 3] on m1 = scatter(t2, axis=0, root=0)
        local [1, 3, 3] strides [9, 3, 1] on devices (0 1 2 3)
        team (0 1 2 3) senders (0) receivers (0 1 2 3)
  segment 2 (compute): inputs t3 -> outputs out
    t4: f32[3, 4@DIDx, 3] on m1 = permute(t3, [1, 0, 2])
        local [3, 1, 3] strides [3, 3, 1] on devices (0 1 2 3)
    out: f32[3, 4@DIDx, 3] on m1 = add(t4, t4)
        local [3, 1, 3] strides [3, 3, 1] on devices (0 1 2 3)
  return out"""


@needs_shared
def test_listing_shows_symbolic_local_shapes_and_strides():
    lines = format_lowered(lowered(BIAS)).split("\n")
    assert lines[0] == "func main: 3 segments"
    assert lines[1] == ("  input a: f16[D@DIDx, K, M] on m  local [ceil(D/2), K, M] strides [K*M, M, 1]"
                        " (any strides accepted)")
    assert "    c~1: f16[M, N] on m partial[sum@DIDx] = sum(c0, dims=[0])" in lines
    assert "    c: f16[M, N] on m = allreduce(c~1, kind=sum, mesh_axes=[DIDx])" in lines
    assert "        team (0 1)" in lines
    assert "  segment 2 (compute): inputs c, bias -> outputs out" in lines
    layouts = format_lowered(lowered((EXAMPLES / "layouts.rir").read_text())).split("\n")
    assert "  input y: f32[8, 6] on m layout[1, 0]  local [8, 6] strides [1, 8]" in layouts
