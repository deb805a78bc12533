"""Standalone reproducers: a case as a Python script that uses the peer alone
(no refir), with every rank's input and expected block written into it as
data. It exits non-zero, naming each rank whose block differs, while the
discrepancy lasts: ready to paste into a bug report."""

from __future__ import annotations

import inspect
import json

import numpy as np

from conformance.peers import layer_ops, shape_ops
from conformance.peers.partial_compare import partial_target, terms, uses_terms
from conformance.peers.spec import Blocks, PeerCase
from refir.frontends.dtensor import Partial, Placement, Shard, StridedShard, local_block, to_refir


def _array(a: np.ndarray) -> dict:
    return {"shape": list(a.shape), "flat": np.asarray(a, dtype=np.float64).ravel().tolist()}


def _placement(p: Placement) -> str:
    if isinstance(p, StridedShard):
        return f"_S({p.dim},{p.split_factor})"
    return f"S{p.dim}" if isinstance(p, Shard) else f"P({p.op})" if isinstance(p, Partial) else "R"


def case_data(case: PeerCase, inputs: list[dict[str, np.ndarray]], want: Blocks) -> dict:
    """Each rank's source of each operand: its group's global tensor, or (a
    partial source) its own contribution block."""
    groups = case.groups()
    held = [terms(case, g) for g in range(len(groups))] if uses_terms(case) else None  # refir's own terms
    operands = []
    for name, shape, ps in case.operands():
        partial = any(isinstance(p, Partial) for p in ps)
        per_rank = {}
        for g, group in enumerate(groups):
            for r in group:
                if held is not None:
                    per_rank[r] = _array(held[g][r])
                elif partial:
                    t = to_refir(shape, case.mesh(group), ps, case.dtype)
                    per_rank[r] = _array(local_block(t, None, r, inputs[g][f"{name}_parts"]))
                else:
                    per_rank[r] = _array(inputs[g][name])
        operands.append({"name": name, "shape": list(shape), "dtype": case.operand_dtype(name),
                         "placements": [_placement(p) for p in ps],
                         "partial": partial, "per_rank": per_rank})
    return {"case": case.label(), "kind": case.kind, "root": list(case.root), "view": case.view,
            "dims": list(case.dims), "dtype": case.dtype, "op": case.op, "axis": case.axis, "params": list(case.params),
            "shape": list(case.shape), "dst": [_placement(p) for p in case.dst], "operands": operands,
            "layer": case.op in layer_ops.LAYER_OPS, "ulps": case.ulps,
            "groups": [list(g) for g in groups], **_folds(case),
            "expected": {r: {"offset": list(b.offset), **_array(b.values)} for r, b in want.items()}}


def _folds(case: PeerCase) -> dict:
    """A Partial target's reduce op and each rank's team over its Partial mesh dims
    (the script folds the team's terms, as partial_compare does), else no fold."""
    if not partial_target(case):
        return {"fold": "", "teams": {}}
    teams = {}
    for group in case.groups():
        mesh = case.mesh(group)
        t = to_refir(case.shape, mesh, case.dst, case.dtype)
        teams.update({r: list(mesh.team(r, t.partial)) for r in group})
    return {"fold": t.partial_kind, "teams": teams}


DTENSOR = '''"""{label}: torch DTensor against the expected blocks (written by `refir peer dtensor`).

Every rank runs in this one process: LocalTensorMode over the "fake" process group.
Exits 1 and names every rank whose block differs."""
import json
import sys

import torch
import torch.distributed as dist
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
from torch.testing._internal.distributed.fake_pg import FakeStore

CASE = json.loads({data!r})  # noqa: E501
DTYPES = {{"f32": torch.float32, "i32": torch.int32, "bf16": torch.bfloat16, "f16": torch.float16,
          "f64": torch.float64, "i64": torch.int64, "bool": torch.bool}}
NAMES = ("a", "b", "c")


def placement(text):
    if text == "R":
        return Replicate()
    if text.startswith("_S("):  # _StridedShard(dim, split_factor)
        from torch.distributed.tensor.placement_types import _StridedShard

        dim, sf = text[3:-1].split(",")
        return _StridedShard(int(dim), split_factor=int(sf))
    if text.startswith("S"):
        return Shard(int(text[1:]))
    return Partial(text[2:-1])


{torch_op}

{layer_torch_op}

def tensor(a, dtype):
    return torch.tensor(a["flat"], dtype=torch.float64).reshape(a["shape"]).to(dtype)


def same(got, want):
    """Equal (NaN by NaN), or within CASE["ulps"] ulps per element (eps |larger| + subnormal)."""
    want = want.to(got.dtype)
    if not got.is_floating_point():
        return torch.equal(got, want)
    g, w = got.double(), want.double()
    both_nan = g.isnan() & w.isnan()
    if CASE["ulps"] == 0:
        return bool(((g == w) | both_nan).all())
    info = torch.finfo(got.dtype)
    tol = CASE["ulps"] * (info.eps * torch.maximum(g.abs(), w.abs()) + info.tiny * info.eps)
    finite = g.isfinite() & w.isfinite()
    return bool(((g == w) | both_nan | (finite & ((g - w).abs() <= tol))).all())


def at(v, r):
    node = getattr(v, "_local_ints", None) or getattr(getattr(v, "node", None), "_local_ints", None)
    return int(node[r]) if node is not None else int(v)


world = 1
for n in CASE["root"]:
    world *= n
dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
bad = []
with LocalTensorMode(world) as lm:
    mesh = init_device_mesh("cpu", tuple(CASE["root"]), mesh_dim_names=NAMES[:len(CASE["root"])])
    names = tuple(NAMES[d] for d in CASE["dims"])
    if CASE["view"] == "slice":
        mesh = mesh[names[0] if len(names) == 1 else names]
    elif CASE["view"] == "flatten":
        mesh = mesh[names]._flatten("_".join(names))
    args = []
    for o in CASE["operands"]:
        ps = [placement(p) for p in o["placements"]]
        local = lm.rank_map(lambda r: tensor(o["per_rank"][str(r)], DTYPES[o["dtype"]]))
        if o["partial"]:
            stride = tuple(int(torch.tensor(o["shape"][i + 1:]).prod()) for i in range(len(o["shape"])))
            args.append(DTensor.from_local(local, mesh, ps, run_check=False, shape=tuple(o["shape"]), stride=stride))
        else:
            # a _StridedShard: every rank cuts its own block (torch 2.13 scatters only even strided blocks)
            strided = any(type(p).__name__ == "_StridedShard" for p in ps)
            args.append(distribute_tensor(local, mesh, ps, **({{"src_data_rank": None}} if strided else {{}})))
    op = {{"": lambda x: x, "add": torch.add, "mul": torch.mul, "matmul": torch.matmul,
          "sum": lambda x: torch.sum(x, dim=CASE["axis"]), "max": lambda x: torch.amax(x, dim=CASE["axis"])}}
    table = layer_torch_op if CASE["layer"] else torch_op
    shaped = lambda *a: table(CASE["op"], CASE["params"], CASE["shape"], list(a))  # noqa: E731
    z, dst = op.get(CASE["op"], shaped)(*args), [placement(p) for p in CASE["dst"]]
    if any(p.is_partial() and p != q for p, q in zip(dst, z.placements)):
        # to a new Partial: torch's public redistribute refuses it, its Redistribute makes it
        from torch.distributed.tensor._redistribute import Redistribute

        kept = {{"op_dtype": z._local_tensor.dtype, "out_dtype": z._local_tensor.dtype}}
        y = Redistribute.apply(z, mesh, tuple(dst), False, {{**kept, "backward_options": kept}})
    else:
        y = z.redistribute(mesh, dst)
    _, offset = compute_local_shape_and_global_offset(tuple(y.shape), mesh, y.placements)
    local = y.to_local()
    for r, want in CASE["expected"].items():
        got = local._local_tensors[int(r)]
        if CASE["fold"]:  # a Partial target: the team's terms folded in float64, rounded once
            team = torch.stack([local._local_tensors[q].double() for q in CASE["teams"][r]])
            got = {{"sum": lambda: team.sum(0), "avg": lambda: team.mean(0), "max": lambda: team.amax(0),
                   "min": lambda: team.amin(0)}}[CASE["fold"]]().to(got.dtype)
        # where an empty block starts is a convention (docs/peers.md): offsets along dims it holds nothing of
        off = [at(o, int(r)) if n else None for o, n in zip(offset, got.shape)]
        at_want = [o if n else None for o, n in zip(want["offset"], want["shape"])]
        if off != at_want or list(got.shape) != want["shape"] or not same(got, tensor(want, torch.float64)):
            bad.append(f"rank {{r}}: got offset {{off}} shape {{list(got.shape)}} {{got.flatten().tolist()[:8]}}, "
                       f"want offset {{want['offset']}} shape {{want['shape']}} {{want['flat'][:8]}}")
print(CASE["case"], f"torch {{torch.__version__}}")
print("\\n".join(bad) or "every rank's block is as expected")
sys.exit(1 if bad else 0)
'''


def dtensor_script(case: PeerCase, inputs: list[dict[str, np.ndarray]], want: Blocks) -> str:
    data = json.dumps(case_data(case, inputs, want), separators=(",", ":"))
    layer = inspect.getsource(layer_ops.torch_op).replace("def torch_op(", "def layer_torch_op(", 1)
    return DTENSOR.format(label=case.label(), data=data, torch_op=inspect.getsource(shape_ops.torch_op),
                          layer_torch_op=layer)
