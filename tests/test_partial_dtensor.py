"""refir's partial types against torch DTensor on the CPU (docs/spec.md §3.3, §9a), every
rank in this process (LocalTensorMode over the fake group, as conformance/peers does):
the same terms reduced by both must give the same blocks, and a Partial target made
from Replicate must fold back to the value on both sides (their terms differ: DTensor
puts x / n on each rank, refir the value on the team's first device). torch 2.13's
public `redistribute` refuses a Partial target; its internal `Redistribute` makes one."""

import numpy as np
import pytest

import refir
from refir.frontends.dtensor import parse_mesh, parse_placements, redistribute_program, to_refir

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed._local_tensor")

from conformance.peers.dtensor_peer import _world, placement, to_numpy, to_torch  # noqa: E402

CASES = [  # mesh, shape, source, target, dtype
    ("4", (5, 3), "P", "R", "i32"),
    ("4", (5, 3), "P", "S0", "i32"),
    ("2x2", (5, 3), "P,R", "R,R", "i64"),
    ("2x2", (5, 3), "P,P", "S1,S0", "i32"),
    ("2x2", (5, 3), "S0,P(max)", "R,S1", "f32"),
    ("2x2", (6, 4), "Partial(avg),R", "R,S0", "f32"),
    ("2x2", (6, 4), "Partial(avg),Partial(avg)", "R,R", "f64"),
    ("4", (5, 3), "R", "P", "f32"),
    ("2x2", (5, 3), "R,S0", "P,S0", "i32"),
    ("2x2", (5, 3), "R,R", "R,P(max)", "f32"),
]


@pytest.mark.parametrize("mesh_text, shape, src, dst, dtype", CASES)
def test_partial_redistribute_agrees_with_dtensor(mesh_text, shape, src, dst, dtype):
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, distribute_tensor

    mesh, s, d = parse_mesh(mesh_text), parse_placements(src), parse_placements(dst)
    st, dt = to_refir(shape, mesh, s, dtype), to_refir(shape, mesh, d, dtype)
    value = np.random.default_rng(5).integers(-9, 10, shape).astype(st.np_dtype)
    ours = refir.run(redistribute_program(mesh, shape, s, d, dtype), {"x": value}, backend="spmd", keep="all")
    n = len(mesh.devices)
    _world(n)
    with LocalTensorMode(n) as lm:
        tmesh = init_device_mesh("cpu", mesh.shape)
        tsrc, tdst = [placement(p) for p in s], [placement(p) for p in d]
        if st.partial:  # DTensor is handed refir's own terms: both reduce the same numbers
            terms = ours.kept["x"]
            stride = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
            x = DTensor.from_local(lm.rank_map(lambda r: to_torch(terms[r])), tmesh, tsrc, run_check=False,
                                   shape=shape, stride=stride)
        else:
            x = distribute_tensor(lm.rank_map(lambda r: to_torch(value)), tmesh, tsrc)
        if dt.partial:  # DTensor's public redistribute refuses a Partial target ("for internal use only")
            from torch.distributed.tensor._redistribute import Redistribute

            dt_ = x._local_tensor.dtype
            y = Redistribute.apply(x, tmesh, tuple(tdst), False, {  # as DTensor.redistribute calls it
                "op_dtype": dt_, "out_dtype": dt_, "backward_options": {"op_dtype": dt_, "out_dtype": dt_}})
        else:
            y = x.redistribute(tmesh, tdst)
        theirs = {r: to_numpy(y.to_local()._local_tensors[r]) for r in range(n)}
        whole = y.full_tensor()
        full = [to_numpy(whole._local_tensors[r]) for r in range(n)]
    np.testing.assert_array_equal(ours.outputs["y"], value)
    want = value
    if dt.partial_kind == "sum" and not st.partial and value.dtype.kind == "i":
        # DTensor's x / n of an integer tensor is cast back, truncated: its terms sum to
        # n trunc(x / n), not x (refir's terms are exact: the value and zeros)
        k = int(np.prod([mesh.size(a) for a in dt.partial]))
        want = (np.trunc(value / k) * k).astype(value.dtype)
        assert not np.array_equal(want, value)
    for r in range(n):
        np.testing.assert_array_equal(full[r], want, err_msg=f"DTensor's value on rank {r}")
    if not dt.partial:
        for r in range(n):
            np.testing.assert_array_equal(ours.shards["y"][r], theirs[r], err_msg=f"rank {r}")
    else:  # the terms differ by convention; each side's fold is the value (refir's: exact)
        if dt.partial_kind == "sum" and dtype == "f32" and not st.partial:
            team = mesh.team(0, dt.partial)
            assert np.array_equal(theirs[team[0]], value / len(team))  # DTensor's x / n
            assert np.array_equal(ours.shards["y"][team[0]], value) and not ours.shards["y"][team[1]].any()
