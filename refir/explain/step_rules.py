"""Why each step of a lowering is what it is: the rule lowering followed for
each kind of step (RULES), what a communication does to a nested axis, and what
differs between two placements of one value. `explain`, `trace`, `lower` and
`redistribute` print these lines.
"""

from __future__ import annotations

from refir.ir import ops
from refir.ir.types import TensorType, entries_of, shard_text
from refir.lowering.run_exchange import of_runs

RULES: dict[type, str] = {
    ops.Allgather: "sharded -> replicated on the same mesh: allgather",
    ops.Gather: "sharded -> replicated on another mesh: gather",
    ops.Scatter: "replicated -> sharded, a receiver lacks the data: scatter from one device",
    ops.Broadcast: "replicated -> replicated on another mesh: broadcast from the first source device",
    ops.SendRecv: "sharded -> sharded on the same axis, another mesh: send_recv, block k to block k",
    ops.AllToAll: "sharded -> sharded on another axis, same mesh: all_to_all",
    ops.Allreduce: "partial -> replicated: allreduce",
    ops.Reduce: "partial -> replicated on another mesh: reduce",
    ops.ReduceScatter: "partial -> sharded on the reduced mesh axis: reduce_scatter",
    ops.KeepBlock: "replicated -> sharded, every device already holds the data: each keeps its block",
    ops.Partition: "replicated -> partial, nothing moves: for sum and prod the device of coordinate 0 in each "
                   "team keeps the value and the others hold 0 (1); for max and min every device keeps it (spec §3.3)",
}


def rule_of(op: ops.Communication, src: TensorType, dst: TensorType) -> str:
    """The rule that chose a communication, with what it does to a nest or to runs."""
    if isinstance(op, ops.AllToAll) and op.split_axis == op.concat_axis:
        return "sharded -> the same axis cut another way, same mesh: all_to_all" + nest_rule(op, src, dst)
    return RULES[type(op)] + nest_rule(op, src, dst)


def _axis_text(a: object) -> str:
    shard = getattr(a, "shard", None)
    split = getattr(a, "split", ())
    return (f"interleaved on {shard_text(shard, split)}" if split else f"sharded on {shard_text(shard)}") \
        if shard else "whole"


def changes(src: TensorType, dst: TensorType) -> tuple[str, ...]:
    """What differs between two placements of one value, axis by axis."""
    out = []
    if src.mesh != dst.mesh:
        out.append(f"mesh {src.mesh.name} {_ids(src.mesh.devices)} -> mesh {dst.mesh.name} {_ids(dst.mesh.devices)}")
    for i, (a, b) in enumerate(zip(src.axes, dst.axes)):
        if (a.shard, a.split) != (b.shard, b.split):
            out.append(f"axis {i}: {_axis_text(a)} -> {_axis_text(b)}")
    if src.partial != dst.partial:
        gone = [k for k in src.partial if k not in dst.partial]
        new = [k for k in dst.partial if k not in src.partial]
        if gone:
            out.append(f"partial {src.partial_kind} over {', '.join(gone)} -> reduced")
        if new:
            out.append(f"replicated over {', '.join(new)} -> terms of a partial {dst.partial_kind}")
    return tuple(out)


def nest_rule(op: ops.Communication, src: TensorType, dst: TensorType) -> str:
    """What a communication does to a nested axis (spec §6): it drops or adds
    the nest's innermost mesh axis, within each block of the outer ones."""
    def nest(t: TensorType, i: int) -> str:
        return shard_text(t.axes[i].shard, t.axes[i].split) if t.axes[i].shard else "whole"

    match op:
        case ops.AllToAll(mesh_axis=k, split_axis=j, concat_axis=i) if of_runs(op, src, dst):
            what = f"axis {i} {nest(src, i)} -> {nest(dst, i)}" if i == j else \
                f"axis {i} {nest(src, i)} -> {nest(dst, i)}, axis {j} {nest(src, j)} -> {nest(dst, j)}"
            return (f"; interleaved, {what}: one exchange over {k}, each member sending each other the runs "
                    f"both hold (the direct rule, spec §6)")
        case ops.ReduceScatter(mesh_axis=k, axis=j) if of_runs(op, src, dst):
            return (f"; interleaved, axis {j} {nest(src, j)} -> {nest(dst, j)}: each member sending each other "
                    f"its terms of the other's runs over {k} (the direct rule, spec §6)")
        case ops.Allgather(axis=i, mesh_axis=k) if src.axes[i].split and dict(entries_of(src.axes[i]))[k] > 1:
            sf = dict(entries_of(src.axes[i]))[k]
            return (f"; interleaved {nest(src, i)} -> {nest(dst, i)}: over {k} with split factor {sf}, each "
                    f"member's runs put at their places (spec §3.4)")
        case ops.Allgather(axis=i, mesh_axis=k) if src.axes[i].nested:
            return f"; nested {nest(src, i)} -> {nest(dst, i)}: over its innermost {k}, in each block of the rest"
        case ops.AllToAll(mesh_axis=k, split_axis=j, concat_axis=i) if src.axes[i].nested or dst.axes[j].nested:
            return (f"; {k} leaves the inside of axis {i}'s nest ({nest(src, i)} -> {nest(dst, i)}) for the "
                    f"inside of axis {j}'s ({nest(src, j)} -> {nest(dst, j)})")
        case ops.ReduceScatter(mesh_axis=k, axis=j) if dst.axes[j].nested:
            return f"; nested {nest(src, j)} -> {nest(dst, j)}: each block of the outer mesh axes cut over {k}"
    return ""


def _ids(ds: tuple[int, ...]) -> str:
    return "[" + " ".join(map(str, ds)) + "]"
