"""refir's uneven blocks next to torch DTensor's, on real GPUs (device machine only).

Under mpiexec with 2 ranks, one GPU each: for uneven shapes, every rank compares
its own block of refir's gpu backend (NCCL) with the local tensor of DTensor's
`redistribute` (Shard -> Replicate, Shard -> Shard on another axis, Partial ->
Shard), and the input blocks with `distribute_tensor`'s. Data are small
integers, so every value is exact. torch is never a refir dependency: this
script is run only by gpu_backend/device_session.sh (stage `dtensor-uneven`).

    mpiexec -n 2 python -m mpi4py gpu_backend/checks/dtensor_uneven.py
"""

from __future__ import annotations

import os
import sys

import numpy as np

import refir
from gpu_backend.device import SIMULATED, cuda, use_device
from refir.running.shard_inputs import shard_inputs
from refir.world.ranks import mpi_world

# (DTensor's placements from->to and the global shape, refir's parameters and equation, input shapes)
CASES = [
    ("shard0->replicate 5x3", "x: f32[5@DIDx, 3]", "y: f32[5, 3] = set(x)", {"x": (5, 3)}),
    ("shard0->replicate 1x4", "x: f32[1@DIDx, 4]", "y: f32[1, 4] = set(x)", {"x": (1, 4)}),
    ("shard0->shard1 5x3", "x: f32[5@DIDx, 3]", "y: f32[5, 3@DIDx] = set(x)", {"x": (5, 3)}),
    ("shard1->shard0 4x7", "x: f32[4, 7@DIDx]", "y: f32[4@DIDx, 7] = set(x)", {"x": (4, 7)}),
    ("partial->shard0 3x4", "a: f32[3, 5@DIDx], w: f32[5@DIDx, 4]", "y: f32[3@DIDx, 4] = matmul(a, w)",
     {"a": (3, 5), "w": (5, 4)}),
    ("partial->shard1 2x3", "a: f32[2, 5@DIDx], w: f32[5@DIDx, 3]", "y: f32[2, 3@DIDx] = matmul(a, w)",
     {"a": (2, 5), "w": (5, 3)}),
]


def program(params: str, eqn: str) -> str:
    return f"mesh m = [0, 1]\nfunc main({params}) {{\n  {eqn}\n  return y\n}}\n"


def theirs(torch: object, mesh: object, name: str, inputs: dict[str, np.ndarray]) -> tuple[dict, object]:
    """DTensor's local input blocks and its redistributed local result."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    src, dst = name.split()[0].split("->")
    place = {"shard0": Shard(0), "shard1": Shard(1), "replicate": Replicate()}
    if src == "partial":
        a = distribute_tensor(torch.from_numpy(inputs["a"]).cuda(), mesh, [Shard(1)])
        w = distribute_tensor(torch.from_numpy(inputs["w"]).cuda(), mesh, [Shard(0)])
        local = a.to_local() @ w.to_local()  # this rank's partial product
        partial = DTensor.from_local(local, mesh, [Partial()], run_check=False)
        out = partial.redistribute(mesh, [place[dst]])
        return {"a": a.to_local(), "w": w.to_local()}, out.to_local()
    x = distribute_tensor(torch.from_numpy(inputs["x"]).cuda(), mesh, [place[src]])
    return {"x": x.to_local()}, x.redistribute(mesh, [place[dst]]).to_local()


def main() -> int:
    if SIMULATED:
        sys.stderr.write("dtensor_uneven_check needs real GPUs\n")
        return 1
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    world = mpi_world()
    assert world is not None and world.size == 2, "run me under mpiexec -n 2"
    use_device(world.comm)
    torch.cuda.set_device(cuda.get_current_device().id)
    port = world.comm.bcast(29600 + os.getpid() % 1000 if world.is_root else None, root=0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=world.rank, world_size=2)
    mesh = init_device_mesh("cuda", (2,))
    rng = np.random.default_rng(13)
    failed = 0
    for name, params, eqn, shapes in CASES:
        inputs = {k: rng.integers(-4, 5, s).astype(np.float32) for k, s in shapes.items()}
        ours = refir.run(program(params, eqn), inputs, backend="gpu")
        blocks, result = theirs(torch, mesh, name, inputs)
        problems = []
        for k, b in blocks.items():
            mine = shard_inputs(ours.lowered.checked, inputs, (world.rank,))[k][world.rank]
            if tuple(b.shape) != mine.shape or not np.array_equal(b.cpu().numpy(), mine):
                problems.append(f"input {k}: DTensor {tuple(b.shape)}, refir {mine.shape}")
        got = ours.shards["y"][world.rank]
        want = result.cpu().numpy()
        if got.shape != want.shape or not np.array_equal(got, want):
            problems.append(f"y: DTensor {want.shape} {want.ravel()[:6]}, refir {got.shape} {got.ravel()[:6]}")
        every = world.comm.gather((world.rank, got.shape, problems), root=0)
        if world.is_root:
            bad = [f"rank {r}: {p}" for r, _, ps in every for p in ps]
            shapes_seen = ", ".join(f"rank {r} {list(s)}" for r, s, _ in every)
            print(("ok   " if not bad else "FAIL ") + f"{name}: blocks {shapes_seen}" + (f" {bad}" if bad else ""),
                  flush=True)
            failed += bool(bad)
    dist.destroy_process_group()
    return 1 if world.comm.bcast(failed, root=0) else 0


if __name__ == "__main__":
    sys.exit(main())
