"""One rank per MPI process: the shared examples and every communication under a
real `mpiexec`, compared bit for bit (values and strides) with the in-process
transport, whose blocks tests/test_collectives.py checks by hand.

Each launch runs a whole batch (tests/mpi_driver.py), so the file costs a few
launches, not one per case.
"""

import pickle

import numpy as np
import pytest
from helpers import EXAMPLES, ROOT, needs_shared, run_mpi, shared_example

import refir
from refir.checks.expect_lines import check_expects
from refir.running.gather_outputs import root_blocks
from refir.running.inputs import default_bindings, draw_inputs

DRIVER = str(ROOT / "tests" / "mpi_driver.py")
BIGGER = {"allreduce_then_bias": {"D": 6, "K": 5, "M": 3, "N": 7}, "collectives": {"R": 8, "C": 12, "P": 4},
          "global_extent": {"D": 8}}
WORLD_OF = {"allreduce_then_bias": 2, "layouts": 2}  # the others name device 3


def example_jobs():
    """Per example: small integer data, larger extents, and non-integer floats."""
    jobs = []
    for path in EXAMPLES:
        checked = refir.verify(refir.load(path))
        small = default_bindings(checked)
        big = default_bindings(checked, BIGGER.get(path.stem))
        rng = np.random.default_rng(7)
        floats = {k: rng.standard_normal(x.shape).astype(x.dtype) if x.dtype.kind == "f" else x
                  for k, x in draw_inputs(checked, big, 3).items()}
        text = path.read_text()
        jobs += [
            {"name": f"{path.stem}:small", "program": text, "inputs": draw_inputs(checked, small, 0)},
            {"name": f"{path.stem}:big", "program": text, "inputs": draw_inputs(checked, big, 1)},
            {"name": f"{path.stem}:float", "program": text, "inputs": floats, "expect": False},
        ]
    return jobs


def f32(*shape, seed=0):
    """Non-integer floats: any change in summation order shows in the bits."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def job(name, text, **inputs):
    return {"name": name, "program": text, "inputs": inputs}


COLLECTIVE_JOBS = [
    job("allgather", "mesh m = [2, 0, 3, 1]\nfunc main(x: f32[8@DIDx, 3]) {\n  y: f32[8, 3] layout[1, 0] = set(x)\n"
        "  return y\n}\n", x=f32(8, 3)),
    job("gather", "mesh a = [3, 1, 0]\nmesh b = [2]\nfunc main(x: f32[6@DIDx, 4] on a) {\n"
        "  y: f32[6, 4] on b = set(x)\n  return y\n}\n", x=f32(6, 4)),
    job("scatter", "mesh a = [1]\nmesh b = [3, 0, 2, 1]\nfunc main(x: f32[8, 3] on a) {\n"
        "  y: f32[8@DIDx, 3] on b = set(x)\n  return y\n}\n", x=f32(8, 3)),
    job("scatter_inner_column_major", "mesh a = [2]\nmesh b = [0, 1, 2]\nfunc main(x: i16[4, 6] on a) {\n"
        "  y: i16[4, 6@DIDx] on b layout[1, 0] = set(x)\n  return y\n}\n",
        x=np.arange(24, dtype=np.int16).reshape(4, 6)),
    job("slice", "mesh a = [0, 1, 2, 3]\nmesh b = [2, 1]\nfunc main(x: f64[4, 6] on a) {\n"
        "  y: f64[4, 6@DIDx] on b = set(x)\n  z = add(y, y)\n  return y, z\n}\n", x=f32(4, 6).astype(np.float64)),
    job("broadcast", "mesh a = [2]\nmesh b = [0, 1, 3]\nfunc main(x: f32[4, 3] on a) {\n"
        "  y: f32[4, 3] on b layout[1, 0] = set(x)\n  return y\n}\n", x=f32(4, 3)),
    job("send_recv", "mesh a = [0, 1, 2, 3]\nmesh b = [3, 2, 1, 0]\nmesh c = [1, 2]\nmesh e = [1, 0]\n"
        "func main(x: i64[4@DIDx, 4] on a, w: f32[2@DIDx, 3] on c) {\n  y: i64[4@DIDx, 4] on b = set(x)\n"
        "  v: f32[2@DIDx, 3] on e = set(w)\n  return y, v\n}\n",
        x=np.arange(16, dtype=np.int64).reshape(4, 4), w=f32(2, 3)),
    job("all_to_all", "mesh m = [2, 0, 3, 1]\nfunc main(x: f16[4@DIDx, 12]) {\n  y: f16[4, 12@DIDx] = set(x)\n"
        "  z: f16[4@DIDx, 12] = set(y)\n  return y, z\n}\n", x=f32(4, 12).astype(np.float16)),
    job("allreduce", "mesh m = [3, 1, 0, 2]\nfunc main(x: f32[8@DIDx, 5]) {\n  s = sum(x, dims=[0])\n"
        "  p = prod(x, dims=[0])\n  hi = max(x, dims=[0])\n  lo = min(x, dims=[0])\n  return s, p, hi, lo\n}\n",
        x=f32(8, 5)),
    job("allreduce_sliced", "mesh m = [3, 1, 0, 2]\nfunc main(x: f32[4@DIDx, 6001, 3], h: f16[4@DIDx, 12001, 3]) {\n"
        "  s = sum(x, dims=[0])\n  hi: f32[6001, 3] layout[1, 0] = max(x, dims=[0])\n  p = prod(h, dims=[0])\n"
        "  return s, hi, p\n}\n", x=f32(4, 6001, 3), h=f32(4, 12001, 3, seed=5).astype(np.float16)),
    job("allreduce_sliced_equal", "mesh m = [3, 1, 0, 2]\n"
        "func main(x: f32[4@DIDx, 4000, 8], h: f16[4@DIDx, 8000, 8]) {\n"
        "  s = sum(x, dims=[0])\n  lo: f32[4000, 8] layout[1, 0] = min(x, dims=[0])\n  p = sum(h, dims=[0])\n"
        "  return s, lo, p\n}\n", x=f32(4, 4000, 8), h=f32(4, 8000, 8, seed=6).astype(np.float16)),
    job("allreduce_nan", "mesh m = [1, 0]\nfunc main(x: f32[4@DIDx, 2]) {\n  hi = max(x, dims=[0])\n"
        "  s = sum(x, dims=[0])\n  return hi, s\n}\n",
        x=np.array([[1.0, 2.0], [np.nan, 0.0], [3.0, -1.0], [0.5, 9.0]], np.float32)),
    job("reduce", "mesh a = [2, 3, 0, 1]\nmesh b = [0, 1]\nfunc main(x: f32[4@DIDx, 3] on a) {\n"
        "  y: f32[3] on b = sum(x, dims=[0])\n  return y\n}\n", x=f32(4, 3)),
    job("reduce_scatter_column_major", "mesh m = [0, 1]\nfunc main(x: f32[5, 6@DIDx, 14]) {\n"
        "  y: f32[5, 14@DIDx] layout[1, 0] = sum(x, dims=[1])\n  return y\n}\n", x=f32(5, 6, 14)),
    job("matmul_sharded_k", "mesh m = [1, 0]\nfunc main(a: f32[2, 4@DIDx], w: f32[4@DIDx, 3]) {\n"
        "  z = matmul(a, w)\n  zs: f32[2@DIDx, 3] = matmul(a, w)\n  return z, zs\n}\n",
        a=f32(2, 4), w=f32(4, 3, seed=1)),
    job("grid", "mesh g = [[3, 1], [0, 2]]\nfunc main(x: f32[4@DIDy, 4@DIDx, 6]) {\n"
        "  ag: f32[4@DIDy, 4, 6] = set(x)\n  ar: f32[4@DIDy, 6] = sum(x, dims=[1])\n"
        "  rs: f32[4@DIDy, 6@DIDx] = sum(x, dims=[1])\n  t: f32[6] = sum(x, dims=[0, 1])\n"
        "  sw: f32[4@DIDx, 4@DIDy, 6] = set(x)\n  return ag, ar, rs, t, sw\n}\n", x=f32(4, 4, 6)),
    job("grid_to_grid", "mesh g = [[0, 1], [2, 3]]\nmesh h = [[3, 2], [1, 0]]\nmesh l = [1, 2]\n"
        "func main(x: i32[4@DIDy, 6@DIDx] on g) {\n  a: i32[4@DIDy, 6@DIDx] on h = set(x)\n"
        "  c: i32[4, 6@DIDx] on l = set(x)\n  e: i32[6] on l = sum(x, dims=[0])\n  return a, c, e\n}\n",
        x=np.arange(24, dtype=np.int32).reshape(4, 6) * 1000003),
    job("full_reduction_to_rank_0", "mesh m = [0, 1]\nmesh n = [1]\nfunc main(x: f32[4@DIDx] on m) {\n"
        "  s: f32[] on m = sum(x, dims=[0])\n  u: f32[] on n = max(x, dims=[0])\n  return s, u\n}\n", x=f32(4)),
    job("bool_and_int8", "mesh m = [3, 2, 1, 0]\nfunc main(b8: bool[4@DIDx, 3], k: i8[4@DIDx, 4]) {\n"
        "  all: bool[4, 3] = set(b8)\n  any = max(b8, dims=[0])\n  w: i8[4@DIDx] = sum(k, dims=[0])\n"
        "  return all, any, w\n}\n",
        b8=np.array([[1, 0, 0], [0, 0, 1], [1, 0, 0], [0, 0, 0]], bool), k=np.full((4, 4), 100, np.int8)),
    job("scatter_after_permute_m0_1", (ROOT / "examples" / "transpose_scatter.rir").read_text()
        .replace("mesh m0 = [0]", "mesh m0 = [1]").replace("mesh m1 = [0, 1, 2, 3]", "mesh m1 = [3, 1, 0, 2]"),
        x=f32(3, 4, 3, 5)),
    job("overlapping_meshes", "mesh a = [1, 2]\nmesh b = [0, 2]\nmesh c = [3, 0]\nmesh e = [1, 0, 2]\n"
        "func main(x: f32[4@DIDx, 3] on a, r: f32[6, 3] on c) {\n  g: f32[4, 3] on b = set(x)\n"
        "  rd: f32[3] on b = sum(x, dims=[0])\n  sc: f32[6@DIDx, 3] on a = set(r)\n  bc: f32[6, 3] on e = set(r)\n"
        "  return g, rd, sc, bc\n}\n", x=f32(4, 3), r=f32(6, 3, seed=2)),
    job("reduce_then_slice_and_batched_matmul", "mesh a = [0, 1]\nmesh q = [2, 3]\nmesh g = [[0, 1], [2, 3]]\n"
        "func main(x: f32[4@DIDx, 6] on a, k: f32[2@DIDy, 3, 4@DIDx] on g, w: f32[2@DIDy, 4@DIDx, 5] on g) {\n"
        "  s: f32[6@DIDx] on q = sum(x, dims=[0])\n  z = matmul(k, w)\n  return s, z, x\n}\n",
        x=f32(4, 6), k=f32(2, 3, 4, seed=3), w=f32(2, 4, 5, seed=4)),
    job("uneven", "mesh m = [0, 1]\nmesh q = [0, 1, 2, 3]\nfunc main(x: f32[N@DIDx] on m) {\n"
        "  y: f32[N@DIDx] on q = set(x)\n  return y\n}\n", x=f32(6)),
    job("all_to_all_and_reduce_scatter_uneven", "mesh m = [2, 0, 3]\nfunc main(x: f32[7@DIDx, 5]) {\n"
        "  y: f32[7, 5@DIDx] = set(x)\n  rs: f32[5@DIDx] = sum(x, dims=[0])\n  return y, rs\n}\n", x=f32(7, 5)),
    # Blocks of 64 KiB: the host's tiled and in-order copies lay them out (interp/mpi/host_copy.py).
    job("large_layout_changes", "mesh m = [2, 0, 3, 1]\nfunc main(x: f32[512@DIDx, 128]) {\n"
        "  c: f32[512@DIDx, 128] layout[1, 0] = set(x)\n  g: f32[512, 128] = set(c)\n"
        "  a: f32[512, 128@DIDx] = set(x)\n  return g, a\n}\n", x=f32(512, 128)),
    job("outside_the_world", "mesh m = [0, 4]\nfunc main(x: f32[2@DIDx]) {\n  y = neg(x)\n  return y\n}\n",
        x=f32(2)),
]

_BY_NAME = {j["name"]: j for j in COLLECTIVE_JOBS}
SEED2 = ("mesh m = [2, 0, 3, 1]\nfunc main(x: f32[M, K@DIDx], w: f32[K@DIDx, N], bias: f32[N]) {\n"
         "  c: f32[M, N] = matmul(x, w)\n  bb: f32[b, N] = unsqueeze(bias, dims=[0])\n  y = add(c, bb)\n"
         "  out = relu(y)\n  return out\n}\n")


def seed2_inputs(m, k, n, seed=0):
    return {"x": f32(m, k, seed=seed), "w": f32(k, n, seed=seed + 10), "bias": f32(n, seed=seed + 20)}

# Run after COLLECTIVE_JOBS, in the same processes: a team's communicators are
# found again (by any mesh that forms the team), and ranks other than 0 may be
# given no inputs at all.
LATER_JOBS = [
    {**_BY_NAME["allreduce"], "name": "allreduce:again"},
    {**_BY_NAME["allreduce"], "name": "allreduce:after_close", "close_before": True},
    job("allreduce:same_team_other_mesh", "mesh q = [3, 1, 0, 2]\nfunc main(v: f32[8@DIDx, 5] on q) {\n"
        "  w: f32[8, 5] on q = set(v)\n  t = sum(v, dims=[0])\n  return w, t\n}\n", v=f32(8, 5, seed=5)),
    *({**_BY_NAME[n], "name": f"{n}:root_inputs", "root_inputs": True}
      for n in ("scatter", "send_recv", "grid", "reduce_scatter_column_major", "scatter_inner_column_major")),
    *({**_BY_NAME[n], "name": f"{n}:root_only", "root_inputs": True, "everywhere": False}
      for n in ("allgather", "grid", "grid_to_grid", "overlapping_meshes", "full_reduction_to_rank_0")),
    # Result blocks rank 0 cannot assemble stop every rank alike, from the headers alone.
    *({**_BY_NAME["scatter"], "name": f"scatter:{bad}", "everywhere": False, "backend": bad}
      for bad in ("missing_on_rank_2", "misshapen_on_rank_2")),
    {**_BY_NAME["allreduce"], "name": "allreduce:after_bad_results"},
    # The same program object again: other extents, other values of the same
    # shapes, and a wrong dtype where a run of those shapes succeeded.
    {**job("seed2", SEED2, **seed2_inputs(3, 8, 5)),
     "again": [seed2_inputs(6, 12, 2, seed=1), seed2_inputs(3, 8, 5, seed=2),
               {**seed2_inputs(3, 8, 5), "bias": np.zeros(5, np.float64)}]},
]


def launch(n, jobs, tmp_path):
    batch, result = tmp_path / f"batch{n}.pkl", tmp_path / f"result{n}.pkl"
    with open(batch, "wb") as f:
        pickle.dump(jobs, f)
    done = run_mpi(n, [DRIVER, str(batch), str(result)], timeout=150, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    with open(result, "rb") as f:
        got = pickle.load(f)
    assert got["world"] == n
    assert got["hosted"] == [(r,) for r in range(n)]  # one rank per process
    return got["jobs"]


@pytest.fixture(scope="module")
def world4(tmp_path_factory):
    jobs = example_jobs() + COLLECTIVE_JOBS + LATER_JOBS
    return {j["name"]: j for j in jobs}, launch(4, jobs, tmp_path_factory.mktemp("mpi4"))


@pytest.fixture(scope="module")
def world2(tmp_path_factory):
    jobs = [j for j in example_jobs() if WORLD_OF.get(j["name"].split(":")[0]) == 2]
    return {j["name"]: j for j in jobs}, launch(2, jobs, tmp_path_factory.mktemp("mpi2"))


def same_bits(mpi, job):
    """The MPI run equals the in-process spmd run bit for bit, strides included."""
    ref = refir.run(job["program"], job["inputs"], backend="spmd")
    assert set(mpi["outputs"]) == set(ref.outputs)
    for name, value in ref.outputs.items():
        assert mpi["outputs"][name].dtype == value.dtype
        assert mpi["outputs"][name].tobytes() == value.tobytes(), name
    for name, bufs in ref.shards.items():
        assert set(mpi["shards"][name]) == set(bufs)
        for d, buf in bufs.items():
            strides, got = mpi["shards"][name][d]
            assert strides == buf.strides, (name, d)
            assert got.tobytes() == buf.tobytes(), (name, d)
            # the rank that computed device d's buffer held it with these strides
            held_strides, held = mpi["held"][d][name][d]
            assert held_strides == buf.strides and held.tobytes() == buf.tobytes(), (name, d)
    for rank, part in mpi["held"].items():
        for name, bufs in part.items():
            assert set(bufs) <= {rank}, (rank, name)  # each rank holds only its own device


@needs_shared
@pytest.mark.parametrize("name", [j["name"] for j in example_jobs()])
def test_example_under_mpiexec_4(world4, name):
    jobs, results = world4
    mpi = results[name]
    assert "error" not in mpi, mpi.get("error")
    if jobs[name].get("expect", True):
        assert mpi["failures"] == []
        assert check_expects(refir.parse(jobs[name]["program"]), jobs[name]["inputs"], mpi["outputs"]) == []
    same_bits(mpi, jobs[name])


@needs_shared
@pytest.mark.parametrize("name", [j["name"] for j in example_jobs() if WORLD_OF.get(j["name"].split(":")[0]) == 2])
def test_example_under_mpiexec_of_its_own_world(world2, name):
    jobs, results = world2
    mpi = results[name]
    assert "error" not in mpi, mpi.get("error")
    if jobs[name].get("expect", True):
        assert mpi["failures"] == []
    same_bits(mpi, jobs[name])


@needs_shared
def test_extra_ranks_take_part_in_nothing(world4):
    _, results = world4
    held = results["layouts:small"]["held"]  # mesh [0, 1] in a world of 4
    assert held[2] == {"g": {}} and held[3] == {"g": {}}
    assert set(held[0]["g"]) == {0} and set(held[1]["g"]) == {1}


@pytest.mark.parametrize("name", [j["name"] for j in COLLECTIVE_JOBS if j["name"] != "outside_the_world"])
def test_communication_under_mpiexec_matches_in_process(world4, name):
    jobs, results = world4
    assert "error" not in results[name], results[name].get("error")
    same_bits(results[name], jobs[name])


def test_communicators_are_made_once_per_team_and_process(world4):
    jobs, results = world4
    first = results[next(iter(jobs))]["created"]
    assert all(c.get("mpi", 0) >= 1 for c in first.values())  # the first run made some
    for name in ("allreduce:again", "allreduce:same_team_other_mesh"):
        assert "error" not in results[name], results[name].get("error")
        assert all(n == 0 for c in results[name]["created"].values() for n in c.values()), results[name]["created"]
        same_bits(results[name], jobs[name])
    after = results["allreduce:after_close"]  # refir.close() freed them: the next run makes its own
    assert "error" not in after and all(c.get("mpi", 0) >= 2 for c in after["created"].values())
    same_bits(after, jobs["allreduce:after_close"])


@pytest.mark.parametrize("name", [j["name"] for j in LATER_JOBS if j.get("root_inputs")])
def test_ranks_given_no_inputs_receive_only_their_blocks(world4, name):
    jobs, results = world4
    mpi = results[name]
    assert "error" not in mpi, mpi.get("error")
    if jobs[name].get("everywhere", True):
        same_bits(mpi, jobs[name])
    for rank, given in mpi["given"].items():
        for param, blocks in given.items():
            assert set(blocks) <= {rank}
            for shape, memory in blocks.values():
                block_bytes = int(np.prod(shape)) * jobs[name]["inputs"][param].itemsize
                if rank == 0:  # rank 0 slices views of the global array
                    assert memory == jobs[name]["inputs"][param].nbytes
                else:  # the others hold their block and nothing more
                    assert memory == block_bytes, (rank, param)


@pytest.mark.parametrize("name", [j["name"] for j in LATER_JOBS if j.get("everywhere") is False and "backend" not in j])
def test_by_default_rank_0_alone_assembles_the_results(world4, name):
    jobs, results = world4
    mpi = results[name]
    assert "error" not in mpi, mpi.get("error")
    ref = refir.run(jobs[name]["program"], jobs[name]["inputs"], backend="spmd")
    assert mpi["outputs_on"] == {0: sorted(ref.outputs), 1: [], 2: [], 3: []}
    for out, value in ref.outputs.items():
        got = mpi["outputs"][out]
        assert got.dtype == value.dtype and got.tobytes() == value.tobytes(), out
    lacked = root_blocks(ref.lowered.checked, ref.bindings)
    for out, bufs in mpi["shards"].items():  # rank 0 keeps its own buffers, and got one of each other block
        mesh = ref.lowered.checked.types[out].mesh
        assert set(bufs) == {d for r, d in lacked if r == out} | ({0} if 0 in mesh else set()), out
        for d, (strides, buf) in bufs.items():
            assert strides == ref.shards[out][d].strides and buf.tobytes() == ref.shards[out][d].tobytes()


def test_bad_result_blocks_stop_every_rank_alike(world4):
    jobs, results = world4
    assert results["scatter:missing_on_rank_2"] == {
        "error": "RunError: the backend returned no buffer of 'y' for device 2"}
    assert results["scatter:misshapen_on_rank_2"] == {
        "error": "MismatchError: device 2 holds 'y' with local shape (1, 3) and dtype float32, "
                 "expected (2, 3) and float32"}
    same_bits(results["allreduce:after_bad_results"], jobs["allreduce:after_bad_results"])  # still in step


def test_mpi_blocks_by_hand(world4):
    jobs, results = world4
    x = jobs["scatter"]["inputs"]["x"]
    shards = results["scatter"]["shards"]["y"]
    for k, d in enumerate([3, 0, 2, 1]):
        assert shards[d][0] == (12, 4) and np.array_equal(shards[d][1], x[2 * k:2 * k + 2])
    x = jobs["all_to_all"]["inputs"]["x"]
    for k, d in enumerate([2, 0, 3, 1]):
        strides, y = results["all_to_all"]["shards"]["y"][d]
        assert strides == (6, 2) and np.array_equal(y, x[:, 3 * k:3 * k + 3])
    x = jobs["scatter_after_permute_m0_1"]["inputs"]["x"]
    for k, d in enumerate([3, 1, 0, 2]):
        strides, out = results["scatter_after_permute_m0_1"]["shards"]["out"][d]
        t1 = x.sum(3, dtype=np.float64).astype(np.float32)  # summed wide, rounded once
        assert strides == (36, 12, 4) and np.array_equal(out, 2 * t1.transpose(1, 0, 2)[k:k + 1])
    nan_run = results["allreduce_nan"]["outputs"]
    assert np.isnan(nan_run["hi"][0]) and nan_run["hi"][1] == 9.0 and np.isnan(nan_run["s"][0])
    assert results["bool_and_int8"]["outputs"]["w"].tolist() == [-112] * 4  # 400 mod 256, as i8
    assert results["full_reduction_to_rank_0"]["outputs"]["s"].shape == ()
    x = jobs["uneven"]["inputs"]["x"]  # 6 over 4 devices: blocks 2, 2, 2 and an empty one
    for d, (start, stop) in enumerate([(0, 2), (2, 4), (4, 6), (6, 6)]):
        strides, y = results["uneven"]["shards"]["y"][d]
        assert y.shape == (stop - start,) and strides == (4,) and np.array_equal(y, x[start:stop])


def test_input_errors_under_mpiexec_reach_every_rank(world4):
    _, results = world4
    assert results["outside_the_world"] == {"error": "InputError: mesh 'm' names device 4, outside a world of 4 "
                                                     "ranks (run with --world 5 or mpirun -n 5)"}


@needs_shared
def test_cli_out_from_mpiexec_is_bitwise_the_in_process_result(tmp_path):
    path = shared_example("collectives")
    rng = np.random.default_rng(11)
    inputs = {"x": rng.standard_normal((8, 12)).astype(np.float32),
              "y": rng.standard_normal((12, 8, 12)).astype(np.float32)}
    np.savez(tmp_path / "in.npz", **inputs)
    done = run_mpi(4, ["-m", "refir", "run", str(path), "--inputs", str(tmp_path / "in.npz"),
                       "--out", str(tmp_path / "out.npz")], timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all 4 expect lines hold" in done.stdout
    assert done.stdout.count(f"{path}: main on spmd (C=12, P=12, R=8)") == 1  # rank 0 alone prints
    ref = refir.run(refir.load(path), inputs, backend="spmd").outputs
    with np.load(tmp_path / "out.npz") as got:
        assert sorted(got.files) == ["cols", "full", "part", "total"]
        for name in got.files:
            assert got[name].dtype == ref[name].dtype and got[name].tobytes() == ref[name].tobytes(), name
    # the reductions did round: the same data folded in float64 differs in some bits
    wide = refir.run(refir.load(path), inputs, backend="global").outputs
    assert not np.array_equal(wide["total"], ref["total"])


SMALL_MESSAGES = r"""
from refir.world.mpi_job import COMMS, allgather_obj, bcast_obj
comm = COMMS.world()
for n in (0, 10, 240, 248, 249, 5000):  # one round within the slot (SLOT - 8 bytes of pickle), two past it
    assert allgather_obj(comm, "x" * (n + comm.rank), "t") == ["x" * (n + k) for k in range(comm.size)], n
    assert bcast_obj(comm, list(range(n)) if comm.rank == 1 else None, 1, "t") == list(range(n)), n
done = []
assert allgather_obj(comm, comm.rank, "t", lambda: done.append(1)) == list(range(comm.size)) and done == [1]
def fails():
    raise ValueError("own work failed")
try:  # work done while a round travels may fail: the round completes all the same, on every rank
    allgather_obj(comm, comm.rank, "t", fails if comm.rank == 1 else None)
except ValueError:
    assert comm.rank == 1
assert allgather_obj(comm, -comm.rank, "t") == [-k for k in range(comm.size)]  # still in step
first = allgather_obj(comm, {"M": 4}, "r", reuse=True)
assert allgather_obj(comm, {"M": 4}, "r", reuse=True) is first  # the same bytes: the same values, kept
changed = allgather_obj(comm, {"M": 5 if comm.rank == 2 else 4}, "r", reuse=True)  # one rank's value differs
assert changed is not first and changed == [{"M": 4}, {"M": 4}, {"M": 5}]
assert allgather_obj(comm, {"M": 4}, "r") is not first  # without reuse, always unpickled afresh
print("agreed", comm.rank)
"""


def test_small_messages_fit_a_slot_or_take_a_second_round():
    done = run_mpi(3, ["-c", SMALL_MESSAGES], timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(done.stdout.split()) == sorted("agreed 0 agreed 1 agreed 2".split())


def test_a_program_run_again_is_never_served_what_an_earlier_run_kept(world4):
    jobs, results = world4
    first = results["seed2"]
    assert "error" not in first, first.get("error")
    same_bits(first, jobs["seed2"])
    *good, bad = first["again"]
    for inputs, got in zip(jobs["seed2"]["again"], good):
        ref = refir.run(SEED2, inputs).outputs["out"]
        assert got["out"].shape == ref.shape and got["out"].tobytes() == ref.tobytes()
    assert isinstance(bad, str) and bad.startswith("InputError") and "dtype float64" in bad


# A run memoised on every rank, then each way one rank can differ from the
# others: every rank must stop with the same error, within seconds (the
# timeout is 5 s; the checks below allow well under it).
MEMOISED_THEN_BAD = r"""
import time
import numpy as np
import refir
from interp.backend import run_spmd
from refir.errors import RefirError
from tests.helpers import SEED2  # this child runs from the repository root, without tests/ on its path

rank = refir.world.ranks.mpi_world().rank
program = refir.load(SEED2)
rng = np.random.default_rng(0)
given = {"x": rng.standard_normal((4, 6)).astype(np.float32), "w": rng.standard_normal((6, 3)).astype(np.float32),
         "bias": rng.standard_normal(3).astype(np.float32)}


def short_on_rank_0(lowered, inputs, scalars, world):
    out = run_spmd(lowered, inputs, scalars, world)
    return {r: {d: x[:-1] if world.rank == 0 else x for d, x in bufs.items()} for r, bufs in out.items()}


def attempt(what, inputs, backend="spmd"):
    start = time.monotonic()
    try:
        got = refir.run(program, inputs, backend=backend).outputs
        print(f"{what} rank {rank}: ok {sorted(got)}", flush=True)
    except RefirError as exc:
        print(f"{what} rank {rank}: {type(exc).__name__}: {exc} in {time.monotonic() - start:.1f} s", flush=True)


for _ in range(2):
    attempt("good", given)  # the second run is served from what the first kept
refir.run(program, given).bindings["M"] = -1  # the caller's to change: never what the next run agrees on
assert refir.run(program, given).bindings == {"M": 4, "K": 6, "N": 3}
attempt("list", {**given, "x": [[1.0]]} if rank == 1 else given)
attempt("extents", {**given, "x": given["x"][:2]} if rank == 1 else given)
attempt("dtype", {**given, "bias": given["bias"].astype(np.float64)} if rank == 1 else given)
attempt("short", given, "__main__:short_on_rank_0")  # results only: rank 0's block one row short
attempt("after", given)
"""


def test_a_bad_input_or_result_on_one_rank_after_memoised_runs_stops_every_rank_alike():
    done = run_mpi(2, ["-c", MEMOISED_THEN_BAD], timeout=60, env={"REFIR_MPI_TIMEOUT": "5", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = sorted(done.stdout.splitlines())
    said = {line.split(":")[0]: line.split(": ", 1)[1] for line in lines}
    assert said["good rank 0"] == "ok ['out']" and said["good rank 1"] == "ok []"
    assert said["after rank 0"] == "ok ['out']"  # every rank still in step
    for what, kind, message in [
            ("list", "InputError", "input 'x' is a list, not a numpy array"),
            ("extents", "InputError", "rank 1 was given inputs of other extents than rank 0's"),
            ("dtype", "InputError", "input 'bias' has dtype float64"),
            ("short", "MismatchError", "device 0 holds 'out' with local shape (3, 3)")]:
        mine, other = said[f"{what} rank 1"], said[f"{what} rank 0"]
        if what in ("list", "dtype"):  # rank 1 found it; rank 0 hears of it from rank 1
            assert mine.startswith(f"{kind}: {message}"), mine
            assert other.startswith(f"OtherRankError: rank 1 stopped with {kind}: {message}"), other
        else:  # every rank found it alike from what the round brought
            assert mine.startswith(f"{kind}: {message}") and other.startswith(f"{kind}: {message}"), (mine, other)
        assert float(mine.split(" in ")[-1][:-2]) < 3 and float(other.split(" in ")[-1][:-2]) < 3
