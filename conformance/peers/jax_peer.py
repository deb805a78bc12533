"""JAX on the CPU as a peer: 8 host devices in this process.

A resharding is `jax.device_put` between two `NamedSharding`s (XLA plans the
communication); a partial source enters as its contributions and is reduced by
psum / pmax / pmin in `shard_map`. A collective case differs on one mesh dim
and runs that one collective by hand in `shard_map`: all_gather, all_to_all,
psum, pmax, pmin, psum_scatter (or a local slice). JAX refuses extents that do
not divide, so its cases are even; it has no 64-bit types unless asked
(jax_enable_x64), so its dtypes are 32 bits and less. Rank r is the r-th
device of the mesh in row-major order, as in DTensor.

XLA_FLAGS must name the device count before jax is first imported: this module
sets it then; a process that imported jax before without it has one device.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from conformance.peers.jax_ops import jnp_op
from conformance.peers.spec import NAMES, Block, Blocks, PeerCase, PeerResult, expected, group_inputs
from refir.frontends.dtensor import Partial, Placement, Shard

NAME = "jax"
DTYPES = ("f32", "i32", "bf16", "f16")
EVEN_ONLY = True
FEATURES = ("root",)
KINDS = ("reshard", "collective")
NESTS = False
# issue 27's exact layer ops (conformance/peers/layer_ops.py), drawn last in a case; jitted
# on operands placed by NamedSharding, the result to the target: XLA's own partitioning
LAYER_OPS = ("select", "pad", "expand", "causal", "compare", "where", "bmatmul")
DEVICES = 8
FLAG = f"--xla_force_host_platform_device_count={DEVICES}"


def _import() -> Any:
    if "jax" not in sys.modules and FLAG not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + FLAG).strip()
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        # XLA's warnings (a resharding it finds inefficient) are advice, not findings
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import jax

    return jax


def available() -> str:
    try:
        jax = _import()
        n = len(jax.devices("cpu"))
    except ImportError as exc:
        return f"jax is not importable ({exc})"
    if n < DEVICES:
        return f"jax has {n} CPU devices, not {DEVICES}: set XLA_FLAGS={FLAG} before jax is imported"
    return ""


def versions() -> str:
    jax = _import()
    import jaxlib

    return f"jax {jax.__version__}, jaxlib {jaxlib.__version__}"


def spec(ps: tuple[Placement, ...], rank: int) -> Any:
    """A PartitionSpec: per tensor dim, the mesh axis that shards it."""
    from jax.sharding import PartitionSpec

    return PartitionSpec(*(next((NAMES[i] for i, p in enumerate(ps) if p == Shard(d)), None) for d in range(rank)))


def mesh_of(case: PeerCase) -> Any:
    jax = _import()
    from jax.sharding import Mesh

    devices = np.array(jax.devices("cpu")[:case.world]).reshape(case.root)
    return Mesh(devices, NAMES[:len(case.root)])


def _reduce(jax: Any, kind: str) -> Any:
    return {"sum": jax.lax.psum, "max": jax.lax.pmax, "min": jax.lax.pmin}[kind]


def _partial_in(case: PeerCase, mesh: Any, parts: np.ndarray) -> Any:
    """The contributions, sharded: leading axis k on the k-th partial mesh dim."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    lead = [NAMES[i] for i, p in enumerate(case.src) if isinstance(p, Partial)]
    rest = tuple(spec(case.src, len(case.shape)))
    return jax.device_put(parts, NamedSharding(mesh, PartitionSpec(*lead, *rest))), lead, rest


def _reshard(case: PeerCase, mesh: Any, inputs: dict[str, np.ndarray]) -> Any:
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    rank = len(case.shape)
    if "x" in inputs:
        x = jax.device_put(inputs["x"], NamedSharding(mesh, spec(case.src, rank)))
    else:
        parts, lead, rest = _partial_in(case, mesh, inputs["x_parts"])
        kind = next(p.op for p in case.src if isinstance(p, Partial))

        def fold(c: Any) -> Any:
            return _reduce(jax, kind)(c.reshape(c.shape[len(lead):]), tuple(lead))

        x = jax.shard_map(fold, mesh=mesh, in_specs=PartitionSpec(*lead, *rest),
                          out_specs=PartitionSpec(*rest))(parts)
    return jax.device_put(x, NamedSharding(mesh, spec(case.dst, rank)))


def _collective(case: PeerCase, mesh: Any, inputs: dict[str, np.ndarray]) -> Any:
    """The one mesh dim that changes, by the collective it needs."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    rank = len(case.shape)
    i = next(j for j, (s, d) in enumerate(zip(case.src, case.dst)) if s != d)
    name, s, d = NAMES[i], case.src[i], case.dst[i]
    size = case.view_shape[i]
    lax = jax.lax

    def step(x: Any) -> Any:
        if isinstance(s, Partial):
            x = x.reshape(x.shape[1:])
            if isinstance(d, Shard) and s.op == "sum":
                return lax.psum_scatter(x, name, scatter_dimension=d.dim, tiled=True)
            x = _reduce(jax, s.op)(x, name)
        elif isinstance(s, Shard) and isinstance(d, Shard):
            return lax.all_to_all(x, name, split_axis=d.dim, concat_axis=s.dim, tiled=True)
        elif isinstance(s, Shard):
            return lax.all_gather(x, name, axis=s.dim, tiled=True)
        if isinstance(d, Shard):  # whole -> sharded: each device keeps its chunk, nothing moves
            n = x.shape[d.dim] // size
            return lax.dynamic_slice_in_dim(x, lax.axis_index(name) * n, n, axis=d.dim)
        return x

    if "x" in inputs:
        x = jax.device_put(inputs["x"], NamedSharding(mesh, spec(case.src, rank)))
        in_spec = spec(case.src, rank)
    else:
        x, lead, rest = _partial_in(case, mesh, inputs["x_parts"])
        in_spec = PartitionSpec(*lead, *rest)
    return jax.shard_map(step, mesh=mesh, in_specs=in_spec, out_specs=spec(case.dst, rank), check_vma=False)(x)


def _layer(case: PeerCase, mesh: Any, inputs: dict[str, np.ndarray]) -> Any:
    import jax
    from jax.sharding import NamedSharding

    args = [jax.device_put(inputs[n], NamedSharding(mesh, spec(ps, len(s)))) for n, s, ps in case.operands()]
    out = NamedSharding(mesh, spec(case.dst, len(case.shape)))
    return jax.jit(lambda *a: jnp_op(case.op, list(case.params), list(case.shape), list(a)), out_shardings=out)(*args)


def run(case: PeerCase) -> PeerResult:
    _import()
    mesh = mesh_of(case)
    inputs = group_inputs(case, 0)
    runs = {"collective": _collective, "op": _layer}
    y = runs.get(case.kind, _reshard)(case, mesh, inputs)
    rank_of = {d.id: r for r, d in enumerate(mesh.devices.flat)}
    out: Blocks = {}
    for shard in y.addressable_shards:
        offset = tuple(s.indices(n)[0] for s, n in zip(shard.index, case.shape))
        out[rank_of[shard.device.id]] = Block(offset, np.asarray(shard.data))
    return PeerResult(out)


def script(case: PeerCase) -> str:
    from conformance.peers.jax_script import jax_script

    return jax_script(case, group_inputs(case, 0), expected(case))
