"""The JAX reproducer: a case as a script that uses jax alone (see scripts.py)."""

from __future__ import annotations

import inspect
import json

import numpy as np

from conformance.peers.jax_ops import jnp_op
from conformance.peers.scripts import _array, case_data
from conformance.peers.spec import Blocks, PeerCase

JAX = '''"""{label}: JAX against the expected blocks (written by `refir peer jax`).

8 CPU devices; rank r is the r-th device of the mesh, row-major. Exits 1 and
names every rank whose block differs."""
import json
import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
import jax
import ml_dtypes
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

CASE = json.loads({data!r})  # noqa: E501
DTYPES = {{"f32": np.float32, "i32": np.int32, "bf16": ml_dtypes.bfloat16, "f16": np.float16, "bool": np.bool_}}
DTYPE = DTYPES[CASE["dtype"]]
NAMES = ("a", "b", "c")
lax = jax.lax
REDUCE = {{"sum": lax.psum, "max": lax.pmax, "min": lax.pmin}}


def array(a, dtype=None):
    return np.array(a["flat"], dtype=np.float64).reshape(a["shape"]).astype(dtype or DTYPE)


def same(got, want):
    floating = np.issubdtype(got.dtype, np.floating) or got.dtype == ml_dtypes.bfloat16
    return np.array_equal(got, want.astype(got.dtype), equal_nan=floating)


{jnp_op}


def spec(ps, rank):
    return PartitionSpec(*(next((NAMES[i] for i, p in enumerate(ps) if p == f"S{{d}}"), None) for d in range(rank)))


o = CASE["operands"][0]
src, dst, rank = o["placements"], CASE["dst"], len(CASE["shape"])
mesh = Mesh(np.array(jax.devices()[:len(CASE["groups"][0])]).reshape(CASE["root"]), NAMES[:len(CASE["root"])])
lead = [NAMES[i] for i, p in enumerate(src) if p.startswith("P")]
rest = tuple(spec(src, rank))
if o["partial"]:  # the contributions: leading axis k on the k-th partial mesh dim
    x = jax.device_put(array(CASE["parts"]), NamedSharding(mesh, PartitionSpec(*lead, *rest)))
else:
    x = jax.device_put(array(o["per_rank"]["0"]), NamedSharding(mesh, spec(src, rank)))


if CASE["kind"] == "collective":
    i = next(j for j, (s, d) in enumerate(zip(src, dst)) if s != d)
    name, s, d = NAMES[i], src[i], dst[i]

    def step(v):
        if s.startswith("P"):
            v = v.reshape(v.shape[1:])
            if d.startswith("S") and s == "P(sum)":
                return lax.psum_scatter(v, name, scatter_dimension=int(d[1:]), tiled=True)
            v = REDUCE[s[2:-1]](v, name)
        elif s.startswith("S") and d.startswith("S"):
            return lax.all_to_all(v, name, split_axis=int(d[1:]), concat_axis=int(s[1:]), tiled=True)
        elif s.startswith("S"):
            return lax.all_gather(v, name, axis=int(s[1:]), tiled=True)
        if d.startswith("S"):
            n = v.shape[int(d[1:])] // CASE["root"][i]
            return lax.dynamic_slice_in_dim(v, lax.axis_index(name) * n, n, axis=int(d[1:]))
        return v

    spec_in = PartitionSpec(*lead, *rest) if o["partial"] else spec(src, rank)
    y = jax.shard_map(step, mesh=mesh, in_specs=spec_in, out_specs=spec(dst, rank), check_vma=False)(x)
elif CASE["kind"] == "op":
    args = [jax.device_put(array(a["per_rank"]["0"], DTYPES[a["dtype"]]),
                           NamedSharding(mesh, spec(a["placements"], len(a["shape"])))) for a in CASE["operands"]]
    y = jax.jit(lambda *a: jnp_op(CASE["op"], CASE["params"], CASE["shape"], list(a)),
                out_shardings=NamedSharding(mesh, spec(dst, rank)))(*args)
else:
    if o["partial"]:
        kind = next(p for p in src if p.startswith("P"))[2:-1]
        x = jax.shard_map(lambda c: REDUCE[kind](c.reshape(c.shape[len(lead):]), tuple(lead)), mesh=mesh,
                          in_specs=PartitionSpec(*lead, *rest), out_specs=PartitionSpec(*rest))(x)
    y = jax.device_put(x, NamedSharding(mesh, spec(dst, rank)))
rank_of = {{d.id: r for r, d in enumerate(mesh.devices.flat)}}
bad = []
for shard in y.addressable_shards:
    r = rank_of[shard.device.id]
    want = CASE["expected"][str(r)]
    off = [sl.indices(n)[0] for sl, n in zip(shard.index, CASE["shape"])]
    got = np.asarray(shard.data)
    if off != want["offset"] or list(got.shape) != want["shape"] or not same(got, array(want, np.float64)):
        bad.append(f"rank {{r}}: got offset {{off}} shape {{list(got.shape)}} {{got.ravel().tolist()[:8]}}, "
                   f"want offset {{want['offset']}} shape {{want['shape']}} {{want['flat'][:8]}}")
print(CASE["case"], f"jax {{jax.__version__}}")
print("\\n".join(bad) or "every rank's block is as expected")
sys.exit(1 if bad else 0)
'''


def jax_script(case: PeerCase, inputs: dict[str, np.ndarray], want: Blocks) -> str:
    d = case_data(case, [inputs], want)
    if "x_parts" in inputs:
        d["parts"] = _array(inputs["x_parts"])
    data = json.dumps(d, separators=(",", ":"))
    return JAX.format(label=case.label(), data=data, jnp_op=inspect.getsource(jnp_op))
