"""Lowering: the per-device program of local ops and explicit communications,
cut into segments.

Communications are chosen as nvFuser chooses them (docs/spec.md, "Lowering"):

| from -> to (types differ in sharding or mesh)          | communication        |
|--------------------------------------------------------|----------------------|
| replicated -> replicated, other mesh                   | broadcast from the first source device |
| sharded -> replicated, same mesh                       | allgather            |
| sharded -> replicated, other mesh                      | gather               |
| replicated -> sharded, receivers hold the data already | local keep_block     |
| replicated -> sharded, otherwise                       | scatter              |
| sharded -> sharded, same axis, other mesh              | send_recv            |
| sharded -> sharded, other axis, same mesh              | all_to_all           |
| partial (reduced sharded axis) -> replicated           | allreduce, or reduce to another mesh |
| partial -> sharded                                     | reduce_scatter       |
| replicated -> partial (a declared partial, §3.3)       | local partition      |

An avg partial is first divided by the team size (a local div): a sum-partial. A
resharding that changes several mesh axes becomes a chain of these steps; where no
rule applies directly (2-D meshes across meshes), the chain goes through a replicated
copy. On an axis cut over a nest of mesh axes (§3.2) each step adds or drops the nest's
innermost mesh axis; what no step does directly gathers down to the nests' common outer
part, then keeps blocks. Interleaved types (§3.4): refir.lowering.interleaved.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from math import prod

from refir.checks.rules_matmul import matmul_axes, promoted
from refir.checks.verifier import Checked
from refir.ir import ops
from refir.ir.program import Eqn, Func, Lit, Operand, Sym, Var
from refir.ir.types import ExtentExpr, TensorType, as_shard, symbols_of
from refir.lowering import interleaved
from refir.lowering.window import lower_window


@dataclass(frozen=True)
class Step:
    """One lowered operation. Local ops run on every device of `type.mesh`."""

    out: str
    op: object  # ops.LocalOp or ops.Communication
    args: tuple[Operand, ...]
    type: TensorType
    eqn: Eqn = field(compare=False)

    @property
    def is_communication(self) -> bool:
        return ops.is_communication(self.op)

    def tensor_args(self) -> list[str]:
        return [a.name for a in self.args if isinstance(a, Var)]


@dataclass(frozen=True)
class Segment:
    """A single communication, or a maximal run of local steps between them.
    It runs knowing only `inputs`, the symbols in `scalars` (used as values) and
    the global extents in `extents` (symbols its buffers cannot give: shard_c2)."""

    index: int
    kind: str  # "compute" or "communication"
    steps: tuple[Step, ...]
    inputs: tuple[str, ...]
    scalars: tuple[str, ...]
    outputs: tuple[str, ...]
    extents: tuple[str, ...] = ()

    @property
    def symbols(self) -> tuple[str, ...]:
        """Every symbol handed to the segment from outside."""
        return _unique((*self.scalars, *self.extents))


@dataclass(frozen=True)
class Lowered:
    checked: Checked
    types: dict[str, TensorType] = field(hash=False)  # intermediates included
    steps: tuple[Step, ...]
    segments: tuple[Segment, ...]
    # result -> the lowered value it is read from, where they differ: a returned
    # parameter is read from a copy of its own (see _Lowerer.returned).
    returns: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def results(self) -> tuple[str, ...]:
        return self.checked.func.results

    def source(self, result: str) -> str:
        """The lowered value that holds `result`."""
        return self.returns.get(result, result)


class _Lowerer:
    def __init__(self, checked: Checked) -> None:
        self.types = dict(checked.types)
        self.steps: list[Step] = []
        self.uses: Counter[str] = Counter()

    def fresh(self, base: str, t: TensorType) -> str:
        self.uses[base] += 1
        name = f"{base}~{self.uses[base]}"
        self.types[name] = t
        return name

    def emit(self, out: str, op: object, args: tuple[Operand, ...], t: TensorType, e: Eqn) -> None:
        self.steps.append(Step(out, op, args, t, e))

    def eqn(self, e: Eqn) -> None:
        t = self.types[e.out]
        match e.op:
            case ops.Binary() | ops.Unary():
                args = tuple(self.conform(a, t, e) for a in e.args)
                self.emit(e.out, e.op, args, t, e)
            case ops.Reduction(kind=kind, dims=dims):
                x = self.types[e.args[0].name]
                kept = tuple(a for i, a in enumerate(x.axes) if i not in dims)
                partial = tuple(sorted({k for d in dims for k in x.axes[d].dids}))
                local = TensorType(x.dtype, kept, x.mesh, None, partial, kind if partial else "")
                if x.partial:  # a partial's terms reduced on each device (partial_c3: no sharded dims)
                    local = replace(local, partial=x.partial, partial_kind=x.partial_kind)
                self.compute_then_reshard(e, local, t)
            case ops.Matmul():
                a, b = (self.types[x.name] for x in e.args)
                k = promoted(a, b)[0][-1].dids
                if not k:
                    self.emit(e.out, e.op, e.args, t, e)
                    return
                # A sharded contraction leaves partial sums, sharded as the inferred result.
                local = TensorType(t.dtype, matmul_axes(a, b), a.mesh, None, tuple(sorted(k)), "sum")
                self.compute_then_reshard(e, local, t)
            case ops.Iota():  # each device makes its own block, knowing the global extents
                extents = tuple(Lit(1) if a.broadcast else Lit(a.extent) if isinstance(a.extent, int)
                                else Sym(a.extent) for a in t.axes)
                self.emit(e.out, e.op, extents, t, e)
            case ops.Compare() | ops.Where():
                args = tuple(self.conform(a, t, e) for a in e.args)
                self.emit(e.out, e.op, args, t, e)
            case ops.Set():
                src = e.args[0].name
                self.reshard(src, self.types[src], e.out, t, e)
            case ops.Slice() | ops.Select() | ops.Pad() | ops.Cat():
                lower_window(self, e, t)
            case _:
                self.emit(e.out, e.op, e.args, t, e)

    def returned(self, r: str, func: Func) -> str:
        """The value a result is read from. A parameter is the caller's buffer in
        the caller's strides: the result is a copy, the backend's own buffer, dense
        in the declared layout (every backend's Copy makes a fresh one)."""
        if r not in {p.name for p in func.params}:
            return r
        t = self.types[r]
        name = self.fresh(r, t)
        self.emit(name, ops.Copy(), (Var(r),), t, Eqn(r, t, ops.Set(), (Var(r),), func.results_loc))
        return name

    def compute_then_reshard(self, e: Eqn, local: TensorType, t: TensorType) -> None:
        if interleaved.same_placement(local, t):
            self.emit(e.out, e.op, e.args, t, e)
        else:
            name = self.fresh(e.out, local)
            self.emit(name, e.op, e.args, local, e)
            self.reshard(name, local, e.out, t, e)

    def conform(self, a: Operand, t: TensorType, e: Eqn) -> Operand:
        """An elementwise operand replicated where the result is sharded: each
        device slices out its own block first."""
        if not isinstance(a, Var):
            return a
        x = self.types[a.name]
        want = {i: k for i, k in t.placements().items() if not x.axes[i].broadcast}
        if x.placements() == want:
            return a
        name = self.fresh(a.name, replace(x.with_placements(want), layout=None))
        self.emit(name, ops.KeepBlock(), (a,), self.types[name], e)
        return Var(name)

    # ---- resharding ------------------------------------------------------------------

    def reshard(self, src: str, s: TensorType, out: str, d: TensorType, e: Eqn) -> None:
        plan: list[tuple[object, TensorType]] = []
        final = d
        if (s.interleaved() or d.interleaved()) and not interleaved.same_placement(s, d):  # §3.4: lowering.interleaved
            # one all_to_all or reduce_scatter of runs; an avg's terms divided by the team's size first
            summed = replace(s, partial_kind="sum") if s.partial_kind == "avg" and not d.partial else s
            if (step := interleaved.direct(summed, d)) is not None:
                by = [(_Divide(prod(s.mesh.size(k) for k in s.partial)), summed)] if summed is not s else []
                return self.emit_plan(src, out, d, [*by, (step, d)], e)
            if s.mesh == d.mesh and (not s.partial or (s.partial, s.partial_kind) == (d.partial, d.partial_kind)):
                interleaved.gather_to_prefix(s, d, plan)
                return self.emit_plan(src, out, d, plan, e)
            s, d = interleaved.gather_interleaved(s, plan), interleaved.contiguous_part(d)
        cur = self.unpartial(s, d, plan)
        if cur.mesh == d.mesh:
            self.same_mesh(cur, d, plan)
        else:
            self.cross_mesh(cur, d, plan)
        moved = plan[-1][1] if plan else cur
        new = tuple(k for k in d.partial if k not in moved.partial)
        if new:  # replicated -> partial: local, last (the moves above carry whole values)
            plan.append((ops.Partition(d.partial_kind, new),
                         replace(moved, partial=d.partial, partial_kind=d.partial_kind)))
        if final is not d:
            d = interleaved.keep_runs_last(plan, final)
        self.emit_plan(src, out, d, plan, e)

    def emit_plan(self, src: str, out: str, d: TensorType, plan: list, e: Eqn) -> None:
        """The plan's steps, src to out, each intermediate row-major, the last of d's layout."""
        if not plan:
            plan.append((ops.Copy(), d))
        reached = plan[-1][1]
        assert interleaved.same_placement(reached, d), f"lowering {e.out}: the chain reaches {reached}, not {d}"
        name = src
        for i, (op, t) in enumerate(plan):
            last = i == len(plan) - 1
            target = out if last else self.fresh(out, replace(t, layout=None))
            args: tuple[Operand, ...] = (Var(name),)
            if isinstance(op, _Divide):  # avg: each term divided by the team size
                op, args = ops.Binary("div"), (Var(name), Lit(float(op.by)))
            self.emit(target, op, args, d if last else self.types[target], e)
            name = target

    def unpartial(self, cur: TensorType, d: TensorType, plan: list) -> TensorType:
        """Reduce the partial mesh axes of `cur` that `d` does not keep partial: an
        allreduce, a reduce_scatter where d shards on the axis, a reduce onto another
        mesh. An avg first divides each term by the team's size (exact: a power of two),
        which makes it a sum-partial (§3.3); partial_c5 has it reduced over all its axes."""
        keep = d.partial if (d.mesh, d.partial_kind) == (cur.mesh, cur.partial_kind) else ()
        if not [k for k in cur.partial if k not in keep]:
            return cur
        if cur.partial_kind == "avg":  # each term divided by the team's size: the terms of a sum
            cur = replace(cur, partial_kind="sum")
            plan.append((_Divide(prod(cur.mesh.size(k) for k in cur.partial)), cur))
        kind = cur.partial_kind

        def left(axes: tuple[str, ...]) -> dict:
            return {"partial": axes, "partial_kind": kind if axes else ""}

        if cur.mesh != d.mesh:
            if cur.mesh.ndim == 1 and not cur.sharding():
                t = replace(cur, mesh=d.mesh, **left(()))
                plan.append((ops.Reduce(kind), t))
            else:
                t = replace(cur, **left(()))
                plan.append((ops.Allreduce(kind, cur.partial), t))
            cur = t
        else:
            scatter = [(k, j) for k, j in _scatters(cur, d) if k not in keep]
            rest = tuple(k for k in cur.partial if k not in {k for k, _ in scatter} and k not in keep)
            if rest:
                cur = replace(cur, **left(tuple(k for k in cur.partial if k not in rest)))
                plan.append((ops.Allreduce(kind, rest), cur))
            for k, j in scatter:
                cur = replace(cur.with_sharding({**cur.sharding(), j: as_shard((*cur.axes[j].dids, k))}),
                              **left(tuple(p for p in cur.partial if p != k)))
                plan.append((ops.ReduceScatter(kind, k, j), cur))
        return cur

    def same_mesh(self, cur: TensorType, d: TensorType, plan: list) -> TensorType:
        """all_to_all where a mesh axis moves from the inside of one axis's nest to
        the inside of another's, then an allgather per mesh axis to drop (innermost
        first, until each axis's nest begins the wanted one), then a keep_block that
        cuts what is left to cut (spec §6: every step adds or drops the innermost
        mesh axis of a nest, so each works on blocks its team shares)."""
        want = d.nests()
        moving = True
        while moving:  # one pass, or (nests) passes until none moves: one move may let another go
            moving = False
            for k in sorted({k for ks in want.values() for k in ks}):
                have = {ms[-1]: i for i, ms in cur.nests().items()}  # innermost mesh axis -> its tensor axis
                i, j = have.get(k), next(a for a, ms in want.items() if k in ms)
                grown = (*cur.axes[j].dids, k)
                if i is not None and i != j and want[j][:len(grown)] == grown:
                    cur = cur.with_sharding({**cur.sharding(), i: as_shard(cur.axes[i].dids[:-1]),
                                             j: as_shard(grown)})
                    plan.append((ops.AllToAll(k, j, i), cur))
                    moving = any(a.nested for a in (*cur.axes, *d.axes))
        for i in sorted(cur.nests()):
            while (ms := cur.axes[i].dids) and want.get(i, ())[:len(ms)] != ms:
                cur = cur.with_sharding({**cur.sharding(), i: as_shard(ms[:-1])})
                plan.append((ops.Allgather(i, ms[-1]), cur))
        if cur.sharding() != d.sharding():
            cur = cur.with_sharding(d.sharding())
            plan.append((ops.KeepBlock(), cur))
        return cur

    def cross_mesh(self, cur: TensorType, d: TensorType, plan: list) -> TensorType:
        have, want = cur.sharding(), d.sharding()
        moved = replace(cur, mesh=d.mesh)
        if have and not want and cur.mesh.ndim == 1:
            plan.append((ops.Gather(next(iter(have))), moved.with_sharding({})))
            return moved.with_sharding({})
        if have and have == want and cur.mesh.shape == d.mesh.shape and cur.mesh.ndim == 1:
            plan.append((ops.SendRecv(next(iter(have))), moved))
            return moved
        if have and cur.mesh.ndim == 1 and d.mesh.ndim == 1:
            plan.append((ops.Gather(next(iter(have))), moved.with_sharding({})))
            return self.same_mesh(moved.with_sharding({}), d, plan)
        if have:
            cur = self.same_mesh(cur, cur.with_sharding({}), plan)
        # From here on the source is replicated.
        if want and set(d.mesh.devices) <= set(cur.mesh.devices):
            plan.append((ops.KeepBlock(), moved.with_sharding(want)))
            return moved.with_sharding(want)
        if len(want) == 1 and d.mesh.ndim == 1:
            root = next((x for x in cur.mesh.devices if x in d.mesh), cur.mesh.devices[0])
            plan.append((ops.Scatter(next(iter(want)), root), moved.with_sharding(want)))
            return moved.with_sharding(want)
        plan.append((ops.Broadcast(cur.mesh.devices[0]), moved.with_sharding({})))
        return self.same_mesh(moved.with_sharding({}), d, plan)


def _scatters(cur: TensorType, d: TensorType) -> list[tuple[str, int]]:
    """The partial mesh axes a reduce_scatter can cut onto tensor axes on the way
    to d, with their axes: k goes onto axis j where j's nest in d continues with
    k after j's nest in cur (outer mesh axes first, then in the partial's order)."""
    out = []
    for j, ms in d.nests().items():
        have = cur.axes[j].dids
        if ms[:len(have)] != have:
            continue
        for depth, k in enumerate(ms[len(have):]):
            if k not in cur.partial:
                break
            out.append((depth, cur.partial.index(k), k, j))
    return [(k, j) for *_, k, j in sorted(out)]


@dataclass(frozen=True)
class _Divide:
    """In a resharding's plan: an avg's terms divided by the team size (a local div step)."""

    by: int




def lower(checked: Checked) -> Lowered:
    lw = _Lowerer(checked)
    for e in checked.func.eqns:
        lw.eqn(e)
    sources = {r: lw.returned(r, checked.func) for r in checked.func.results}
    steps = tuple(lw.steps)
    segments = cut_segments(steps, lw.types, tuple(sources.values()))
    return Lowered(checked, lw.types, steps, segments, {r: v for r, v in sources.items() if v != r})


def cut_segments(steps: tuple[Step, ...], types: dict[str, TensorType],
                 results: tuple[str, ...]) -> tuple[Segment, ...]:
    groups: list[list[Step]] = []
    for s in steps:
        if s.is_communication or not groups or groups[-1][0].is_communication:
            groups.append([s])
        else:
            groups[-1].append(s)
    # The last group that reads each value: one pass, not a scan of every later group.
    last_read: dict[str, int] = {r: len(groups) for r in results}
    for index, group in enumerate(groups):
        for s in group:
            for a in s.tensor_args():
                last_read[a] = max(last_read.get(a, -1), index)
    segments = []
    for index, group in enumerate(groups):
        made = {s.out for s in group}
        inputs = _unique(a for s in group for a in s.tensor_args() if a not in made)
        scalars = _unique(
            a.name for s in group for a in s.args
            if isinstance(a, Sym) and not any(a.name in types[x].symbols() for x in s.tensor_args())
        )
        kind = "communication" if group[0].is_communication else "compute"
        outputs = tuple(s.out for s in group if last_read.get(s.out, -1) > index)
        segments.append(Segment(index, kind, tuple(group), inputs, scalars, outputs, carried_extents(group, types)))
    return tuple(segments)


def carried_extents(group: list[Step], types: dict[str, TensorType]) -> tuple[str, ...]:
    """The global extents a segment must be handed (shard_c2): a local block's
    extent on a sharded axis does not tell the global one (blocks are uneven), and
    a receiver of a communication holds no buffer at all. So: every symbol of a
    communication's source type, and every symbol on a sharded axis of a type a
    compute segment reads or writes, and every symbol of an extent expression
    (`E/4`: a buffer's extent binds no symbol of it). Plain symbols on unsharded
    axes re-bind from the buffers."""
    if group[0].is_communication:
        (src,) = group[0].tensor_args()
        return tuple(sorted(types[src].symbols() | group[0].type.symbols()))
    touched = [types[a] for s in group for a in s.tensor_args()] + [s.type for s in group]
    return tuple(sorted({s for t in touched for a in t.axes if a.shard or isinstance(a.extent, ExtentExpr)
                         for s in symbols_of(a.extent)}))


def _unique(xs: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(xs))
