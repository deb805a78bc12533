"""nvFuser's ops as refir equations: the half of the importer that maps one
statement (refir/frontends/nvfuser.py holds the rest: types, order, text).

`OpMapper` is a mixin of `Importer`: it reads and extends the importer's
tables (axes, refs, dtypes, eqns) and calls back into its type methods."""

from __future__ import annotations

import re

from refir.checks.rules_reshape import groups
from refir.errors import Loc, ParseError
from refir.frontends.nvfuser_axes import Ax, EqualityClasses, kept
from refir.frontends.nvfuser_broadcasts import BroadcastMapper
from refir.frontends.nvfuser_dump import Call, Scalar, Statement, TVRef
from refir.frontends.nvfuser_masks import MaskMapper
from refir.frontends.nvfuser_partial import REDUCE_KINDS, REDUCING_COMMS, PartialMapper
from refir.frontends.nvfuser_window import WINDOW_OPS, WindowMapper
from refir.ir.types import Axis, Mesh, TensorType
from refir.text.parser import parse_extent

CAST = re.compile(r"^_*(half|float|double|bfloat16|bfloat|int64|int32|int|bool)2"
               r"(half|float|double|bfloat16|bfloat|int64|int32|int|bool)$")
CAST_DTYPES = {"half": "f16", "float": "f32", "double": "f64", "bfloat": "bf16", "bfloat16": "bf16",
               "int": "i32", "int32": "i32", "int64": "i64", "bool": "bool"}
BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "maximum", "fmax": "maximum",
          "max": "maximum", "minimum": "minimum", "fmin": "minimum", "min": "minimum"}
UNARY = {"neg": "neg", "abs": "abs", "fabs": "abs", "exp": "exp", "log": "log", "sqrt": "sqrt", "relu": "relu",
         "tanh": "tanh", "erf": "erf", "sigmoid": "sigmoid", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos"}
# printMath writes CUDA's float overloads: sqrtf, expf, fabsf
UNARY.update({f + "f": v for f, v in list(UNARY.items()) if f not in ("neg", "relu", "sigmoid")})
# Comparisons (printed as calls or infix, nvfuser_parse.INFIX), to bool; where; iota/arange.
COMPARISONS = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
REDUCE_OPS = REDUCE_KINDS
COMM_NAMES = {"Allgather": "allgather", "Gather": "gather", "Scatter": "scatter", "Broadcast": "broadcast",
              "SendRecv": "send_recv", "AllToAll": "all_to_all", "Allreduce": "allreduce", "Reduce": "reduce",
              "ReduceScatter": "reduce_scatter"}
LOST = {"+": "add", "-": "sub", "*": "mul", "/": "div"}  # an infix operator a paste lost, as --lost names it
MOVING_COMMS = ("Allgather", "Gather", "Scatter", "Broadcast", "SendRecv", "AllToAll")


class OpMapper(BroadcastMapper, WindowMapper, MaskMapper, PartialMapper):
    """Maps one statement after another onto equations (see the module doc)."""

    file: str
    bullet: str
    lost: str | None
    notes: list[str]
    dtypes: EqualityClasses
    refs: dict[str, TVRef]
    axes: dict[str, list[Ax]]
    layouts: dict[str, tuple[int, ...]]
    eqns: list[tuple[str, str, list[str]]]
    local_types: dict[str, tuple[list[Ax], tuple]]
    comm_kinds: dict[str, str]

    def same_extent(self, a: Ax, b: Ax, loc: Loc, where: str) -> None:
        raise NotImplementedError  # Importer's

    def _resolve_args(self, s: Statement) -> tuple[TVRef | Scalar, ...]:
        raise NotImplementedError  # Importer's

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

    def _one(self, tensors: list[TVRef], call: Call) -> TVRef:
        if len(tensors) != 1:
            raise ParseError(call.loc, f"{call.op} takes one TensorView operand here, not {len(tensors)}")
        return tensors[0]

    def _arg(self, a: TVRef | Scalar, call: Call) -> str:
        if isinstance(a, Scalar):
            return repr(a.value)
        return a.name

    def _unify(self, xs: list[Ax], ys: list[Ax], loc: Loc, where: str) -> None:
        if len(xs) != len(ys):
            raise ParseError(loc, f"{where}: {len(xs)} axes against {len(ys)}")
        for a, b in zip(xs, ys):
            self.same_extent(a, b, loc, where)

    def set_like(self, out: str, src: TVRef, loc: Loc) -> None:
        self._unify(kept(self.axes[out]), kept(self.axes[src.name]), loc, f"{out} = set({src.name})")
        self.dtypes.join(src.name, out, loc, f"the dtype of {out}")

    def emit_local(self, out: str, call: str, comment: list[str], axes: list[Ax], mesh: tuple,
                   want_axes: list[Ax], layout: tuple[int, ...] | None = None) -> None:
        """`out = call` where the op gives `axes` on `mesh`; when the TensorView is
        printed with another placement, the op writes a helper and a set reshards."""
        shards = [a.shard for a in axes]
        if mesh == self.refs[out].mesh and shards == [a.shard for a in want_axes]:
            if layout is not None:
                self.layouts[out] = layout
            self.eqns.append((out, call, comment))
            return
        helper = f"{out}_local"
        self.local_types[helper] = (axes, mesh)
        self.dtypes.join(helper, out, Loc(self.file, 0, 0), "")
        self.eqns.append((helper, call, comment))
        self.eqns.append((out, f"set({helper})", [f"{out} is printed with another placement: a resharding"]))

    def binary(self, out: str, name: str, args: tuple, call: Call, comment: list[str]) -> None:
        tensors = [a for a in args if isinstance(a, TVRef)]
        if not tensors:
            raise ParseError(call.loc, f"{name} of two numbers is not a TensorView")
        want = kept(self.axes[out])
        shards: list[str | None] = [None] * len(want)
        for t in tensors:
            axes = kept(self.axes[t.name])
            self._unify(want, axes, call.loc, f"{out} = {name}(...)")
            self.dtypes.join(t.name, out, call.loc, f"operands of {out}")
            for i, a in enumerate(axes):
                shards[i] = shards[i] or a.shard
        follows = all(a.shard in (None, w.shard) for t in tensors for a, w in zip(kept(self.axes[t.name]), want))
        axes = [Ax(w.extent, w.shard if follows else s, w.broadcast, False, w.number, split=w.split if follows else 1)
                for w, s in zip(want, shards)]
        text = f"{name}({', '.join(self._arg(a, call) for a in args)})"
        self.emit_local(out, text, comment, axes, self.refs[tensors[0].name].mesh, want)

    def unary_like(self, out: str, text: str, x: TVRef, call: Call, comment: list[str]) -> None:
        want = kept(self.axes[out])
        self._unify(want, kept(self.axes[x.name]), call.loc, f"{out} = {call.op}({x.name})")
        self.dtypes.join(x.name, out, call.loc, f"the dtype of {out}")
        self.emit_local(out, text, comment, kept(self.axes[x.name]), self.refs[x.name].mesh, want)

    def cast(self, out: str, op: str, x: TVRef, call: Call, comment: list[str]) -> None:
        m = CAST.match(op)
        src, dst = (CAST_DTYPES[m.group(1)], CAST_DTYPES[m.group(2)]) if m else (None, op.partition(":")[2])
        if src:
            self.dtypes.fix(x.name, src, call.loc, f"{op} reads {x.name}")
        self.dtypes.fix(out, dst, call.loc, f"{op} writes {out}")
        want = kept(self.axes[out])
        self._unify(want, kept(self.axes[x.name]), call.loc, f"{out} = {op}({x.name})")
        self.emit_local(out, f"cast({x.name}, dtype={dst})", comment, kept(self.axes[x.name]),
                        self.refs[x.name].mesh, want)

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

    def matmul(self, out: str, tensors: list[TVRef], call: Call, comment: list[str]) -> None:
        """np.matmul of any ranks >= 1 (refir's matmul: docs/spec.md 5.6)."""
        if len(tensors) != 2:
            raise ParseError(call.loc, "matmul takes two TensorViews")
        a, b = (kept(self.axes[t.name]) for t in tensors)
        if not a or not b:
            raise ParseError(call.loc, f"cannot map matmul of ranks {len(a)} and {len(b)}: refir's matmul "
                             "takes operands of rank at least 1")
        where = f"{out} = matmul(...)"
        self._contract(a, b[-2:-1] if len(b) > 1 else b, a[:-2], b[:-2], call, where)
        batch = self._batch(a[:-2], b[:-2])
        self._unify(kept(self.axes[out]), batch + a[-2:-1] + (b[-1:] if len(b) > 1 else []), call.loc, where)
        for t in tensors:
            self.dtypes.join(t.name, out, call.loc, f"operands of {out}")
        self.eqns.append((out, f"matmul({tensors[0].name}, {tensors[1].name})", comment))

    def _contract(self, a: list[Ax], k: list[Ax], ba: list[Ax], bb: list[Ax], call: Call, where: str) -> None:
        self._unify(a[-1:], k, call.loc, where)
        for x, y in zip(reversed(ba), reversed(bb)):
            if not x.broadcast and not y.broadcast:
                self.same_extent(x, y, call.loc, where)

    def _batch(self, ba: list[Ax], bb: list[Ax]) -> list[Ax]:
        n = max(len(ba), len(bb))
        pa = [None] * (n - len(ba)) + list(ba)
        pb = [None] * (n - len(bb)) + list(bb)
        return [y if x is None or x.broadcast and y is not None else x for x, y in zip(pa, pb)]  # type: ignore[misc]

    def linear(self, out: str, tensors: list[TVRef], call: Call, comment: list[str]) -> None:
        """linear(x[..., K], w[N, K], bias[N]) = x @ w^T + bias: any rank of x (a
        [B, S, E] input in every sequence-parallel layer)."""
        if len(tensors) not in (2, 3) or not kept(self.axes[tensors[0].name]) \
                or len(kept(self.axes[tensors[1].name])) != 2:
            raise ParseError(call.loc, "cannot map linear: refir maps linear(x[..., K], w[N, K] [, bias[N]])")
        x, w = tensors[:2]
        xa, wa = kept(self.axes[x.name]), kept(self.axes[w.name])
        where = f"{out} = linear(...)"
        self._unify(xa[-1:], wa[-1:], call.loc, where)
        self._unify(kept(self.axes[out]), xa[:-1] + wa[:1], call.loc, where)
        for t in tensors:
            self.dtypes.join(t.name, out, call.loc, f"operands of {out}")
        wt = f"{w.name}_t"
        self.local_types[wt] = ([wa[1], wa[0]], self.refs[w.name].mesh)
        self.dtypes.join(wt, out, call.loc, "")
        self.eqns.append((wt, f"permute({w.name}, [1, 0])", comment))
        if len(tensors) == 2:
            self.eqns.append((out, f"matmul({x.name}, {wt})", ["linear = x @ w^T"]))
            return
        bias = tensors[2]
        if out in self.partials:
            raise ParseError(call.loc, f"cannot map linear with a bias writing {out} as a partial value: the bias "
                             "would be added once per device (nvFuser adds it after the reduction)")
        self._unify(kept(self.axes[bias.name]), wa[:1], call.loc, where)
        mm, bb = f"{out}_mm", f"{bias.name}_b"
        lead = len(xa) - 1
        self.local_types[mm] = (kept(self.axes[out]), self.refs[out].mesh)
        self.local_types[bb] = ([Ax(1, None, True, False, 0)] * lead + kept(self.axes[bias.name]),
                                self.refs[bias.name].mesh)
        for n in (mm, bb):
            self.dtypes.join(n, out, call.loc, "")
        self.eqns.append((mm, f"matmul({x.name}, {wt})", ["linear = x @ w^T + bias"]))
        self.eqns.append((bb, f"unsqueeze({bias.name}, dims=[{', '.join(map(str, range(lead)))}])", []))
        self.eqns.append((out, f"add({mm}, {bb})", []))

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
