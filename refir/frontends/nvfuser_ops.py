"""nvFuser's ops as refir equations: the half of the importer that maps one
statement (refir/frontends/nvfuser.py holds the rest: types, order, text).

`OpMapper` joins the mappers of each family of ops (refir/frontends/nvfuser_mapping.py
lists them) and maps what is left: reductions, permutes, reshapes and
communications. It reads and extends the importer's tables (axes, refs, dtypes,
eqns) and calls back into its type methods."""

from __future__ import annotations

from refir.checks.rules_reshape import groups
from refir.errors import ParseError
from refir.frontends.nvfuser_axes import Ax, kept
from refir.frontends.nvfuser_broadcasts import BroadcastMapper
from refir.frontends.nvfuser_dump import Call, Statement, TVRef
from refir.frontends.nvfuser_elementwise import BINARY, CAST, UNARY, ElementwiseMapper
from refir.frontends.nvfuser_masks import MaskMapper
from refir.frontends.nvfuser_matmul import MatmulMapper
from refir.frontends.nvfuser_partial import REDUCE_KINDS, REDUCING_COMMS, PartialMapper
from refir.frontends.nvfuser_window import WINDOW_OPS, WindowMapper
from refir.ir.program import Program
from refir.ir.types import Axis, Mesh, TensorType
from refir.text.parser import parse_extent

# Comparisons (printed as calls or infix, nvfuser_parse.INFIX), to bool; where; iota/arange.
COMPARISONS = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
REDUCE_OPS = REDUCE_KINDS
COMM_NAMES = {"Allgather": "allgather", "Gather": "gather", "Scatter": "scatter", "Broadcast": "broadcast",
              "SendRecv": "send_recv", "AllToAll": "all_to_all", "Allreduce": "allreduce", "Reduce": "reduce",
              "ReduceScatter": "reduce_scatter"}
LOST = {"+": "add", "-": "sub", "*": "mul", "/": "div"}  # an infix operator a paste lost, as --lost names it
MOVING_COMMS = ("Allgather", "Gather", "Scatter", "Broadcast", "SendRecv", "AllToAll")


class OpMapper(ElementwiseMapper, MatmulMapper, BroadcastMapper, WindowMapper, MaskMapper, PartialMapper):
    """Maps one statement after another onto equations (see the module doc)."""

    def statement(self, s: Statement) -> None:
        out = s.out.name
        comment = [f"line {s.out.loc.line}: {short(s.text)}"]
        if isinstance(s.expr, TVRef):
            self.set_like(out, s.expr, s.out.loc)
            self.eqns.append((out, f"set({s.expr.name})", comment))
            return
        call = s.expr
        args = self._resolve_args(s)
        tensors = [a for a in args if isinstance(a, TVRef)]
        op = call.op
        if op == "lost":
            if self.lost is None:
                raise ParseError(call.loc, f"{tensors[1].name} follows {tensors[0].name} with no operator between "
                                 "them (an infix operator lost from the paste? a C++ comment's or markdown's leading "
                                 "'*' is often stripped: --lost '*', or lost='*', reads it as a product)")
            self.notes.append(f"{call.loc}: no operator between {tensors[0].name} and {tensors[1].name} "
                              f"(lost from the paste); read as {self.lost!r}, as --lost says")
            op = LOST[self.lost]
        self.check_partial_use(out, op, tensors, call.loc)
        if op == "bullet":
            self.notes.append(f"{call.loc}: a markdown bullet stands where an infix operator was "
                              f"(a leading +, - or * becomes a bullet); read as {self.bullet!r}")
            op = {"+": "add", "-": "sub", "*": "mul"}[self.bullet]
        if op in BINARY:
            self.binary(out, BINARY[op], args, call, comment)
        elif op in COMPARISONS:
            self.compare(out, COMPARISONS[op], args, call, comment)
        elif op == "where":
            self.where(out, args, call, comment)
        elif op in ("iota", "arange"):
            self.iota(out, args, call, comment)
        elif op in ("reciprocal", "reciprocalf"):  # nvFuser's 1/x, in x's dtype: refir's div of a literal one
            self.unary_like(out, f"div(1.0, {self._one(tensors, call).name})", self._one(tensors, call), call, comment)
        elif op in UNARY:
            self.unary_like(out, f"{UNARY[op]}({self._arg(args[0], call)})", self._one(tensors, call), call, comment)
        elif CAST.match(op) or op.startswith("cast:"):
            self.cast(out, op, self._one(tensors, call), call, comment)
        elif op in ("reduction", "reduce", "sum"):
            kind = call.keywords.get("op", "add")
            if "op" not in call.keywords and op != "sum":
                self.notes.append(f"{call.loc}: {op}(...) names no op; read as a sum")
            if kind not in REDUCE_OPS:
                raise ParseError(call.loc, f"cannot map reduction op {kind!r} (refir: add, mul, max, min)")
            self.reduction(out, REDUCE_OPS[kind], self._one(tensors, call), call, comment)
        elif op in ("Set", "set", "LoadStoreOp", "ShardByStream"):
            self.set_like(out, self._one(tensors, call), call.loc)
            self.eqns.append((out, f"set({tensors[0].name})", comment))
        elif op == "Set.Permute":
            self.permute(out, self._one(tensors, call), call, comment)
        elif op == "broadcast":
            self.broadcast(out, self._one(tensors, call), call, comment)
        elif op == "expand":
            self.expand(out, self._one(tensors, call), call, comment)
        elif op == "squeeze":
            self.squeeze(out, self._one(tensors, call), call, comment)
        elif op in ("view", "reshape", "ViewOp", "ReshapeOp"):
            self.reshape(out, self._one(tensors, call), call, comment)
        elif op == "matmul":
            self.matmul(out, tensors, call, comment)
        elif op == "linear":
            self.linear(out, tensors, call, comment)
        elif op in WINDOW_OPS:
            self.window(out, op, args, call, comment)
        elif op.startswith("communication:"):
            self.communication(out, op.partition(":")[2], self._one(tensors, call), call, comment)
        else:
            raise ParseError(call.loc, f"cannot map the nvFuser op {op!r} onto refir "
                             "(docs/frontends/nvfuser.md lists what maps)")

    def reduction(self, out: str, kind: str, x: TVRef, call: Call, comment: list[str]) -> None:
        axes = self.axes[out]
        src = kept(self.axes[x.name])
        if x.name in self.partials and len(axes) > len(src):
            self.reduce_terms(out, kind, x, call, comment)
            return
        if len(axes) != len(src):
            raise ParseError(call.loc, f"{out} has {len(axes)} axes (reduced ones included), "
                             f"{x.name} has {len(src)}")
        self._unify(axes, src, call.loc, f"{out} = {kind}({x.name})")
        self.dtypes.join(x.name, out, call.loc, f"the dtype of {out}")
        dims = [i for i, a in enumerate(axes) if a.reduced]
        if x.name in self.partials and out not in self.partials:
            raise ParseError(call.loc, f"{out} = {kind}({x.name}) reduces axes {dims} of the partial value {x.name} "
                             "and leaves its device terms pending, but prints no iterating device domain of them")
        self.eqns.append((out, f"{kind}({x.name}, dims=[{', '.join(map(str, dims))}])", comment))

    def permute(self, out: str, x: TVRef, call: Call, comment: list[str]) -> None:
        """The permutation is read from nvFuser's IterDomain numbers: a result's
        domains are made in its producer's axis order, then reordered."""
        want = kept(self.axes[out])
        src = kept(self.axes[x.name])
        if len(want) != len(src):
            raise ParseError(call.loc, f"Set.Permute: {out} has {len(want)} axes, {x.name} has {len(src)}")
        numbers = [a.number for a in want]
        perm = [sorted(numbers).index(n) for n in numbers]
        self._unify(want, [src[p] for p in perm], call.loc, f"{out} = Set.Permute({x.name}) as permute {perm}")
        self.dtypes.join(x.name, out, call.loc, f"the dtype of {out}")
        # nvFuser without an allocation domain lets Set.Permute keep its producer's
        # memory order: the result is laid out in the operand's order.
        inverse = [perm.index(a) for a in range(len(perm))]
        producer = self.layouts.get(x.name, tuple(range(len(src))))
        layout = tuple(inverse[a] for a in producer)
        self.emit_local(out, f"permute({x.name}, [{', '.join(map(str, perm))}])", comment,
                        [src[p] for p in perm], self.refs[x.name].mesh, want,
                        layout if layout != tuple(range(len(src))) else None)

    def reshape(self, out: str, x: TVRef, call: Call, comment: list[str]) -> None:
        """nvFuser's view (ReshapeOp): refir's reshape to the printed result's extents,
        the sharding as refir infers it (docs/spec.md §5.10); printed otherwise, a set
        after it reshards."""
        src, want = kept(self.axes[x.name]), kept(self.axes[out])
        if any(a.broadcast for a in want):
            raise ParseError(call.loc, f"view into broadcast axes ({out}): refir's reshape gives none; "
                             "write the view, then a broadcast")
        self.dtypes.join(x.name, out, call.loc, f"the dtype of {out}")
        shape = [self.extent(a) for a in want]
        got = [Ax(a.extent, s, False, False, a.number) for a, s in zip(want, reshape_sharding(
            [self.extent(a) for a in src], [a.shard for a in src], shape))]
        self.emit_local(out, f"reshape({x.name}, [{', '.join(shape)}])", comment, got, self.refs[x.name].mesh, want)

    def communication(self, out: str, kind: str, x: TVRef, call: Call, comment: list[str]) -> None:
        self.comm_kinds[out] = kind
        if kind in MOVING_COMMS:
            self.set_like(out, x, call.loc)
            self.eqns.append((out, f"set({x.name})", comment + [f"nvFuser lowered this to {kind}"]))
            return
        if kind not in REDUCING_COMMS:
            raise ParseError(call.loc, f"cannot map Communication type {kind!r}")
        op = next((v for k, v in call.keywords.items() if k in ("red_op", "redop", "reduction_op", "op")), "add")
        op = op.split("::")[-1].lower()
        if op not in REDUCE_OPS:
            raise ParseError(call.loc, f"cannot map reduction op {op!r} of a {kind}")
        if x.name in self.partials:  # its terms (nvfuser_partial): the reduction is a set
            self.set_like(out, x, call.loc)
            self.eqns.append((out, f"set({x.name})", comment + [f"nvFuser lowered this to {kind}"]))
            return
        if not any(a.reduced for a in self.axes[out]):
            raise ParseError(call.loc, f"the output {out} of this {kind} shows no reduced (r) domain")
        self.reduction(out, REDUCE_OPS[op], x, call, comment + [f"nvFuser lowered this to {kind}"])


def communication_notes(eqns: list[tuple[str, str, list[str]]], comm_kinds: dict[str, str],
                    program: Program) -> list[str]:
    """Where the dump names the communication nvFuser chose, say if refir's
    lowering chooses another."""
    from refir.checks.verifier import verify
    from refir.ir.ops import op_name
    from refir.lowering.lower import lower

    mapped = ("set(", "sum(", "prod(", "max(", "min(", "matmul(")
    chosen = {out: kind for out, call, _ in eqns if call.startswith(mapped)
              for kind in [comm_kinds.get(out)] if kind}
    if not chosen:
        return []
    lowered = lower(verify(program))
    notes = []
    for out, kind in chosen.items():
        ours = [op_name(s.op) for s in lowered.steps if s.eqn.out == out and s.is_communication]
        want = COMM_NAMES[kind]
        if want not in ours:
            notes.append(f"nvFuser lowered {out} to {kind}; refir lowers it to "
                         f"{', '.join(ours) or 'no communication'}")
    return notes


def reshape_sharding(src: list[str], shards: list[str | None], shape: list[str]) -> list[str | None]:
    """Each result axis's mesh axis, as refir's rule gives it: the outer axis of a
    group whose outer operand axis is sharded (refir.checks.rules_reshape.groups);
    a sharded axis inside a group is the verifier's to refuse (reshape_c3)."""
    extents = [parse_extent(e) for e in src]  # `4`, `i0`, `i1/4` (refir.ir.extents)
    t = TensorType("f32", tuple(Axis(e, k) for e, k in zip(extents, shards)), Mesh("m", (1,), (0,)))
    out: list[str | None] = [None] * len(shape)
    for g in groups(t, tuple(parse_extent(e) for e in shape)):
        if g.src and g.dst and shards[g.src[0]]:
            out[g.dst[0]] = shards[g.src[0]]
    return out


def short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."
