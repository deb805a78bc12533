"""refir's side of a peer case: the program, run on spmd once per group, and
every rank's block (its offset from refir's block rule, spec §3.1)."""

from __future__ import annotations

from conformance.peers import layer_ops, shape_ops
from conformance.peers.partial_compare import partial_target, uses_terms, value
from conformance.peers.spec import Block, Blocks, PeerCase, block_offset, group_inputs, result_type
from refir.errors import RefirError
from refir.frontends import builder
from refir.frontends.dtensor import (
    Placement,
    Replicate,
    Shard,
    from_refir,
    nested_devices,
    redistribute_program,
    to_refir,
)
from refir.ir.program import Program
from refir.ir.types import Mesh


def program(case: PeerCase, mesh: Mesh) -> Program:
    """A resharding is refir.frontends.dtensor's program. An op is refir's own plan: each
    operand set to placements the op accepts (the result's shardings; a reduced
    or contracted axis keeps its source's mesh dim where the result leaves it
    free, so that refir's partial path and its allreduce / reduce_scatter run),
    then the op, typed with the target placements."""
    if case.kind != "op":  # a Partial target or an avg source: the partial type itself (partial_compare)
        return redistribute_program(mesh, case.shape, case.src, case.dst, case.dtype,
                                    contributions=not (partial_target(case) or uses_terms(case)))
    b = builder.Builder()
    b.mesh(nested_devices(mesh), name=mesh.name)
    if moved(case):  # the op where its operands are (see shape_ops, layer_ops), then to the target
        y = _op_result(case, mesh, b)
        b.output(y.set(name="y", result_type=result_type(case, mesh)))
        return b.build()
    args = []
    for (name, shape, ps), want in zip(case.operands(), operand_targets(case)):
        x = b.input(name, to_refir(shape, mesh, ps, case.dtype))
        args.append(x if want == ps else x.set(name=f"{name}_set", result_type=to_refir(shape, mesh, want,
                                                                                          case.dtype)))
    out = {"name": "y", "result_type": result_type(case, mesh)}
    if case.op in ("add", "mul"):
        y = builder.binary(case.op, *args, **out)
    elif case.op == "matmul":
        y = args[0].matmul(args[1], **out)
    else:
        y = args[0].reduce(case.op, [case.axis], **out)
    b.output(y)
    return b.build()


def moved(case: PeerCase) -> bool:
    """A shape or layer op: applied where its operands are, by refir's own sharding rules."""
    return case.kind == "op" and (case.op in shape_ops.SHAPE_OPS or case.op in layer_ops.LAYER_OPS)


def _op_result(case: PeerCase, mesh: Mesh, b: builder.Builder) -> builder.Value:
    xs = [b.input(name, to_refir(shape, mesh, ps, case.operand_dtype(name))) for name, shape, ps in case.operands()]
    table = shape_ops if case.op in shape_ops.SHAPE_OPS else layer_ops
    return table.refir_op(case.op, case.shape, case.params, xs, case.dtype)


def own_placements(case: PeerCase) -> tuple[Placement, ...] | None:
    """Where refir's plan puts a shape or layer op's result, before the `set` to the
    target (on the first group's mesh); None for the other cases, or a type DTensor cannot write."""
    if not moved(case):
        return None
    b = builder.Builder()
    mesh = case.mesh(case.groups()[0])
    b.mesh(nested_devices(mesh), name=mesh.name)
    try:
        return from_refir(_op_result(case, mesh, b).type)[2]
    except RefirError:
        return None


def operand_targets(case: PeerCase) -> list[tuple[Placement, ...]]:
    """Per operand, the placements refir's plan sets it to (see program)."""
    dst = case.dst
    if case.op in ("add", "mul"):
        return [dst, dst]

    def keep(p: Placement, dim: int) -> bool:  # the source shards the inner axis here, and dst leaves it free
        return p == Shard(dim)

    if case.op == "matmul":
        x = case.src
        xs, ws = [], []
        for i, d in enumerate(dst):
            inner = isinstance(d, Replicate) and keep(x[i], 1)
            xs.append(Shard(1) if inner else Shard(0) if d == Shard(0) else Replicate())
            ws.append(Shard(0) if inner else Shard(1) if d == Shard(1) else Replicate())
        return [tuple(xs), tuple(ws)]
    out = []
    for i, d in enumerate(dst):
        if isinstance(d, Shard):
            out.append(Shard(d.dim + (d.dim >= case.axis)))
        else:
            out.append(Shard(case.axis) if keep(case.src[i], case.axis) else Replicate())
    return [tuple(out)]
def run(case: PeerCase) -> Blocks:
    import refir

    out: Blocks = {}
    for g, group in enumerate(case.groups()):
        mesh = case.mesh(group)
        inputs = {"x": value(case, g)} if uses_terms(case) else group_inputs(case, g)
        result = refir.run(program(case, mesh), inputs, backend="spmd")
        t = result_type(case, mesh)
        for r in group:
            local = result.shards["y"][r]
            offset = block_offset(t, r, case.shape)
            out[r] = Block(offset, local)
    return out

