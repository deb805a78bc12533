"""`refir lower`: the lowered program, segment by segment, with every buffer's
local shape and element strides on each device, and every communication's teams
(past TEAMS_LISTED, its first and last ones around a count; sets of more than 16
devices as ranges: a mesh of thousands lists in a few lines)."""

from __future__ import annotations

from math import prod

from refir.explain.device_sets import devices_text
from refir.ir import ops
from refir.ir.types import (
    Axis,
    Bindings,
    Runs,
    TensorType,
    axis_block,
    axis_length,
    axis_runs,
    entries_of,
    parts_of,
    resolved,
    shard_text,
)
from refir.lowering.lower import Lowered, Step
from refir.lowering.teams import teams
from refir.text.printer import format_call

TEAMS_LISTED = 8  # past this many teams a communication lists its first and last ones around a count


def _local_extent(t: TensorType, a: Axis) -> str:
    """The longest block (shard_c1): ceil(E/n), cut again by each further mesh axis of a nest."""
    if isinstance(a.extent, int):
        return str(axis_length(t.mesh, a, a.extent, None))  # the first device's: the longest, interleaved too
    text = str(a.extent)  # E/4 reads left to right: ceil(E/4/4) is the block of E/4 over 4
    for d, sf in entries_of(a):
        text = f"ceil({text}/{t.mesh.size(d)})" if sf == 1 else f"{sf}*ceil(ceil({text}/{sf})/{t.mesh.size(d)})"
    return text


def runs_text(runs: Runs) -> str:
    return " ".join(f"{lo}" if hi == lo + 1 else f"{lo}:{hi}" for lo, hi in runs) or "none"


def interleaved_note(t: TensorType, i: int, a: Axis) -> str:
    """Which rows of an interleaved axis (§3.4) each device holds, in buffer order."""
    if not isinstance(a.extent, int):
        return (f"axis {i}: interleaved ({shard_text(a.shard, a.split)}): each mesh axis cuts every one "
                "of its split factor's pieces into blocks")
    devices = t.mesh.devices
    shown = devices if len(devices) <= TEAMS_LISTED * 4 else devices[:TEAMS_LISTED]
    words = [f"{d}: rows {runs_text(axis_runs(t.mesh, a, a.extent, d))}" for d in shown]
    more = f", ... ({len(devices) - len(shown)} more)" if len(shown) < len(devices) else ""
    return f"axis {i}: {a.extent} interleaved over {shard_text(a.shard, a.split)} -> device {'; '.join(words)}{more}"


def local_extents(t: TensorType) -> list[str]:
    return [_local_extent(t, a) for a in t.axes]


def element_strides(t: TensorType) -> list[str]:
    """Strides in elements, dense in the type's memory order (symbolic where needed)."""
    local = local_extents(t)
    strides = [""] * t.rank
    inner: list[str] = []
    for axis in reversed(t.order):
        ints = [int(x) for x in inner if x.isdigit()]
        syms = [x for x in inner if not x.isdigit()]
        number = prod(ints)
        strides[axis] = "*".join(([str(number)] if number != 1 or not syms else []) + syms[::-1])
        inner.append(local[axis])
    return strides


def format_buffer(t: TensorType) -> str:
    return f"local [{', '.join(local_extents(t))}] strides [{', '.join(element_strides(t))}]"


def uneven_blocks(t: TensorType) -> str | None:
    """Each device's block on every sharded axis that may not divide evenly
    (short and empty blocks named plainly); None where every block is equal."""
    notes = []
    for i, a in enumerate(t.axes):
        if not a.shard:
            continue
        if a.split:
            notes.append(interleaved_note(t, i, a))
            continue
        n = parts_of(t.mesh, a)
        if not isinstance(a.extent, int):
            notes.append(f"axis {i}: blocks of {_local_extent(t, a)}, the last ones shorter or empty"
                         + (" (each cut inside the one before: nested)" if a.nested else ""))
        elif a.extent % n:
            full = int(_local_extent(t, a))
            sizes = []
            for d in t.mesh.devices:
                lo, hi = axis_block(t.mesh, a, a.extent, d)
                sizes.append((d, hi - lo))
            if len(sizes) <= TEAMS_LISTED * 4:
                words = [f"{d}:{size}" + (" empty" if size == 0 else " short" if size < full else "")
                         for d, size in sizes]
                notes.append(f"axis {i}: {a.extent} over {n} -> device {', '.join(words)}")
                continue
            by_size: dict[int, list[int]] = {}  # a mesh of thousands: the devices of each block size
            for d, size in sizes:
                by_size.setdefault(size, []).append(d)
            words = [f"{size}{' (empty)' if size == 0 else ' (short)' if size < full else ''} on "
                     f"{devices_text(ds)}" for size, ds in by_size.items()]
            notes.append(f"axis {i}: {a.extent} over {n} -> blocks of {'; '.join(words)}")
    return "; ".join(notes) or None


def format_step(step: Step, lowered: Lowered, bindings: Bindings | None = None) -> list[str]:
    t = resolved(step.type, bindings) if bindings else step.type
    lines = [f"    {step.out}: {t} = {format_call(step.op, step.args)}"]
    lines.append(f"        {format_buffer(t)} on devices {devices_text(t.mesh.devices)}")
    blocks = uneven_blocks(t)
    if blocks:
        lines.append(f"        {blocks}")
    if step.is_communication:
        (src,) = step.tensor_args()
        every = teams(step.op, lowered.types[src], step.type)
        shown = every if len(every) <= TEAMS_LISTED else [*every[:TEAMS_LISTED - 1], every[-1]]
        for k, team in enumerate(shown):
            if k == TEAMS_LISTED - 1 and len(every) > TEAMS_LISTED:
                lines.append(f"        ... {len(every) - TEAMS_LISTED} more teams of {len(team.devices)} "
                             "(explain --json lists every one)")
            role = "" if team.senders == team.receivers == team.devices else (
                f" senders {devices_text(team.senders)} receivers {devices_text(team.receivers)}")
            lines.append(f"        team {devices_text(team.devices)}{role}")
    return lines


def format_lowered(lowered: Lowered, bindings: Bindings | None = None) -> str:
    """The listing; with `bindings`, every extent is its bound value (symbols otherwise)."""
    func = lowered.checked.func
    n = len(lowered.segments)
    binds = ", ".join(f"{k}={v}" for k, v in sorted((bindings or {}).items()))
    out = [f"func {func.name}: {n} segment{'s' * (n != 1)}" + (f" ({binds})" if binds else "")]
    for p in func.params:
        t = resolved(p.type, bindings) if bindings else p.type
        out.append(f"  input {p.name}: {t}  {format_buffer(t)}"
                   + ("" if t.layout is not None else " (any strides accepted)"))
        blocks = uneven_blocks(t)
        if blocks:
            out.append(f"        {blocks}")
    for seg in lowered.segments:
        kind = ops.op_name(seg.steps[0].op) if seg.kind == "communication" else "compute"
        scalars = f" + scalars {', '.join(seg.scalars)}" if seg.scalars else ""
        scalars += f" + extents {', '.join(seg.extents)}" if seg.extents else ""
        out.append(f"  segment {seg.index} ({kind}): inputs {', '.join(seg.inputs) or '-'}{scalars}"
                   f" -> outputs {', '.join(seg.outputs) or '-'}")
        for step in seg.steps:
            out += format_step(step, lowered, bindings)
    returned = (r if lowered.source(r) == r else f"{lowered.source(r)} as {r}" for r in lowered.results)
    out.append(f"  return {', '.join(returned)}")
    return "\n".join(out)

