"""Where every value lies and what every communication moves: the facts that
`explain`, `trace` and the `--json` outputs show.

Block ranges come from refir.ir.types.block_slices alone, so a change in how an
axis is cut (uneven blocks, empty blocks) shows up here unchanged. Nothing here
runs a program: the facts follow from the types, the bindings and the teams.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from math import prod

import numpy as np

from refir.checks.rules_reshape import inferred_note
from refir.explain.step_rules import RULES, changes, nest_rule
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
                moved = _moved(self.op, sent, got)
                whole = sent if moved is sent.ranges else got if moved is got.ranges else None
                yield Transfer(s, r, moved, block_bytes(whole, self.src.type) if whole is not None
                               else nbytes(moved, self.src.type))

    @cached_property
    def moves(self) -> int:
        """How many moves `transfers` enumerates (pairs, empty pieces included)."""
        return sum(_pair_count(self.op, team) for team in self.teams)

    @cached_property
    def _totals(self) -> dict[int, list[int]]:
        totals: dict[int, list[int]] = {}
        for team in self.teams:
            _team_totals(self.op, team, self.src, self.dst, totals)
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


def _pair_count(op: ops.Communication, team: Team) -> int:
    if isinstance(op, (ops.Scatter, ops.Broadcast)):
        return sum(r != op.root for r in team.receivers)
    both = len(set(team.senders) & set(team.receivers))
    return len(team.senders) * len(team.receivers) - both


def _team_totals(op: ops.Communication, team: Team, src: Placement, dst: Placement,
                 totals: dict[int, list[int]]) -> None:
    """Add each member's bytes sent and received in `team` to `totals`, in time
    linear in the team where a sender's whole block (or the receiver's) moves, and
    by one vectorised pass over the pairs where pieces are intersections."""
    item = src.type.np_dtype.itemsize

    def add(d: int, sent: int, received: int) -> None:
        entry = totals.setdefault(d, [0, 0])
        entry[0] += sent
        entry[1] += received

    for d in team.devices:
        add(d, 0, 0)
    match op:
        case ops.Scatter(root=root):
            for r in team.receivers:
                if r != root:
                    n = block_bytes(dst.block(r), src.type)
                    add(root, n, 0)
                    add(r, 0, n)
        case ops.Broadcast(root=root):
            n = block_bytes(src.block(root), src.type)
            for r in team.receivers:
                if r != root:
                    add(root, n, 0)
                    add(r, 0, n)
        case ops.AllToAll() | ops.ReduceScatter():
            rank = src.type.rank
            s_ranges = np.array([src.block(s).ranges for s in team.senders], dtype=np.int64).reshape(
                len(team.senders), rank, 2)
            r_ranges = np.array([dst.block(r).ranges for r in team.receivers], dtype=np.int64).reshape(
                len(team.receivers), rank, 2)
            if _separable_totals(team, s_ranges, r_ranges, item, add):
                return
            s_ids, r_ids = np.array(team.senders), np.array(team.receivers)
            chunk = max(1, (1 << 22) // max(1, len(team.receivers) * max(1, s_ranges.shape[1])))
            received = np.zeros(len(team.receivers), dtype=np.int64)
            for lo in range(0, len(team.senders), chunk):
                s = s_ranges[lo:lo + chunk, None]  # senders x 1 x axes x 2
                r = r_ranges[None]
                overlap = np.minimum(s[..., 1], r[..., 1]) - np.maximum(s[..., 0], r[..., 0])
                pieces = np.clip(overlap, 0, None).prod(axis=-1) * item
                pieces[s_ids[lo:lo + chunk, None] == r_ids[None, :]] = 0  # a device keeps its own piece
                for d, n in zip(team.senders[lo:lo + chunk], pieces.sum(axis=1).tolist()):
                    add(d, n, 0)
                received += pieces.sum(axis=0)
            for d, n in zip(team.receivers, received.tolist()):
                add(d, 0, n)
        case _:  # each sender's whole block (a partial term where the source is partial) to every other receiver
            blocks = {s: block_bytes(src.block(s), src.type) for s in team.senders}
            receivers = set(team.receivers)
            for s, n in blocks.items():
                add(s, n * (len(team.receivers) - (s in receivers)), 0)
            everything = sum(blocks.values())
            for r in team.receivers:
                add(r, 0, everything - blocks.get(r, 0))


def _overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elements in common of ranges `a` and `b` (... x 2 arrays of start, stop)."""
    return np.clip(np.minimum(a[..., 1], b[..., 1]) - np.maximum(a[..., 0], b[..., 0]), 0, None)


def _separable_totals(team: Team, s_ranges: np.ndarray, r_ranges: np.ndarray, item: int,
                      add: Callable[[int, int, int], None]) -> bool:
    """The pieces of an all_to_all or reduce_scatter in time linear in the team,
    where no tensor axis has ranges that vary among both the senders and the
    receivers (as in a team along one mesh axis): then a piece is F[s] * G[r],
    F the overlap on the axes the senders vary on (and the fixed ones), G on the
    axes the receivers vary on, and a device's bytes are sums of F and G less its
    own piece. False (nothing added) where both vary on an axis."""
    s_var = (s_ranges != s_ranges[:1]).any(axis=(0, 2))
    r_var = (r_ranges != r_ranges[:1]).any(axis=(0, 2))
    if (s_var & r_var).any():
        return False
    f = _overlap(s_ranges[:, ~r_var], r_ranges[0, ~r_var]).prod(axis=-1)  # per sender
    g = _overlap(s_ranges[0, r_var], r_ranges[:, r_var]).prod(axis=-1)  # per receiver
    f_of, g_of = dict(zip(team.senders, f.tolist())), dict(zip(team.receivers, g.tolist()))
    g_all, f_all = int(g.sum()), int(f.sum())
    for d, fs in f_of.items():  # a device keeps its own piece
        add(d, item * fs * (g_all - g_of.get(d, 0)), 0)
    for d, gr in g_of.items():
        add(d, 0, item * gr * (f_all - f_of.get(d, 0)))
    return True


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


def block_bytes(b: Block, t: TensorType) -> int:
    """A whole block's bytes (an interleaved block's runs, not their hull)."""
    return prod(b.local_shape) * t.np_dtype.itemsize


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


def comm_facts(op: ops.Communication, src: Placement, dst: Placement) -> CommFacts:
    ts = tuple(teams(op, src.type, dst.type))
    rule = RULES[type(op)] + nest_rule(op, src.type, dst.type)
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
