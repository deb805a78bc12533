"""Where every value lies and what every communication moves: the facts that
`explain`, `trace` and the `--json` outputs show.

Block ranges come from refir.ir.types.block_slices alone, so a change in how an
axis is cut (uneven blocks, empty blocks) shows up here unchanged. Nothing here
runs a program: the facts follow from the types, the bindings and the teams.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from refir.ir import ops
from refir.ir.types import TensorType, block_slices, dense_strides, global_shape
from refir.lowering.lower import Lowered, Step
from refir.lowering.teams import Team, teams
from refir.text.printer import format_call

Range = tuple[int, int]  # [start, stop) of one global axis


@dataclass(frozen=True)
class Block:
    """One device's part of a value."""

    device: int
    coords: tuple[int, ...]  # on the value's mesh
    ranges: tuple[Range, ...]  # global index ranges, one per tensor axis
    local_shape: tuple[int, ...]
    byte_strides: tuple[int, ...]  # dense in the type's memory order

    @property
    def empty(self) -> bool:
        return any(b <= a for a, b in self.ranges)


@dataclass(frozen=True)
class Placement:
    """How one value's global tensor lies over its mesh."""

    name: str
    type: TensorType
    shape: tuple[int, ...]  # global
    blocks: tuple[Block, ...]  # in mesh order
    is_input: bool = False

    def block(self, device: int) -> Block:
        return next(b for b in self.blocks if b.device == device)

    def block_number(self, b: Block) -> dict[int, int]:
        """Sharded tensor axis -> which of its blocks `b` is (the device's mesh coordinate)."""
        return {i: self.type.mesh.coord(b.device, k) for i, k in self.type.sharding().items()}

    def holders(self) -> list[tuple[dict[int, int], tuple[Range, ...], tuple[int, ...]]]:
        """Each distinct block (by block number, so that empty blocks stay apart)
        with its ranges and the devices holding it (copies, or partial terms)."""
        out: dict[tuple, tuple[dict[int, int], tuple[Range, ...], list[int]]] = {}
        for b in self.blocks:
            number = self.block_number(b)
            out.setdefault(tuple(sorted(number.items())), (number, b.ranges, []))[2].append(b.device)
        return [(n, r, tuple(ds)) for n, r, ds in out.values()]


@dataclass(frozen=True)
class Transfer:
    """`sender` sends the block `ranges` of the value (a partial term where the
    source is partial) to `receiver`."""

    sender: int
    receiver: int
    ranges: tuple[Range, ...]
    nbytes: int


@dataclass(frozen=True)
class CommFacts:
    kind: str
    rule: str  # the lowering rule that chose it
    changes: tuple[str, ...]  # what changed placement, from what to what
    teams: tuple[Team, ...]
    transfers: tuple[Transfer, ...]

    def bytes_of(self, device: int) -> tuple[int, int]:
        """(sent, received) by `device`."""
        sent = sum(t.nbytes for t in self.transfers if t.sender == device)
        received = sum(t.nbytes for t in self.transfers if t.receiver == device)
        return sent, received

    def devices(self) -> list[int]:
        return list(dict.fromkeys(d for t in self.teams for d in t.devices))


def slice_range(s: slice, n: int) -> Range:
    start, stop, _ = s.indices(n)
    return start, max(start, stop)


def placement(name: str, t: TensorType, bindings: dict[str, int], is_input: bool = False) -> Placement:
    shape = global_shape(t, bindings)
    blocks = []
    for d in t.mesh.devices:
        ranges = tuple(slice_range(s, n) for s, n in zip(block_slices(t, d, shape), shape))
        local = tuple(b - a for a, b in ranges)
        strides = dense_strides(local, t.order, t.np_dtype.itemsize)
        blocks.append(Block(d, t.mesh.coords(d), ranges, local, strides))
    return Placement(name, t, shape, tuple(blocks), is_input)


def nbytes(ranges: tuple[Range, ...], t: TensorType) -> int:
    return prod(max(0, b - a) for a, b in ranges) * t.np_dtype.itemsize


def intersect(a: tuple[Range, ...], b: tuple[Range, ...]) -> tuple[Range, ...]:
    out = []
    for (a0, a1), (b0, b1) in zip(a, b):
        lo = max(a0, b0)
        out.append((lo, max(lo, min(a1, b1))))
    return tuple(out)


def _pairs(op: ops.Communication, team: Team) -> list[tuple[int, int]]:
    """Who sends to whom in one team (never a device to itself)."""
    match op:
        case ops.Scatter(root=root) | ops.Broadcast(root=root):
            return [(root, r) for r in team.receivers if r != root]
    return [(s, r) for s in team.senders for r in team.receivers if s != r]


def _moved(op: ops.Communication, s: Block, r: Block) -> tuple[Range, ...]:
    """The block of global indices that goes from sender block `s` to receiver block `r`."""
    match op:
        case ops.Scatter():
            return r.ranges
        case ops.AllToAll() | ops.ReduceScatter():
            return intersect(s.ranges, r.ranges)
    return s.ranges  # the sender's whole block (a partial term for allreduce and reduce)


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
}


def _axis_text(a: object) -> str:
    shard = getattr(a, "shard", None)
    return f"sharded on {shard}" if shard else "whole"


def changes(src: TensorType, dst: TensorType) -> tuple[str, ...]:
    """What differs between two placements of one value, axis by axis."""
    out = []
    if src.mesh != dst.mesh:
        out.append(f"mesh {src.mesh.name} {_ids(src.mesh.devices)} -> mesh {dst.mesh.name} {_ids(dst.mesh.devices)}")
    for i, (a, b) in enumerate(zip(src.axes, dst.axes)):
        if a.shard != b.shard:
            out.append(f"axis {i}: {_axis_text(a)} -> {_axis_text(b)}")
    if src.partial != dst.partial:
        gone = [k for k in src.partial if k not in dst.partial]
        out.append(f"partial {src.partial_kind} over {', '.join(gone)} -> reduced")
    return tuple(out)


def comm_facts(op: ops.Communication, src: Placement, dst: Placement) -> CommFacts:
    ts = tuple(teams(op, src.type, dst.type))
    transfers = []
    for team in ts:
        for s, r in _pairs(op, team):
            moved = _moved(op, src.block(s), dst.block(r))
            transfers.append(Transfer(s, r, moved, nbytes(moved, src.type)))
    rule = RULES[type(op)]
    if isinstance(op, (ops.Scatter, ops.Broadcast)):
        rule += f" (device {op.root})"
    return CommFacts(ops.op_name(op), rule, changes(src.type, dst.type), ts, tuple(transfers))


@dataclass(frozen=True)
class StepFacts:
    step: Step
    segment: int
    placement: Placement
    comm: CommFacts | None = None  # for a communication

    @property
    def call(self) -> str:
        return format_call(self.step.op, self.step.args)


@dataclass(frozen=True)
class Explained:
    lowered: Lowered
    bindings: dict[str, int]
    world: int
    inputs: tuple[Placement, ...]
    steps: tuple[StepFacts, ...]

    def values(self) -> list[Placement]:
        """Every value in program order: inputs, then each step's result."""
        return list(self.inputs) + [s.placement for s in self.steps]

    def value(self, name: str) -> Placement:
        return next(p for p in self.values() if p.name == name)


def explain(lowered: Lowered, bindings: dict[str, int], world: int) -> Explained:
    func = lowered.checked.func
    inputs = tuple(placement(p.name, p.type, bindings, True) for p in func.params)
    known = {p.name: p for p in inputs}
    segment_of = {s.out: seg.index for seg in lowered.segments for s in seg.steps}
    out = []
    for step in lowered.steps:
        here = placement(step.out, step.type, bindings)
        comm = None
        if step.is_communication:
            (src,) = step.tensor_args()
            comm = comm_facts(step.op, known[src], here)
        known[step.out] = here
        out.append(StepFacts(step, segment_of[step.out], here, comm))
    return Explained(lowered, bindings, world, inputs, tuple(out))


def _ids(ds: tuple[int, ...]) -> str:
    return "[" + " ".join(map(str, ds)) + "]"
