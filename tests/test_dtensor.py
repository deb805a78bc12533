"""DTensor placements <-> refir types, and redistribute programs: every device's
block after the resharding is the block DTensor's rules give (np.split per mesh
dimension, written here independently of refir's block_slices)."""

import numpy as np
import pytest

import refir
from refir.cli import main
from refir.errors import InputError
from refir.frontends.dtensor import (
    Partial,
    Replicate,
    Shard,
    contributions_type,
    from_refir,
    parse_mesh,
    parse_placements,
    redistribute_program,
    to_refir,
)
from refir.ir import ops
from refir.lowering.lower import lower


def dtensor_block(value: np.ndarray, mesh_shape, placements, coords) -> np.ndarray:
    """DTensor's local tensor: shard dims split in mesh-dim order (even extents)."""
    local = value
    for size, p, c in zip(mesh_shape, placements, coords):
        if isinstance(p, Shard):
            local = np.split(local, size, axis=p.dim)[c]
    return local


def test_placements_parse_in_both_spellings():
    assert parse_placements("S0,P") == (Shard(0), Partial("sum"))
    assert parse_placements("Shard(1), Replicate(), Partial(max)") == (Shard(1), Replicate(), Partial("max"))
    with pytest.raises(InputError, match="bad placement"):
        parse_placements("S0,Q")


def test_mesh_dims_map_to_dids_outermost_first():
    mesh = parse_mesh("2x2")
    assert mesh.shape == (2, 2) and mesh.devices == (0, 1, 2, 3)
    assert str(to_refir((8, 6), mesh, (Shard(0), Replicate()))) == "f32[8@DIDy, 6] on m"
    assert str(to_refir((8, 6), mesh, (Replicate(), Shard(1)))) == "f32[8, 6@DIDx] on m"
    t = to_refir((8, 6), mesh, (Shard(0), Partial()))
    assert (t.partial, t.partial_kind) == (("DIDx",), "sum")
    assert str(contributions_type(t)) == "f32[2@DIDx, 8@DIDy, 6] on m"
    cube = parse_mesh("2x2x2")
    assert str(to_refir((4, 4, 4), cube, (Shard(2), Shard(0), Replicate()))) == "f32[4@DIDy, 4, 4@DIDz] on m"


@pytest.mark.parametrize("mesh, placements", [
    ("4", "S0"), ("4", "R"), ("4", "P(max)"), ("2x2", "S1,S0"), ("2x2", "P,S0"), ("2x2x2", "R,P,S1"),
    ("2x2", "S0,S0"), ("2x2x2", "S1,R,S1"), ("2x2x2", "S0,S0,S0"),
])
def test_translation_round_trips(mesh, placements):
    m, ps = parse_mesh(mesh), parse_placements(placements)
    assert from_refir(to_refir((8, 8), m, ps)) == ((8, 8), m, ps)


@pytest.mark.parametrize("placements, message", [
    ("P(mean),R", "not 'mean'"), ("S0", "one per mesh dimension"),
    ("S2,R", "2 dimensions"), ("P,P(max)", "one op"),
])
def test_untranslatable_placements_are_refused(placements, message):
    with pytest.raises(InputError, match=message):
        to_refir((8, 6), parse_mesh("2x2"), parse_placements(placements))


CASES = [
    ("4", "S0", "R", ["Allgather"]),
    ("4", "S0", "S1", ["AllToAll"]),
    ("4", "R", "S1", []),
    ("4", "P", "R", ["Allreduce"]),
    ("4", "P", "S0", ["ReduceScatter"]),
    ("4", "P(max)", "S1", ["ReduceScatter"]),
    ("2x2", "S0,P", "R,S1", ["ReduceScatter", "Allgather"]),
    ("2x2", "S0,S1", "S1,S0", ["Allgather", "Allgather"]),  # both targets taken: through replicated
    ("2x2", "P,P", "R,R", ["Allreduce"]),
    ("2x2", "R,S0", "S0,R", ["Allgather"]),
]


@pytest.mark.parametrize("mesh, src, dst, comms", CASES)
def test_redistribute_gives_dtensors_blocks(mesh, src, dst, comms):
    m, s, d = parse_mesh(mesh), parse_placements(src), parse_placements(dst)
    shape = (8, 12)
    program = redistribute_program(m, shape, s, d, contributions=True)
    lowered = lower(refir.verify(program))
    assert [type(st.op).__name__ for st in lowered.steps if st.is_communication] == comms
    rng = np.random.default_rng(3)
    st = to_refir(shape, m, s)
    if st.partial:
        # Each device's contribution: device with coordinates c holds contribution c[partial dims].
        parts = rng.integers(-9, 10, [*(m.shape[m.axis_of(p)] for p in st.partial), *shape]).astype(np.float32)
        fold = np.max if st.partial_kind == "max" else np.sum
        value = fold(parts, axis=tuple(range(len(st.partial))))
        inputs = {"x_parts": parts}
    else:
        value = rng.integers(-9, 10, shape).astype(np.float32)
        inputs = {"x": value}
    for backend in ("spmd", "gpu"):
        result = refir.run(program, inputs, backend=backend)
        np.testing.assert_array_equal(result.outputs["y"], value)
        for dev in m.devices:
            want = dtensor_block(value, m.shape, d, m.coords(dev))
            np.testing.assert_array_equal(result.shards["y"][dev], want, err_msg=f"device {dev} on {backend}")


@pytest.mark.parametrize("mesh, src, dst, comms", [
    *CASES,
    ("4", "R", "P", ["Partition"]),  # local: device 0 keeps the value, the others 0
    ("2x2", "R,S0", "P(max),S0", ["Partition"]),
    ("2x2", "S0,P", "P,R", ["Allreduce", "Allgather", "Partition"]),  # as DTensor: P->R, S->R, R->P
    ("2x2", "Partial(avg),R", "R,S1", ["Binary", "Allreduce"]),
    ("2x2", "P(min),P(min)", "S0,S1", ["ReduceScatter", "ReduceScatter"]),
])
def test_redistribute_of_partial_types(mesh, src, dst, comms):
    """The partial type itself (no contributions): sources' terms from refir.running.partial_inputs;
    the value must come back on every backend, and every block that is not a term must be DTensor's."""
    m, s, d = parse_mesh(mesh), parse_placements(src), parse_placements(dst)
    shape = (8, 12)
    program = redistribute_program(m, shape, s, d)
    lowered = lower(refir.verify(program))
    moves = [type(st.op).__name__ for st in lowered.steps if st.is_communication
             or isinstance(st.op, (ops.Partition, ops.Binary))]  # an avg's division is a Binary div
    assert moves == comms
    value = np.random.default_rng(3).integers(-9, 10, shape).astype(np.float32)
    dt = to_refir(shape, m, d)
    for backend in ("global", "spmd", "gpu"):
        result = refir.run(program, {"x": value}, backend=backend)
        np.testing.assert_array_equal(result.outputs["y"], value)
        if backend != "global" and not dt.partial:
            for dev in m.devices:
                want = dtensor_block(value, m.shape, d, m.coords(dev))
                np.testing.assert_array_equal(result.shards["y"][dev], want, err_msg=f"device {dev} on {backend}")


def test_an_avg_target_from_replicated_is_refused():
    with pytest.raises(InputError, match="no terms of an avg fold exactly"):
        redistribute_program(parse_mesh("4"), (8, 6), parse_placements("R"), parse_placements("Partial(avg)"))
    with pytest.raises(InputError, match="changes kind only through Replicate"):
        redistribute_program(parse_mesh("4"), (8, 6), parse_placements("P"), parse_placements("P(max)"))


def test_the_redistribute_command_explains_what_moves(capsys):
    assert main(["redistribute", "--mesh", "2x2", "--shape", "8,6", "--from", "S0,P", "--to", "R,S1"]) == 0
    out = capsys.readouterr().out
    assert "= f32[8@DIDy, 6] on m partial[sum@DIDx]" in out
    assert "reduce_scatter (sum) over DIDx, scattering axis 1 teams (0 1) (2 3)" in out
    assert "received per device  0: 48  1: 48  2: 48  3: 48" in out  # a [4, 3] f32 block from one peer
    assert "total received: 384 bytes" in out
    assert "equals the DTensor block of the value: yes" in out


@pytest.mark.parametrize("src, dst, says", [
    ("S0,S0", "R,R", ["= f32[5@(DIDy,DIDx), 3] on m", "allgather(x, axis=0, mesh_axis=DIDx)",
                      "allgather(y~1, axis=0, mesh_axis=DIDy)", "axis 0: 5 over 4 -> device 0:2, 1:1 short"]),
    ("_S(0,2),S0", "R,R", ["[_StridedShard(dim=0, sf=2), Shard(0)] = f32[5@(DIDy:2,DIDx), 3] on m",
                           "axis 0: 5 interleaved over (DIDy:2,DIDx) -> device 0: rows 0:2; 1: rows 3; 2: rows 2; "
                           "3: rows 4"]),
    ("R,R", "P(sum),R", ["partition(x, kind=sum, mesh_axes=[DIDy])", "the partial target on DIDy: refir keeps the "
                         "value on each team's first device and 0 on the others, DTensor x / n",
                         "the terms fold back to the value: yes"]),
    ("R,R", "R,P(max)", ["partition(x, kind=max, mesh_axes=[DIDx])", "the partial target on DIDx: every device "
                         "keeps the value, as DTensor's Partial._partition_value does for max"]),
    ("P,R", "P,S0", ["the partial target on DIDy: each device keeps its term (DTensor: the same no-op)",
                     "= keep_block(x)", "the terms fold back to the value: yes"]),
    ("P(avg),R", "R,S1", ["= f32[5, 3] on m partial[avg@DIDy]", "div(x, 2.0)",
                          "allreduce(y~1, kind=sum, mesh_axes=[DIDy])"]),
])
def test_the_redistribute_command_explains_each_form(capsys, src, dst, says):
    assert main(["redistribute", "--mesh", "2x2", "--shape", "5,3", "--from", src, "--to", dst]) == 0
    out = capsys.readouterr().out
    for line in says:
        assert line in out, (line, out)
    if "P" not in dst:
        assert "equals the DTensor block of the value: yes" in out
    assert ("the partial target" in out) == ("P" in dst)
