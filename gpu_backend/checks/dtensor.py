"""refir's DTensor translation against torch DTensor itself, on real GPUs.

Run by gpu_backend/device_session.sh (stage `dtensor`), one rank per GPU under
mpiexec: `python -m mpi4py gpu_backend/checks/dtensor.py`. For each case, torch
builds the source DTensor (a partial one from each device's contribution,
`DTensor.from_local`) and redistributes it; refir runs the program
`refir.frontends.dtensor.redistribute_program` builds on its gpu backend. Every device's
local block must be the same, bit for bit, and equal to DTensor's block of the
value. torch is imported here only: it is never a refir dependency.
"""

from __future__ import annotations

import os
import sys

import numpy as np

CASES = [
    ("2", "S0", "R", "f32"), ("2", "S0", "S1", "f32"), ("2", "R", "S1", "f32"), ("2", "S1", "S0", "f32"),
    ("2", "P", "R", "f32"), ("2", "P", "S0", "f32"), ("2", "P(max)", "S1", "f32"), ("2", "P(min)", "R", "f32"),
    ("1x2", "S0,P", "R,S1", "f32"), ("1x2", "R,S1", "R,S0", "f32"), ("2x1", "S0,R", "R,S1", "f32"),
    ("2x1", "P,S1", "S0,R", "f32"), ("2", "S0", "R", "bf16"), ("2", "P", "S1", "bf16"), ("2", "S1", "R", "i32"),
]
SHAPE = (8, 12)


def main() -> int:
    import torch
    import torch.distributed as dist
    from mpi4py import MPI
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    import refir
    from refir.errors import InputError
    from refir.frontends.dtensor import Partial as RPartial
    from refir.frontends.dtensor import Shard as RShard
    from refir.frontends.dtensor import (
        contributions_type,
        local_block,
        parse_mesh,
        parse_placements,
        redistribute_program,
        to_refir,
    )
    from refir.ir.types import BF16, DTYPES

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(0)  # one visible GPU per rank
    dist.init_process_group("nccl", rank=rank, world_size=size, device_id=torch.device("cuda", 0))

    def placement(p: object) -> object:
        if isinstance(p, RShard):
            return Shard(p.dim)
        if isinstance(p, RPartial):
            return Partial(p.op)
        return Replicate()

    def to_torch(a: np.ndarray) -> torch.Tensor:
        if a.dtype == BF16:
            return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(np.ascontiguousarray(a))

    def to_numpy(t: torch.Tensor) -> np.ndarray:
        t = t.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(BF16)
        return t.numpy()

    failures: list[str] = []
    lines: list[str] = []
    compared = 0
    for index, (mesh_text, src, dst, dtype) in enumerate(CASES):
        mesh, s, d = parse_mesh(mesh_text), parse_placements(src), parse_placements(dst)
        if len(mesh.devices) != size:
            continue
        st, dt = to_refir(SHAPE, mesh, s, dtype), to_refir(SHAPE, mesh, d, dtype)
        rng = np.random.default_rng(index)
        if st.partial:
            shape = tuple(int(a.extent) for a in contributions_type(st).axes)
            parts = rng.integers(-9, 10, shape).astype(DTYPES[dtype])
            fold = {"sum": np.sum, "max": np.max, "min": np.min}[st.partial_kind]
            value = fold(parts.astype(np.float64), axis=tuple(range(len(st.partial)))).astype(DTYPES[dtype])
            inputs = {"x_parts": parts}
        else:
            parts = None
            value = rng.integers(-9, 10, SHAPE).astype(DTYPES[dtype])
            inputs = {"x": value}
        if dtype == "f32":  # a torch CPU tensor, read by refir.run through DLPack
            inputs = {k: torch.from_numpy(v) for k, v in inputs.items()}
        tmesh = init_device_mesh("cuda", mesh.shape)
        tsrc = [placement(p) for p in s]
        if st.partial:
            mine = local_block(st, value, rank, parts)
            x = DTensor.from_local(to_torch(mine).cuda(), tmesh, tsrc, run_check=False)
        else:
            x = distribute_tensor(to_torch(value).cuda(), tmesh, tsrc)
        y = x.redistribute(tmesh, [placement(p) for p in d])
        theirs = to_numpy(y.to_local())
        whole = to_numpy(y.full_tensor())
        result = refir.run(redistribute_program(mesh, SHAPE, s, d, dtype, contributions=True), inputs, backend="gpu")
        ours = result.shards["y"][rank]
        want = local_block(dt, value, rank)
        same = (theirs.shape == ours.shape == want.shape and theirs.dtype == ours.dtype
                and theirs.tobytes() == np.ascontiguousarray(ours).tobytes() == np.ascontiguousarray(want).tobytes()
                and whole.tobytes() == value.tobytes())
        line = (f"{mesh_text:>4} {src:>7} -> {dst:<6} {dtype:<5} rank {rank}: torch local {list(theirs.shape)}, "
                f"refir local {list(ours.shape)} {'equal' if same else 'DIFFERENT'}")
        lines.append(line)
        compared += 1
        if not same:
            failures.append(line)
    # A CUDA tensor is refused by refir.run, with what to do.
    try:
        refir.run(redistribute_program(parse_mesh("2"), SHAPE, parse_placements("S0"), parse_placements("R")),
                  {"x": torch.zeros(SHAPE, device="cuda")}, backend="gpu")
        failures.append(f"rank {rank}: a CUDA tensor was not refused")
    except InputError as exc:
        lines.append(f"rank {rank}: a CUDA torch tensor is refused: {exc}")
    every = comm.gather((lines, failures, compared), root=0)
    bad: list[str] = []
    if rank == 0:
        for ls, _, _ in every:
            print("\n".join(ls))
        bad = [f for _, fs, _ in every for f in fs]
        print(f"dtensor: {sum(n for _, _, n in every)} local blocks compared, {len(bad)} failures")
        for f in bad:
            print("FAILED", f)
    dist.destroy_process_group()
    return 1 if comm.bcast(len(bad), root=0) else 0


if __name__ == "__main__":
    sys.exit(main())
