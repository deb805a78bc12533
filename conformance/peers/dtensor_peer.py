"""torch DTensor as a peer: every rank of a 2- to 8-rank world in this one process.

`LocalTensorMode` over the "fake" process group runs DTensor's own code paths
(its redistribute planner, all_to_all included) on real values, one local
tensor per rank. Each rank's source is a `LocalTensor` of per-rank tensors (a
plain tensor handed to distribute_tensor under the mode is not per rank), the
global tensor of its group's data. DTensor returns uneven blocks as views of
padded buffers: values and shapes are compared, strides are its convention.
torch is imported here only, on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from conformance.peers import layer_ops, shape_ops
from conformance.peers.spec import NAMES, Block, Blocks, PeerCase, PeerResult, expected, group_inputs
from refir.frontends.dtensor import Partial, Placement, Shard, StridedShard, local_block, to_refir
from refir.ir.types import BF16

NAME = "dtensor"
DTYPES = ("f32", "i32", "bf16", "f16", "f64", "i64")
EVEN_ONLY = False
FEATURES = ("root", "slice", "flatten")
KINDS = ("reshard", "op")
NESTS = True
STRIDED = True  # draws _StridedShard placements (refir's interleaved axes, spec §3.4)
PARTIAL_TARGETS = True  # draws Partial targets and avg sources (conformance/peers/partial_draws.py)
_WORLD: list[int] = []  # the fake group's world size, once initialised


def available() -> str:
    try:
        import torch  # noqa: F401
        from torch.distributed._local_tensor import LocalTensorMode  # noqa: F401
    except ImportError as exc:
        return f"torch with DTensor's LocalTensorMode is not importable ({exc})"
    return ""


def versions() -> str:
    import torch

    return f"torch {torch.__version__}"


def _torch_dtype(name: str) -> Any:
    import torch

    return {"f32": torch.float32, "i32": torch.int32, "bf16": torch.bfloat16, "f16": torch.float16,
            "f64": torch.float64, "i64": torch.int64}[name]


def to_torch(a: np.ndarray) -> Any:
    import torch

    a = np.ascontiguousarray(a)
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def to_numpy(t: Any) -> np.ndarray:
    import torch

    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().copy().view(BF16)
    return t.numpy().copy()


def _world(n: int) -> None:
    """The fake process group of n ranks (made again when n changes)."""
    import logging

    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    # DTensor advises flattening where it runs two collectives in a row: advice, not a finding.
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    if _WORLD and _WORLD[0] == n:
        return
    if dist.is_initialized():
        dist.destroy_process_group()
        _forget_meshes()
    dist.init_process_group("fake", rank=0, world_size=n, store=FakeStore())
    _WORLD[:] = [n]


def _forget_meshes() -> None:
    """DTensor caches sharding propagation and redistribute plans by spec, and a new mesh
    of the old shape compares equal to the old one: a result spec kept from the world
    before would name its destroyed process group ("Could not resolve the process group")."""
    from torch.distributed.tensor import _redistribute
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    _clear_sharding_prop_cache()  # the Python cache and the C++ fast path's
    _redistribute.clear_redistribute_planner_cache()
    _redistribute._gen_transform_infos.cache_clear()


def placement(p: Placement) -> Any:
    from torch.distributed.tensor import Partial as TPartial
    from torch.distributed.tensor import Replicate as TReplicate
    from torch.distributed.tensor import Shard as TShard

    if isinstance(p, StridedShard):
        from torch.distributed.tensor.placement_types import _StridedShard

        return _StridedShard(p.dim, split_factor=p.split_factor)
    return TShard(p.dim) if isinstance(p, Shard) else TPartial(p.op) if isinstance(p, Partial) else TReplicate()


def view_mesh(case: PeerCase) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", case.root, mesh_dim_names=NAMES[:len(case.root)])
    names = tuple(NAMES[d] for d in case.dims)
    if case.view == "slice":
        return mesh[names[0] if len(names) == 1 else names]
    if case.view == "flatten":
        return mesh[names]._flatten("_".join(names))
    return mesh


def _int_of(v: Any, r: int) -> int:
    node = getattr(v, "_local_ints", None)
    if node is None and hasattr(v, "node"):
        node = getattr(v.node, "_local_ints", None)
    return int(node[r]) if node is not None else int(v)


def _blocks(t: Any, mesh: Any, ranks: list[int]) -> Blocks:
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    _, offset = compute_local_shape_and_global_offset(tuple(t.shape), mesh, t.placements)
    local = t.to_local()
    return {r: Block(tuple(_int_of(o, r) for o in offset), to_numpy(local._local_tensors[r])) for r in ranks}


def _operand(lm: Any, case: PeerCase, mesh: Any, name: str, shape: tuple[int, ...], ps: tuple[Placement, ...],
             data: list[dict[str, np.ndarray]], group_of: dict[int, int]) -> Any:
    from torch.distributed.tensor import DTensor, distribute_tensor

    tps = [placement(p) for p in ps]
    if not any(isinstance(p, Partial) for p in ps):
        # a _StridedShard of uneven blocks: cut on each rank (every rank holds the value), as
        # torch 2.13 scatters only even strided blocks
        local = {"src_data_rank": None} if any(isinstance(p, StridedShard) for p in ps) else {}
        return distribute_tensor(lm.rank_map(lambda r: to_torch(data[group_of[r]][name])), mesh, tps, **local)
    groups = case.groups()
    from conformance.peers.partial_compare import terms, uses_terms

    held = [terms(case, g) for g in range(len(groups))] if uses_terms(case) else None

    def mine(r: int) -> Any:
        g = group_of[r]
        if held is not None:  # refir's own terms of the value (partial_compare)
            return to_torch(held[g][r])
        t = to_refir(shape, case.mesh(groups[g]), ps, case.dtype)
        return to_torch(local_block(t, None, r, data[g][f"{name}_parts"]))

    stride = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    return DTensor.from_local(lm.rank_map(mine), mesh, tps, run_check=False, shape=shape, stride=stride)


def run(case: PeerCase) -> PeerResult:
    import torch
    from torch.distributed._local_tensor import LocalTensorMode

    _world(case.world)
    groups = case.groups()
    group_of = {r: g for g, group in enumerate(groups) for r in group}
    data = [group_inputs(case, g) for g in range(len(groups))]
    ranks = sorted(group_of)
    with LocalTensorMode(case.world) as lm:
        mesh = view_mesh(case)
        args = [_operand(lm, case, mesh, n, s, ps, data, group_of) for n, s, ps in case.operands()]
        dst = [placement(p) for p in case.dst]
        if case.kind != "op":
            return PeerResult(_blocks(_redistribute(args[0], mesh, dst), mesh, ranks))
        fn: Callable[..., Any] = {"add": torch.add, "mul": torch.mul, "matmul": torch.matmul,
                                  "sum": lambda x: torch.sum(x, dim=case.axis),
                                  "max": lambda x: torch.amax(x, dim=case.axis)}.get(case.op, shaped(case))
        z = fn(*args)
        mapped = [_from_torch(p) for p in z.placements]
        own = None if None in mapped else tuple(p for p in mapped if p is not None)
        # the result where DTensor put it, compared unless partial or a placement refir has no type for yet
        own_blocks = None if own is None or any(isinstance(p, Partial) for p in own) else _blocks(z, mesh, ranks)
        return PeerResult(_blocks(z.redistribute(mesh, dst), mesh, ranks), own, own_blocks)


def _redistribute(x: Any, mesh: Any, dst: list[Any]) -> Any:
    """`x.redistribute(mesh, dst)`; to a Partial target, which torch 2.13's public
    redistribute refuses ("for internal use only"), its `Redistribute` as that calls it."""
    if all(not p.is_partial() or p == q for p, q in zip(dst, x.placements)):
        return x.redistribute(mesh, dst)
    from torch.distributed.tensor._redistribute import Redistribute

    dt = x._local_tensor.dtype
    same = {"op_dtype": dt, "out_dtype": dt}
    return Redistribute.apply(x, mesh, tuple(dst), False, {**same, "backward_options": same})


def distributed(case: PeerCase, placements: tuple[Placement, ...]) -> Blocks:
    """DTensor's own blocks of the case's value at `placements` (not partial):
    `distribute_tensor` of each group's value, every rank cutting its block itself
    (src_data_rank=None), no redistribute. Where a redistribute to the same
    placements gives other blocks, DTensor disagrees with itself (known.py)."""
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.tensor import distribute_tensor

    from conformance.peers.spec import meaning

    _world(case.world)
    groups = case.groups()
    group_of = {r: g for g, group in enumerate(groups) for r in group}
    values = [meaning(case, group_inputs(case, g)) for g in range(len(groups))]
    with LocalTensorMode(case.world) as lm:
        mesh = view_mesh(case)
        x = distribute_tensor(lm.rank_map(lambda r: to_torch(values[group_of[r]])), mesh,
                              [placement(p) for p in placements], src_data_rank=None)
        return _blocks(x, mesh, sorted(group_of))


def shaped(case: PeerCase) -> Callable[..., Any]:
    table = layer_ops if case.op in layer_ops.LAYER_OPS else shape_ops
    return lambda *args: table.torch_op(case.op, list(case.params), list(case.shape), list(args))


def _from_torch(p: Any) -> Placement | None:
    """refir's placement for DTensor's: DTensor gives a reshape that merges a sharded
    inner axis `_StridedShard` (interleaved blocks), refir's interleaved axis (§3.4);
    it is checked before Shard, which it reads as."""
    from refir.frontends.dtensor import Replicate

    if type(p).__name__ == "_StridedShard":  # refir's interleaved axis (§3.4)
        return StridedShard(p.dim, p.split_factor) if p.split_factor > 1 else Shard(p.dim)
    if p.is_shard():
        return Shard(p.dim)
    if p.is_partial():
        return Partial(p.reduce_op)
    return Replicate()


def script(case: PeerCase) -> str:
    from conformance.peers.partial_compare import partial_target, replicated
    from conformance.peers.scripts import dtensor_script

    want = expected(replace(case, dst=replicated(case.dst)) if partial_target(case) else case)  # folded
    return dtensor_script(case, [group_inputs(case, g) for g in range(len(case.groups()))], want)
