"""Pictures of a program's steps: a local step and why it is local, a communication
with its teams, its moves (one by one up to MOVES_LISTED, else their pattern) and
each device's bytes; the value each step makes is drawn by refir.explain.pictures."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from refir.explain.pictures import DEVICES_LISTED, MOVES_LISTED, devices_text, ints, spans, value_picture
from refir.explain.placement import CommFacts, StepFacts, block_bytes
from refir.explain.step_rules import RULES
from refir.ir import ops
from refir.text.printer import format_call


def comm_picture(c: CommFacts, device: int | None = None, every_move: bool = False) -> Group:
    parts: list[RenderableType] = [Text(f"why {c.kind}: {c.rule}", style="bold")]
    parts += [Text(f"  {x}") for x in c.changes]
    listed = every_move or device is not None or c.moves <= MOVES_LISTED
    shown_teams = [t for t in c.teams if device is None or device in t.devices]
    for team in shown_teams if listed else shown_teams[:4]:
        roles = "" if team.senders == team.receivers == team.devices else (
            f" senders {devices_text(team.senders)} receivers {devices_text(team.receivers)}")
        parts.append(Text(f"  team {devices_text(team.devices)}{roles}"))
    if not listed and len(shown_teams) > 4:
        parts.append(Text(f"  ... and {len(shown_teams) - 4} more teams", style="dim"))
    if not listed:
        parts += [Text(f"  {line}") for line in pattern_lines(c)]
        parts.append(Text(f"  (--moves all lists the {c.moves:,} moves one by one; --device D shows D's)", style="dim"))
    else:
        moves = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title="moves", title_justify="left")
        for name in ("from", "to", "global block", "bytes each"):
            moves.add_column(name, no_wrap=True)
        grouped: dict[tuple, list[int]] = {}
        for tr in c.transfers(device):
            grouped.setdefault((tr.sender, tr.ranges, tr.nbytes), []).append(tr.receiver)
        for (s, ranges, n), receivers in grouped.items():
            moves.add_row(str(s), " ".join(map(str, receivers)), spans(ranges), str(n))
        if not grouped:
            parts.append(Text("  nothing moves between devices", style="dim"))
        else:
            parts.append(moves)
    members = c.devices() if device is None else [device]
    if every_move or len(members) <= DEVICES_LISTED:
        totals = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for name in ("device", "sends B", "receives B"):
            totals.add_column(name, justify="right", no_wrap=True)
        for d in members:
            sent, got = c.bytes_of(d)
            totals.add_row(str(d), str(sent), str(got))
        parts.append(totals)
    else:
        parts += [Text(f"  {line}") for line in totals_lines(c, members)]
    return Group(*parts)


def pattern_lines(c: CommFacts) -> list[str]:
    """A communication's moves as their pattern, in words linear in the devices:
    'each of the 1024 devices sends its 32 B block to the other 1023 of its team'."""
    sizes = sorted({len(t.devices) for t in c.teams})
    teams = f"{len(c.teams)} team{'s' * (len(c.teams) > 1)} of {'/'.join(map(str, sizes))} devices"
    blocks = sorted({block_bytes(b, c.src.type) for b in c.src.blocks})  # an interleaved block: its runs
    block = f"{blocks[0]} B" if len(blocks) == 1 else f"{blocks[0]}-{blocks[-1]} B"
    match c.op:
        case ops.Scatter(root=root):
            what = f"device {root} sends each receiver the block it holds after"
        case ops.Broadcast(root=root):
            what = f"device {root} sends its {block} block to every other receiver"
        case ops.AllToAll():
            what = "each device sends every other member of its team the piece of its block that member holds after"
        case ops.ReduceScatter():
            what = f"each device sends every other member of its team its {c.src.type.partial_kind} term of the block" \
                   " that member holds after"
        case _:
            term = f" {c.src.type.partial_kind} term" if c.src.type.partial else ""
            one = c.teams[0]
            if one.senders == one.receivers == one.devices:
                what = (f"each of the {len(one.devices)} devices sends its {block}{term} block to the other "
                        f"{len(one.devices) - 1} of its team")
            else:
                what = (f"each of the {len(one.senders)} senders sends its {block}{term} block to each of the "
                        f"{len(one.receivers)} receivers (itself excepted)")
    return [f"{what}: {c.moves:,} moves, {byte_text(c.total_bytes)} in all, in {teams}"]


def totals_lines(c: CommFacts, members: list[int]) -> list[str]:
    """Each device's bytes, summarised: the least and the most sent and received, and by whom."""
    lines = []
    for i, what in enumerate(("sends", "receives")):
        amounts = {d: c.bytes_of(d)[i] for d in members}
        lo, hi = min(amounts, key=amounts.__getitem__), max(amounts, key=amounts.__getitem__)
        if amounts[lo] == amounts[hi]:
            lines.append(f"every device {what} {amounts[lo]} B")
        else:
            lines.append(f"devices {what} {amounts[lo]} B (least: device {lo}) to {amounts[hi]} B (most: device {hi})")
    return lines


def byte_text(n: int) -> str:
    """Bytes as people read them: 33554432 -> '32 MiB (33,554,432 B)'."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit} ({n:,} B)"
    return f"{n} B"


def step_line(s: StepFacts) -> Text:
    text = Text()
    text.append(f"{s.step.out} = {s.call}", style="bold")
    e = s.step.eqn
    if s.step.out != e.out or s.comm:
        text.append(f"\n  lowered from {e.out} = {format_call(e.op, e.args)} at {e.loc}", style="dim")
    return text


def step_picture(s: StepFacts, device: int | None = None, idle: list[int] | None = None,
                 every_move: bool = False) -> Group:
    parts: list[RenderableType] = [step_line(s)]
    if s.comm is not None:
        parts.append(comm_picture(s.comm, device, every_move))
    else:
        t = s.placement.type
        rule = _local_rule(s)
        if rule:
            parts.append(Text(rule, style="italic"))
        parts.append(Text(f"local step on {devices_text(list(t.mesh.devices))}, layout {ints(list(t.order))}"
                          + ("" if t.layout is not None else " (row-major)")))
    parts.append(value_picture(s.placement, device, idle))
    return Group(*parts)


def _local_rule(s: StepFacts) -> str:
    if isinstance(s.step.op, ops.KeepBlock):
        nested = any(a.nested for a in s.placement.type.axes)
        return "why keep_block: " + RULES[ops.KeepBlock] + (
            " (a nest: its part of the block it holds, cut by the mesh axes it lacks; a resharding no collective "
            "makes directly gathers to a nest's outer part first, then cuts: spec §6)" if nested else "")
    if isinstance(s.step.op, ops.Partition):
        return f"why {ops.op_name(s.step.op)}: " + RULES[type(s.step.op)]
    if isinstance(s.step.op, ops.Copy):
        return "why copy: same placement, another layout"
    if isinstance(s.step.op, ops.Reshape):
        local = ("why local: reshape keeps every device's elements: its block of the operand is its block of the "
                 "result, whole rows of each split or merge (spec §5.10)") if s.placement.type.sharding() else ""
        return "\n".join(t for t in (local, s.note) if t)
    if isinstance(s.step.op, ops.WINDOWS):
        return f"why local: {ops.op_name(s.step.op)} changes only axes each device holds whole (spec §5.8)"
    return ""

