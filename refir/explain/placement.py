"""Where every value lies and what every communication moves: the facts that
`explain`, `trace` and the `--json` outputs show.

Block ranges come from refir.ir.types.block_slices alone, so a change in how an
axis is cut (uneven blocks, empty blocks) shows up here unchanged. Nothing here
runs a program: the facts follow from the types, the bindings and the teams.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from math import prod

from refir.checks.rules_reshape import inferred_note
from refir.explain.move_bytes import block_bytes, of_runs, pair_count, piece_bytes, shared, team_totals
from refir.explain.step_rules import changes, rule_of
from refir.ir import ops
from refir.ir.types import (
    Axis,
    Runs,
    TensorType,
    axis_runs,
    block_number,
    block_slices,
    dense_strides,
    global_shape,
    runs_length,
)
from refir.lowering.lower import Lowered, Step
from refir.lowering.teams import Team, teams
from refir.text.printer import format_call

Range = tuple[int, int]  # [start, stop) of one global axis


@dataclass(frozen=True)
class Block:
    """One device's part of a value."""

    device: int
    coords: tuple[int, ...]  # on the value's mesh
    ranges: tuple[Range, ...]  # global index ranges, one per tensor axis (an interleaved axis: its runs' hull)
    local_shape: tuple[int, ...]
    byte_strides: tuple[int, ...]  # dense in the type's memory order
    runs: tuple[Runs, ...] | None = None  # each axis's runs, where the type has an interleaved axis (§3.4)

    @property
    def axis_runs(self) -> tuple[Runs, ...]:
        """Each axis's global runs: its runs where interleaved, else its range."""
        return self.runs if self.runs is not None else tuple(((a, b),) if b > a else () for a, b in self.ranges)

    @property
    def empty(self) -> bool:
        return 0 in self.local_shape or any(b <= a for a, b in self.ranges)


@dataclass(frozen=True)
class Placement:
    """How one value's global tensor lies over its mesh."""

    name: str
    type: TensorType
    shape: tuple[int, ...]  # global
    blocks: tuple[Block, ...]  # in mesh order
    is_input: bool = False

    def block(self, device: int) -> Block:
        return self._by_device[device]

    @cached_property
    def _by_device(self) -> dict[int, Block]:
        return {b.device: b for b in self.blocks}  # asked per move: a search would be quadratic

    def block_number(self, b: Block) -> dict[int, int]:
        """Sharded tensor axis -> which of its blocks `b` is (the device's mesh
        coordinate; a nest's coordinates read outermost first: blocks.block_number)."""
        return {i: block_number(self.type.mesh, a, b.device) for i, a in self._sharded_on}

    @cached_property
    def _sharded_on(self) -> tuple[tuple[int, Axis], ...]:
        return tuple((i, a) for i, a in enumerate(self.type.axes) if a.shard)

    def holders(self) -> list[tuple[dict[int, int], tuple[Range, ...], tuple[int, ...]]]:
        """Each distinct block (by block number, so that empty blocks stay apart)
        with its ranges and the devices holding it (copies, or partial terms)."""
        return self._holders

    @cached_property
    def _holders(self) -> list[tuple[dict[int, int], tuple[Range, ...], tuple[int, ...]]]:
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
    """What one communication moves. Its moves are enumerated only when asked
    (`transfers`): an allgather of n devices makes n(n-1) of them, where the
    counts and each device's bytes (`moves`, `bytes_of`) cost time linear in the devices."""

    kind: str
    rule: str  # the lowering rule that chose it
    changes: tuple[str, ...]  # what changed placement, from what to what
    teams: tuple[Team, ...]
    op: ops.Communication
    src: Placement
    dst: Placement

    def transfers(self, device: int | None = None) -> Iterator[Transfer]:
        """Every move, team by team, sender by sender; only `device`'s (sent or
        received) when given."""
        for team in self.teams:
            if device is not None and device not in team.devices:
                continue
            for s, r in _pairs(self.op, team, device):
                sent, got = self.src.block(s), self.dst.block(r)
                moved = _moved(self.op, sent, got) if not of_runs(self.src, self.dst) else \
                    _moved_runs(self.op, sent, got)
                whole = sent if moved is sent.ranges else got if moved is got.ranges else None
                yield Transfer(s, r, moved, block_bytes(whole, self.src.type) if whole is not None
                               else piece_bytes(sent, got, self.src.type) if of_runs(self.src, self.dst)
                               else nbytes(moved, self.src.type))

    @cached_property
    def moves(self) -> int:
        """How many moves `transfers` enumerates (pairs, empty pieces included)."""
        return sum(pair_count(self.op, team) for team in self.teams)

    @cached_property
    def _totals(self) -> dict[int, list[int]]:
        totals: dict[int, list[int]] = {}
        for team in self.teams:
            team_totals(self.op, team, self.src, self.dst, totals)
        return totals

    def bytes_of(self, device: int) -> tuple[int, int]:
        """(sent, received) by `device`."""
        sent, received = self._totals.get(device, (0, 0))
        return sent, received

    @property
    def total_bytes(self) -> int:
        return sum(sent for sent, _ in self._totals.values())

    def devices(self) -> list[int]:
        return list(dict.fromkeys(d for t in self.teams for d in t.devices))


def slice_range(s: slice, n: int) -> Range:
    start, stop, _ = s.indices(n)
    return start, max(start, stop)


def placement(name: str, t: TensorType, bindings: dict[str, int], is_input: bool = False) -> Placement:
    shape = global_shape(t, bindings)
    sharded = [t.mesh.axis_of(d) for a in t.axes for d in a.dids]
    itemsize = t.np_dtype.itemsize
    made: dict[tuple[int, ...], tuple[tuple[Range, ...], tuple[int, ...], tuple[int, ...]]] = {}
    blocks = []
    for d in t.mesh.devices:  # devices of one block number share its ranges: each worked out once
        coords = t.mesh.coords(d)
        key = tuple(coords[m] for m in sharded)
        if key not in made:
            if t.interleaved():  # §3.4: runs on each axis; ranges are their hulls
                runs = tuple(axis_runs(t.mesh, a, n, d) if a.shard else ((0, n),) for a, n in zip(t.axes, shape))
                ranges = tuple((r[0][0], r[-1][1]) if r else (0, 0) for r in runs)
                local = tuple(runs_length(r) for r in runs)
                made[key] = (ranges, local, dense_strides(local, t.order, itemsize), runs)
            else:
                ranges = tuple(slice_range(s, n) for s, n in zip(block_slices(t, d, shape), shape))
                local = tuple(b - a for a, b in ranges)
                made[key] = (ranges, local, dense_strides(local, t.order, itemsize), None)
        blocks.append(Block(d, coords, *made[key]))
    return Placement(name, t, shape, tuple(blocks), is_input)


def nbytes(ranges: tuple[Range, ...], t: TensorType) -> int:
    return prod(max(0, b - a) for a, b in ranges) * t.np_dtype.itemsize


def intersect(a: tuple[Range, ...], b: tuple[Range, ...]) -> tuple[Range, ...]:
    out = []
    for (a0, a1), (b0, b1) in zip(a, b):
        lo = max(a0, b0)
        out.append((lo, max(lo, min(a1, b1))))
    return tuple(out)


def _pairs(op: ops.Communication, team: Team, device: int | None = None) -> Iterator[tuple[int, int]]:
    """Who sends to whom in one team (never a device to itself), sender by sender;
    only the pairs `device` takes part in when given (in the same order)."""
    match op:
        case ops.Scatter(root=root) | ops.Broadcast(root=root):
            for r in team.receivers:
                if r != root and device in (None, root, r):
                    yield root, r
            return
    for s in team.senders:
        if device is None or s == device:
            yield from ((s, r) for r in team.receivers if s != r)
        elif device in team.receivers:
            yield s, device


def _moved(op: ops.Communication, s: Block, r: Block) -> tuple[Range, ...]:
    """The block of global indices that goes from sender block `s` to receiver block `r`."""
    match op:
        case ops.Scatter():
            return r.ranges
        case ops.AllToAll() | ops.ReduceScatter():
            return intersect(s.ranges, r.ranges)
    return s.ranges  # the sender's whole block (a partial term for allreduce and reduce)


def _moved_runs(op: ops.Communication, s: Block, r: Block) -> tuple[Range, ...]:
    """_moved where a block is runs: an all_to_all's or reduce_scatter's piece as
    the hull of the runs both hold, axis by axis (its bytes: piece_bytes)."""
    if not isinstance(op, (ops.AllToAll, ops.ReduceScatter)):
        return _moved(op, s, r)
    return tuple((x[0][0], x[-1][1]) if x else (0, 0) for x in shared(s, r))


def comm_facts(op: ops.Communication, src: Placement, dst: Placement) -> CommFacts:
    ts = tuple(teams(op, src.type, dst.type))
    rule = rule_of(op, src.type, dst.type)
    if isinstance(op, (ops.Scatter, ops.Broadcast)):
        rule += f" (device {op.root})"
    return CommFacts(ops.op_name(op), rule, changes(src.type, dst.type), ts, op, src, dst)


@dataclass(frozen=True)
class StepFacts:
    step: Step
    segment: int
    placement: Placement
    comm: CommFacts | None = None  # for a communication
    note: str = ""  # what a reshape's -1 stood for (rules_reshape.inferred_note)

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
        note = inferred_note(lowered.checked, step.out) if isinstance(step.op, ops.Reshape) else ""
        out.append(StepFacts(step, segment_of[step.out], here, comm, note))
    return Explained(lowered, bindings, world, inputs, tuple(out))
