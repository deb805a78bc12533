"""`refir redistribute`: a DTensor resharding as a refir program, lowered, with
what each communication moves, and (optionally) run on spmd against the global
meaning. Self-contained: built on refir.lowering.lower and refir.explain.lowered_listing only."""

from __future__ import annotations

from math import prod

import numpy as np

from refir.checks.verifier import verify
from refir.errors import InputError
from refir.explain.device_sets import devices_text
from refir.explain.lowered_listing import TEAMS_LISTED, format_lowered
from refir.explain.step_rules import rule_of
from refir.frontends.dtensor import (
    Placement,
    did_of,
    local_block,
    nested_devices,
    parse_mesh,
    parse_placements,
    redistribute_program,
    to_refir,
)
from refir.ir import ops
from refir.ir.types import Mesh, Runs, TensorType, axis_runs, runs_length
from refir.lowering.lower import Lowered, Step, lower
from refir.lowering.teams import teams
from refir.text.printer import print_program

REDUCING = (ops.Allreduce, ops.Reduce, ops.ReduceScatter)


def _region(t: TensorType, device: int, shape: tuple[int, ...]) -> list[Runs]:
    """The device's block as runs of each axis (one run, or an interleaved axis's several: §3.4)."""
    return [axis_runs(t.mesh, a, n, device) if a.shard else ((0, n),) for a, n in zip(t.axes, shape)]


def _overlap(a: list[Runs], b: list[Runs]) -> int:
    return prod(sum(max(0, min(x1, y1) - max(x0, y0)) for x0, x1 in xs for y0, y1 in ys) for xs, ys in zip(a, b))


def received_bytes(step: Step, src: TensorType, shape: tuple[int, ...]) -> dict[int, int]:
    """Bytes each receiving device gets from other devices in this step, counted
    as a direct exchange: a block it did not hold, or (reductions) each other
    sender's contribution to its block."""
    dst = step.type
    size = dst.np_dtype.itemsize
    out: dict[int, int] = {}
    senders_of: dict[int, set[int]] = {}  # each receiver's senders, in one pass over the teams
    if isinstance(step.op, REDUCING):
        for team in teams(step.op, src, dst):
            for r in team.receivers:
                senders_of.setdefault(r, set()).update(team.senders)
    for d in dst.mesh.devices:
        mine = _region(dst, d, shape)
        n = prod(runs_length(r) for r in mine)
        if isinstance(step.op, REDUCING):
            out[d] = size * n * len(senders_of.get(d, set()) - {d})
        else:
            held = _overlap(mine, _region(src, d, shape)) if d in src.mesh else 0
            out[d] = size * (n - held)
    return out


def _placements(ps: tuple[Placement, ...]) -> str:
    return "[" + ", ".join(map(str, ps)) + "]"


def _moves(lowered: Lowered, shape: tuple[int, ...]) -> list[str]:
    lines = ["what moves (bytes each device receives, counted as a direct exchange):"]
    total = 0
    for k, step in enumerate(lowered.steps):
        if not step.is_communication:
            if isinstance(step.op, (ops.KeepBlock, ops.Copy)):
                nests = any(a.nested or a.split for t in (lowered.checked.func.params[0].type, step.type)
                            for a in t.axes)
                after = nests and isinstance(step.op, ops.KeepBlock) and k and lowered.steps[k - 1].is_communication
                runs = " (interleaved: each device keeps its runs, spec §3.4)" if isinstance(step.op, ops.KeepBlock) \
                    and step.type.interleaved() else ""
                lines.append(f"  {step.out}: {ops.op_name(step.op)}: local, nothing moves{runs}" + (
                    " (the fallback: no collective makes this resharding directly, so it gathered to a "
                    "placement each block is cut from, and each device keeps its own: spec §6)" if after else ""))
            elif isinstance(step.op, ops.Partition):
                keep = "every device keeps the value" if step.op.kind in ("max", "min") else \
                    f"the first device of each team along {', '.join(step.op.mesh_axes)} keeps the value, " \
                    f"the others hold {1 if step.op.kind == 'prod' else 0}"
                lines.append(f"  {step.out}: partition ({step.op.kind}): local, nothing moves; {keep}")
            elif isinstance(step.op, ops.Binary):  # an avg's terms divided by the team's size
                lines.append(f"  {step.out}: {step.op.name} by {step.args[1]}: local, nothing moves "
                             "(an avg's terms become a sum's)")
            continue
        (name,) = step.tensor_args()
        src = lowered.types[name]
        got = received_bytes(step, src, shape)
        total += sum(got.values())
        every = teams(step.op, src, step.type)
        shown = every if len(every) <= TEAMS_LISTED else every[:TEAMS_LISTED - 1]
        groups = " ".join(devices_text(t.devices) for t in shown)
        if len(shown) < len(every):
            groups += f" ... {len(every) - len(shown)} more teams, the last {devices_text(every[-1].devices)}"
        if len(got) <= 16:
            per = "  ".join(f"{d}: {b}" for d, b in got.items())
        else:  # a mesh of thousands: the devices that receive alike, together
            alike: dict[int, list[int]] = {}
            for dev, b in got.items():
                alike.setdefault(b, []).append(dev)
            per = "  ".join(f"{devices_text(ds)}: {b}" for b, ds in alike.items())
        lines.append(f"  {step.out}: {ops.op_name(step.op)} {_what(step.op)} teams {groups}")
        lines.append(f"      why: {rule_of(step.op, src, step.type)}")
        lines.append(f"      received per device  {per}")
    lines.append(f"  total received: {total} bytes")
    return lines


def _what(op: object) -> str:
    match op:
        case ops.Allgather(axis=a, mesh_axis=k):
            return f"of axis {a} over {k}"
        case ops.ReduceScatter(kind=kind, mesh_axis=k, axis=a):
            return f"({kind}) over {k}, scattering axis {a}"
        case ops.Allreduce(kind=kind, mesh_axes=ks):
            return f"({kind}) over {', '.join(ks)}"
        case ops.AllToAll(mesh_axis=k, split_axis=s, concat_axis=c) if s == c:
            return f"over {k}: axis {s} cut over {k} another way (its runs, spec §3.4)"
        case ops.AllToAll(mesh_axis=k, split_axis=s, concat_axis=c):
            return f"over {k}: axis {s} becomes sharded, axis {c} whole"
    return ""


def _partial_target_lines(s: TensorType, d: TensorType) -> list[str]:
    """How each side holds a Partial target: the source's own terms where it was partial there
    (a no-op, DTensor's too), else made from the value (docs/spec.md §3.3)."""
    kept = [k for k in d.partial if k in s.partial]
    made = [k for k in d.partial if k not in s.partial]
    out = []
    if kept:
        out.append(f"  the partial target on {', '.join(kept)}: each device keeps its term (DTensor: the same no-op)")
    if made and d.partial_kind == "sum":
        out.append(f"  the partial target on {', '.join(made)}: refir keeps the value on each team's first device "
                   "and 0 on the others, DTensor x / n on every device (Partial._partition_value; an integer's "
                   "truncated): other terms, the same sum")
    elif made:
        out.append(f"  the partial target on {', '.join(made)}: every device keeps the value, as DTensor's "
                   f"Partial._partition_value does for {d.partial_kind}")
    return out


def explain_redistribute(mesh: Mesh, shape: tuple[int, ...], src: tuple[Placement, ...],
                         dst: tuple[Placement, ...], dtype: str = "f32", run: bool = True, seed: int = 0) -> str:
    s, d = to_refir(shape, mesh, src, dtype), to_refir(shape, mesh, dst, dtype)
    program = redistribute_program(mesh, shape, src, dst, dtype)
    checked = verify(program)
    lowered = lower(checked)
    dims = ", ".join(f"mesh dim {i} -> {did_of(mesh, i)}" for i in range(mesh.ndim))
    lines = [
        f"redistribute {dtype}{list(shape)} on mesh {'x'.join(map(str, mesh.shape))} (devices "
        f"{nested_devices(mesh) if len(mesh.devices) <= 16 else devices_text(mesh.devices) + ' in mesh order'})",
        f"  from {_placements(src)} = {s}",
        f"  to   {_placements(dst)} = {d}",
        f"  ({dims}; DIDx is the last mesh dimension)",
    ]
    if s.partial:
        lines.append(f"  the partial source: each device holds a term of the value ({s.partial_kind} over "
                     f"{', '.join(s.partial)}, refir.running.partial_inputs)")
    lines += _partial_target_lines(s, d)
    lines += ["", "program:", *("  " + x for x in print_program(program).rstrip().split("\n")), ""]
    lines += ["lowered:", *("  " + x for x in format_lowered(lowered).split("\n")), ""]
    lines += _moves(lowered, shape)
    if run:
        lines += ["", *check_run(program, s, d, shape, seed)]
    return "\n".join(lines)


def check_run(program: object, s: TensorType, d: TensorType, shape: tuple[int, ...], seed: int) -> list[str]:
    """Run on spmd; every device's block must be the DTensor block of the value."""
    from refir.running.runner import run

    rng = np.random.default_rng(seed)
    value = rng.integers(-4, 5, shape).astype(s.np_dtype)
    result = run(program, {"x": value}, backend="spmd")
    shapes = "  ".join(f"{dev}: {list(result.shards['y'][dev].shape)}" for dev in d.mesh.devices)
    if d.partial:  # refir's terms are not DTensor's: the value they fold to is what must agree
        same = np.array_equal(result.outputs["y"], value)
        return [f"run on spmd (seed {seed}): the terms fold back to the value: {'yes' if same else 'NO'}",
                f"  local shapes  {shapes}"]
    bad = [dev for dev in d.mesh.devices
           if not np.array_equal(result.shards["y"][dev], local_block(d, value, dev))]
    verdict = "yes" if not bad else f"NO (devices {bad})"
    return [f"run on spmd (seed {seed}): every device's block equals the DTensor block of the value: {verdict}",
            f"  local shapes  {shapes}"]


def redistribute_report(mesh_text: str, shape_text: str, src_text: str, dst_text: str, dtype: str = "f32",
                        run: bool = True, seed: int = 0) -> str:
    """`refir redistribute`: the program, its lowering, what moves and whether it runs right."""
    mesh = parse_mesh(mesh_text)
    try:
        shape = tuple(int(n) for n in shape_text.split(","))
    except ValueError:
        raise InputError(f"bad shape {shape_text!r}: write extents joined by commas, e.g. 8,6") from None
    return explain_redistribute(mesh, shape, parse_placements(src_text), parse_placements(dst_text), dtype,
                                run, seed)
