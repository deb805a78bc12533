"""nvFuser fusion IR -> refir: `refir.from_nvfuser(text)`, `python -m refir import-nvfuser`.

The statements read by refir/frontends/nvfuser_parse.py become one refir
function: every TensorView keeps its name (`T4_g` becomes `T4`), every equation
is preceded by the statement it came from, as a comment. Segments join where a
later one reads an earlier one's output, or where the user links an input to an
output (`--link T5=T4`: `T5 = set(T4)`). Whatever cannot be mapped is a
ParseError at its token; every guess the importer makes about a damaged paste
is written into the program's header as a note (docs/frontends/nvfuser.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from refir.errors import Loc, ParseError
from refir.frontends.nvfuser_parse import Call, Domain, Scalar, Statement, TVRef, parse_dump
from refir.parser import parse
from refir.program import Program
from refir.types import RESERVED

_CAST = re.compile(r"^_*(half|float|double|bfloat16|bfloat|int64|int32|int|bool)2"
                   r"(half|float|double|bfloat16|bfloat|int64|int32|int|bool)$")
_CAST_DTYPES = {"half": "f16", "float": "f32", "double": "f64", "bfloat": "bf16", "bfloat16": "bf16",
                "int": "i32", "int32": "i32", "int64": "i64", "bool": "bool"}
BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "maximum", "fmax": "maximum",
          "max": "maximum", "minimum": "minimum", "fmin": "minimum", "min": "minimum"}
UNARY = {"neg": "neg", "abs": "abs", "fabs": "abs", "exp": "exp", "log": "log", "sqrt": "sqrt", "relu": "relu"}
REDUCE_OPS = {"add": "sum", "sum": "sum", "mul": "prod", "max": "max", "fmax": "max", "min": "min", "fmin": "min"}
_COMM_NAMES = {"Allgather": "allgather", "Gather": "gather", "Scatter": "scatter", "Broadcast": "broadcast",
               "SendRecv": "send_recv", "AllToAll": "all_to_all", "Allreduce": "allreduce", "Reduce": "reduce",
               "ReduceScatter": "reduce_scatter"}
REDUCING_COMMS = ("Allreduce", "Reduce", "ReduceScatter")
MOVING_COMMS = ("Allgather", "Gather", "Scatter", "Broadcast", "SendRecv", "AllToAll")


@dataclass
class Ax:
    """A logical axis of an imported TensorView (reduced ones included)."""

    extent: int | str
    shard: str | None
    broadcast: bool
    reduced: bool
    number: int  # nvFuser's IterDomain number, for permutation order


@dataclass
class Imported:
    """The program, its text, and every assumption the importer made."""

    program: Program
    text: str
    notes: list[str] = field(default_factory=list)


class _Union:
    """Union-find over names (symbols or dtypes), with a fixed value per class."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.value: dict[str, str | int] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def fix(self, x: str, value: str | int, loc: Loc, what: str) -> None:
        r = self.find(x)
        if r in self.value and self.value[r] != value:
            raise ParseError(loc, f"{what}: {self.value[r]} and {value} cannot both hold")
        self.value[r] = value

    def join(self, a: str, b: str, loc: Loc, what: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if ra in self.value and rb in self.value and self.value[ra] != self.value[rb]:
            raise ParseError(loc, f"{what}: {self.value[ra]} and {self.value[rb]} cannot both hold")
        self.parent[rb] = ra
        if rb in self.value:
            self.value[ra] = self.value.pop(rb)


def logical_axes(ref: TVRef, splits: dict[int, object] | None = None) -> list[Ax]:
    """The printed domains as logical axes: a device axis of extent n followed by
    `ceilDiv(E, n)` is an outer split of E, i.e. E sharded on that device axis;
    so is a device axis followed by a domain that an `Outer split:` line made."""
    out: list[Ax] = []
    doms = list(ref.domains)
    i = 0
    while i < len(doms):
        d = doms[i]
        nxt = doms[i + 1] if i + 1 < len(doms) else None
        if d.kind not in "irb" or (d.ptype not in ("S", "US") and not d.device):
            raise ParseError(d.loc, f"cannot map IterDomain {d.text!r}: refir knows serial (S), "
                             "device (deviceIdx.x/y/z), reduction and broadcast domains, not parallel type "
                             f"{d.ptype!r}")
        if isinstance(d.extent, tuple):
            if nxt is not None and nxt.device and d.extent[2] == nxt.extent:
                raise ParseError(nxt.loc, f"cannot map {nxt.text!r}: an inner split puts the device axis "
                                 "inside the logical axis (blocks interleaved); refir shards contiguous blocks")
            raise ParseError(d.loc, f"cannot map {d.text!r}: ceilDiv extent without the device axis before it")
        split = (splits or {}).get(nxt.number) if nxt is not None else None
        if d.device and nxt is not None and split is not None:
            nxt = Domain(nxt.text, nxt.kind, nxt.ptype, nxt.number, ("ceilDiv", split, d.extent), nxt.rf, nxt.loc)
        if d.device and nxt is not None and isinstance(nxt.extent, tuple) and nxt.extent[2] == d.extent:
            whole = nxt.extent[1]
            if isinstance(whole, tuple):
                raise ParseError(nxt.loc, f"cannot map {nxt.text!r}: nested splits")
            out.append(Ax(whole, d.device, False, d.kind == "r", nxt.number))
            i += 2
            continue
        if d.kind == "b" and d.extent != 1:
            raise ParseError(d.loc, f"cannot map {d.text!r}: a broadcast domain of extent {d.extent}")
        out.append(Ax(d.extent, d.device, d.kind == "b", d.kind == "r", d.number))
        i += 1
    return out


def _kept(axes: list[Ax]) -> list[Ax]:
    return [a for a in axes if not a.reduced]


class Importer:
    def __init__(self, text: str, file: str, links: dict[str, str], bullet: str = "+") -> None:
        self.dump = parse_dump(text, file)
        self.file = file
        self.links = links
        self.bullet = bullet
        self.notes: list[str] = []
        self.syms = _Union()
        self.dtypes = _Union()
        self.refs: dict[str, TVRef] = {}  # name -> the printing that fixes its type
        self.axes: dict[str, list[Ax]] = {}
        self.layouts: dict[str, tuple[int, ...]] = {}
        self.eqns: list[tuple[str, str, list[str]]] = []  # (out, call text, comments)
        self.local_types: dict[str, tuple[list[Ax], tuple]] = {}  # helper values: axes, mesh
        self.comm_kinds: dict[str, str] = {}  # out -> the communication nvFuser printed for it

    # ---- TensorViews and their types ----------------------------------------------------

    def learn(self, ref: TVRef) -> None:
        """Record a printing of a TensorView: its first full printing fixes the
        axes; every other must agree, extent for extent."""
        axes = logical_axes(ref, self.dump.splits)
        if ref.name not in self.refs:
            self.refs[ref.name] = ref
            self.axes[ref.name] = axes
        else:
            known = self.axes[ref.name]
            if len(_kept(known)) != len(_kept(axes)):
                raise ParseError(ref.loc, f"{ref.name} is printed with {len(_kept(axes))} axes here and "
                                 f"{len(_kept(known))} elsewhere")
            for a, b in zip(_kept(known), _kept(axes)):
                self.same_extent(a, b, ref.loc, ref.name)
            old = self.refs[ref.name]
            if old.mesh is None and ref.mesh is not None or old.dtype is None and ref.dtype is not None:
                self.refs[ref.name] = TVRef(old.name, old.spelling, old.domains, old.mesh or ref.mesh,
                                            old.dtype or ref.dtype, old.loc)
        if ref.dtype:
            self.dtypes.fix(ref.name, ref.dtype, ref.loc, f"the dtype of {ref.name}")

    def same_extent(self, a: Ax, b: Ax, loc: Loc, where: str) -> None:
        if a.broadcast or b.broadcast:
            return
        what = f"extents in {where}"
        ka, kb = (f"#{x.extent}" if isinstance(x.extent, int) else x.extent for x in (a, b))
        for k, x in ((ka, a), (kb, b)):
            self.syms.find(k)
            if isinstance(x.extent, int):
                self.syms.fix(k, x.extent, loc, what)
        self.syms.join(ka, kb, loc, what)

    def extent(self, a: Ax) -> str:
        if isinstance(a.extent, int):
            return str(a.extent)
        r = self.syms.find(a.extent)
        if r in self.syms.value:
            return str(self.syms.value[r])
        members = sorted((k for k in self.syms.parent if self.syms.find(k) == r and not k.startswith("#")),
                         key=lambda s: (int(s[1:]) if re.fullmatch(r"i\d+", s) else 1 << 30, s))
        name = members[0]
        return name + "_" if name in RESERVED else name

    def mesh_of(self, name: str) -> tuple:
        ref = self.refs[name]
        if ref.mesh is None:
            raise ParseError(ref.loc, f"{name} is printed without a DeviceMesh and none can be inferred")
        return ref.mesh

    # ---- statements -------------------------------------------------------------------

    def run(self) -> Imported:
        d = self.dump
        if not d.statements and not d.inputs:
            raise ParseError(Loc(self.file, 1, 1), "no nvFuser fusion IR found (no `Tn_g[...] = ...` statement)")
        # A definition's printing shows its reduced domains: it fixes the axes.
        for ref in [s.out for s in d.statements] + d.mentions + d.inputs + d.outputs:
            if ref.name:
                self.learn(ref)
        self.infer_meshes()
        defined = {s.out.name: s for s in d.statements}
        for dst, src in self.links.items():
            for n in (dst, src):
                if n not in self.refs:
                    raise ParseError(Loc(self.file, 0, 0), f"--link {dst}={src}: the dump has no TensorView {n}")
            if dst in defined:
                raise ParseError(defined[dst].out.loc, f"--link {dst}={src}: {dst} is already defined here")
        reads: list[str] = []
        for s in d.statements:
            for a in self.operands(s):
                if isinstance(a, TVRef):
                    reads.append(a.name)
        reads += list(self.links.values())
        params = [r.name for r in d.inputs if r.name not in defined and r.name not in self.links]
        params += [n for n in reads if n not in defined and n not in self.links]
        params = list(dict.fromkeys(params))
        results = self.results(defined, set(reads))
        done: set[str] = set(params)
        for s in d.statements:
            self.statement(s)
        for dst, src in self.links.items():
            self.set_like(dst, self.refs[src], self.refs[dst].loc)
            self.eqns.insert(self._after(src), (dst, f"set({src})", [f"--link {dst}={src}: "
                                                                     f"{self.refs[dst].spelling}"]))
        order = self.topological(done)
        return self.emit(params, order, results)

    def operands(self, s: Statement) -> list[TVRef | Scalar]:
        if isinstance(s.expr, TVRef):
            return [s.expr]
        return list(self._resolve_args(s))

    def _resolve_args(self, s: Statement) -> tuple[TVRef | Scalar, ...]:
        assert isinstance(s.expr, Call)
        return tuple(self.nameless(a, s) if isinstance(a, TVRef) and not a.name else a for a in s.expr.args)

    def nameless(self, a: TVRef, s: Statement) -> TVRef:
        """An operand pasted without its name is the one known TensorView whose
        logical extents the result carries (nvFuser prints a result's domains with
        its producer's extents)."""
        want = [x.extent for x in logical_axes(s.out, self.dump.splits)]
        hits = [n for n, axes in self.axes.items()
                if n != s.out.name and [x.extent for x in _kept(axes)] == want]
        if len(hits) != 1:
            raise ParseError(a.loc, f"cannot map the operand {a.spelling!r}: it has no TensorView name, and "
                             f"{'no' if not hits else 'more than one'} TensorView has the result's extents {want}")
        note = (f"{a.loc}: the operand {a.spelling} has no TensorView name; taken as {hits[0]}, the one "
                f"TensorView with the extents {want} that {s.out.name} carries")
        if note not in self.notes:
            self.notes.append(note)
        return self.refs[hits[0]]

    def results(self, defined: dict[str, Statement], reads: set[str]) -> list[str]:
        listed = [r.name for r in self.dump.outputs]
        if listed:
            return [n for n in dict.fromkeys(listed) if n not in reads] or listed[-1:]
        return [n for n in defined if n not in reads]

    def _after(self, name: str) -> int:
        for i, (out, _, _) in enumerate(self.eqns):
            if out == name:
                return i + 1
        return 0

    def topological(self, ready: set[str]) -> list[tuple[str, str, list[str]]]:
        """Equations in an order where every operand is defined first."""
        pending, order = list(self.eqns), []
        while pending:
            for k, (out, call, _) in enumerate(pending):
                if all(n in ready for n in re.findall(r"\b(T\d+\w*)\b", call) if n != out):
                    order.append(pending.pop(k))
                    ready.add(out)
                    break
            else:
                out = pending[0][0]
                raise ParseError(self.refs[out].loc, f"{out} reads a TensorView that nothing defines "
                                 "(a cycle, or a segment input that is also defined)")
        return order

    def infer_meshes(self) -> None:
        meshes = {r.mesh for r in self.refs.values() if r.mesh is not None}
        if not meshes:
            self.notes.append("the dump prints no DeviceMesh: every TensorView is put on mesh [0]")
        for s in self.dump.statements:
            if self.refs[s.out.name].mesh is None:
                src = next((a for a in self.operands(s) if isinstance(a, TVRef) and self.refs[a.name].mesh), None)
                mesh = self.refs[src.name].mesh if src else (next(iter(meshes)) if len(meshes) == 1 else None)
                self._set_mesh(s.out.name, mesh or ((1,), (0,)))
        for n, r in list(self.refs.items()):
            if r.mesh is None:
                if len(meshes) > 1:
                    raise ParseError(r.loc, f"{n} is printed without a DeviceMesh, and the dump uses several")
                self._set_mesh(n, next(iter(meshes)) if meshes else ((1,), (0,)))

    def _set_mesh(self, name: str, mesh: tuple) -> None:
        r = self.refs[name]
        self.refs[name] = TVRef(r.name, r.spelling, r.domains, mesh, r.dtype, r.loc)

    # ---- one statement ----------------------------------------------------------------

    def statement(self, s: Statement) -> None:
        out = s.out.name
        comment = [f"line {s.out.loc.line}: {_short(s.text)}"]
        if isinstance(s.expr, TVRef):
            self.set_like(out, s.expr, s.out.loc)
            self.eqns.append((out, f"set({s.expr.name})", comment))
            return
        call = s.expr
        args = self._resolve_args(s)
        tensors = [a for a in args if isinstance(a, TVRef)]
        op = call.op
        if op == "bullet":
            self.notes.append(f"{call.loc}: a markdown bullet stands where an infix operator was "
                              f"(a leading +, - or * becomes a bullet); read as {self.bullet!r}")
            op = {"+": "add", "-": "sub", "*": "mul"}[self.bullet]
        if op in BINARY:
            self.binary(out, BINARY[op], args, call, comment)
        elif op in UNARY:
            self.unary_like(out, f"{UNARY[op]}({self._arg(args[0], call)})", self._one(tensors, call), call, comment)
        elif _CAST.match(op) or op.startswith("cast:"):
            self.cast(out, op, self._one(tensors, call), call, comment)
        elif op in ("reduction", "reduce", "sum"):
            kind = call.keywords.get("op", "add")
            if "op" not in call.keywords and op != "sum":
                self.notes.append(f"{call.loc}: {op}(...) names no op; read as a sum")
            if kind not in REDUCE_OPS:
                raise ParseError(call.loc, f"cannot map reduction op {kind!r} (refir: add, mul, max, min)")
            self.reduction(out, REDUCE_OPS[kind], self._one(tensors, call), call, comment)
        elif op in ("Set", "set", "LoadStoreOp"):
            self.set_like(out, self._one(tensors, call), call.loc)
            self.eqns.append((out, f"set({tensors[0].name})", comment))
        elif op == "Set.Permute":
            self.permute(out, self._one(tensors, call), call, comment)
        elif op == "broadcast":
            self.broadcast(out, self._one(tensors, call), call, comment)
        elif op == "squeeze":
            self.squeeze(out, self._one(tensors, call), call, comment)
        elif op == "matmul":
            self.matmul(out, tensors, call, comment)
        elif op == "linear":
            self.linear(out, tensors, call, comment)
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
        self._unify(_kept(self.axes[out]), _kept(self.axes[src.name]), loc, f"{out} = set({src.name})")
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
        want = _kept(self.axes[out])
        shards: list[str | None] = [None] * len(want)
        for t in tensors:
            axes = _kept(self.axes[t.name])
            self._unify(want, axes, call.loc, f"{out} = {name}(...)")
            self.dtypes.join(t.name, out, call.loc, f"operands of {out}")
            for i, a in enumerate(axes):
                shards[i] = shards[i] or a.shard
        follows = all(a.shard in (None, w.shard) for t in tensors for a, w in zip(_kept(self.axes[t.name]), want))
        axes = [Ax(w.extent, w.shard if follows else s, w.broadcast, False, w.number) for w, s in zip(want, shards)]
        text = f"{name}({', '.join(self._arg(a, call) for a in args)})"
        self.emit_local(out, text, comment, axes, self.refs[tensors[0].name].mesh, want)

    def unary_like(self, out: str, text: str, x: TVRef, call: Call, comment: list[str]) -> None:
        want = _kept(self.axes[out])
        self._unify(want, _kept(self.axes[x.name]), call.loc, f"{out} = {call.op}({x.name})")
        self.dtypes.join(x.name, out, call.loc, f"the dtype of {out}")
        self.emit_local(out, text, comment, _kept(self.axes[x.name]), self.refs[x.name].mesh, want)

    def cast(self, out: str, op: str, x: TVRef, call: Call, comment: list[str]) -> None:
        m = _CAST.match(op)
        src, dst = (_CAST_DTYPES[m.group(1)], _CAST_DTYPES[m.group(2)]) if m else (None, op.partition(":")[2])
        if src:
            self.dtypes.fix(x.name, src, call.loc, f"{op} reads {x.name}")
        self.dtypes.fix(out, dst, call.loc, f"{op} writes {out}")
        want = _kept(self.axes[out])
        self._unify(want, _kept(self.axes[x.name]), call.loc, f"{out} = {op}({x.name})")
        self.emit_local(out, f"cast({x.name}, dtype={dst})", comment, _kept(self.axes[x.name]),
                        self.refs[x.name].mesh, want)

    def reduction(self, out: str, kind: str, x: TVRef, call: Call, comment: list[str]) -> None:
        axes = self.axes[out]
        src = _kept(self.axes[x.name])
        if len(axes) != len(src):
            raise ParseError(call.loc, f"{out} has {len(axes)} axes (reduced ones included), "
                             f"{x.name} has {len(src)}")
        self._unify(axes, src, call.loc, f"{out} = {kind}({x.name})")
        self.dtypes.join(x.name, out, call.loc, f"the dtype of {out}")
        dims = [i for i, a in enumerate(axes) if a.reduced]
        self.eqns.append((out, f"{kind}({x.name}, dims=[{', '.join(map(str, dims))}])", comment))

    def permute(self, out: str, x: TVRef, call: Call, comment: list[str]) -> None:
        """The permutation is read from nvFuser's IterDomain numbers: a result's
        domains are made in its producer's axis order, then reordered."""
        want = _kept(self.axes[out])
        src = _kept(self.axes[x.name])
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

    def broadcast(self, out: str, x: TVRef, call: Call, comment: list[str]) -> None:
        want = _kept(self.axes[out])
        dims = [i for i, a in enumerate(want) if a.broadcast]
        flags = _flags(call, "flags")
        if flags is not None and [i for i, f in enumerate(flags) if f] != dims:
            raise ParseError(call.loc, f"broadcast flags {flags} disagree with {out}'s broadcast axes {dims}")
        rest = [a for a in want if not a.broadcast]
        src = _kept(self.axes[x.name])
        self._unify(rest, [a for a in src if not a.broadcast], call.loc, f"{out} = broadcast({x.name})")
        self.dtypes.join(x.name, out, call.loc, f"the dtype of {out}")
        it = iter(src)
        got = [Ax(1, None, True, False, 0) if a.broadcast and i in dims else next(it) for i, a in enumerate(want)]
        self.emit_local(out, f"unsqueeze({x.name}, dims=[{', '.join(map(str, dims))}])", comment, got,
                        self.refs[x.name].mesh, want)

    def squeeze(self, out: str, x: TVRef, call: Call, comment: list[str]) -> None:
        src = _kept(self.axes[x.name])
        flags = _flags(call, "flags") or _flags(call, "squeeze_flags")
        if flags is None:
            raise ParseError(call.loc, "squeeze needs its flags = {...} to say which axes go")
        dims = [i for i, f in enumerate(flags) if f]
        for i in dims:
            if not (src[i].broadcast or src[i].extent == 1) or src[i].shard:
                raise ParseError(call.loc, f"squeeze of axis {i} of {x.name}, which is not of extent 1")
        self._unify(_kept(self.axes[out]), [a for i, a in enumerate(src) if i not in dims], call.loc,
                    f"{out} = squeeze({x.name})")
        self.dtypes.join(x.name, out, call.loc, f"the dtype of {out}")
        self.notes.append(f"{call.loc}: squeeze of extent-1 axes {dims} written as max over them (one element "
                          "each: the same values)")
        self.eqns.append((out, f"max({x.name}, dims=[{', '.join(map(str, dims))}])", comment))

    def matmul(self, out: str, tensors: list[TVRef], call: Call, comment: list[str]) -> None:
        if len(tensors) != 2:
            raise ParseError(call.loc, "matmul takes two TensorViews")
        a, b = (_kept(self.axes[t.name]) for t in tensors)
        if len(a) != len(b) or len(a) < 2:
            raise ParseError(call.loc, f"cannot map matmul of ranks {len(a)} and {len(b)}: refir's matmul "
                             "takes operands of one rank, at least 2")
        where = f"{out} = matmul(...)"
        self._unify(a[:-2], b[:-2], call.loc, where)
        self._unify(a[-1:], b[-2:-1], call.loc, where)
        self._unify(_kept(self.axes[out]), a[:-1] + b[-1:], call.loc, where)
        for t in tensors:
            self.dtypes.join(t.name, out, call.loc, f"operands of {out}")
        self.eqns.append((out, f"matmul({tensors[0].name}, {tensors[1].name})", comment))

    def linear(self, out: str, tensors: list[TVRef], call: Call, comment: list[str]) -> None:
        """linear(x[M, K], w[N, K], bias[N]) = x @ w^T + bias."""
        if len(tensors) not in (2, 3) or len(_kept(self.axes[tensors[0].name])) != 2:
            raise ParseError(call.loc, "cannot map linear: refir maps linear(x[M, K], w[N, K] [, bias[N]])")
        x, w = tensors[:2]
        xa, wa = _kept(self.axes[x.name]), _kept(self.axes[w.name])
        where = f"{out} = linear(...)"
        self._unify(xa[-1:], wa[-1:], call.loc, where)
        self._unify(_kept(self.axes[out]), [xa[0], wa[0]], call.loc, where)
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
        self._unify(_kept(self.axes[bias.name]), wa[:1], call.loc, where)
        mm, bb = f"{out}_mm", f"{bias.name}_b"
        self.local_types[mm] = (_kept(self.axes[out]), self.refs[out].mesh)
        self.local_types[bb] = ([Ax(1, None, True, False, 0), *_kept(self.axes[bias.name])],
                                self.refs[bias.name].mesh)
        for n in (mm, bb):
            self.dtypes.join(n, out, call.loc, "")
        self.eqns.append((mm, f"matmul({x.name}, {wt})", ["linear = x @ w^T + bias"]))
        self.eqns.append((bb, f"unsqueeze({bias.name}, dims=[0])", []))
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
        if not any(a.reduced for a in self.axes[out]):
            raise ParseError(call.loc, f"the output {out} of this {kind} shows no reduced (r) domain")
        self.reduction(out, REDUCE_OPS[op], x, call, comment + [f"nvFuser lowered this to {kind}"])

    # ---- the refir text ---------------------------------------------------------------

    def type_text(self, name: str) -> str:
        if name in self.local_types:
            axes, mesh = self.local_types[name]
            layout = None
        else:
            axes, mesh, layout = _kept(self.axes[name]), self.refs[name].mesh, self.layouts.get(name)
        dims = ", ".join("b" if a.broadcast else self.extent(a) + (f"@{a.shard}" if a.shard else "") for a in axes)
        text = f"{self.dtype(name)}[{dims}] on {self.mesh_names[mesh]}"
        return text + (f" layout[{', '.join(map(str, layout))}]" if layout else "")

    def note_joined_symbols(self) -> None:
        """Say which of nvFuser's symbols the ops made one extent."""
        classes: dict[str, list[str]] = {}
        for k in self.syms.parent:
            if not k.startswith("#"):
                classes.setdefault(self.syms.find(k), []).append(k)
        for members in classes.values():
            if len(members) > 1:
                names = sorted(members, key=lambda s: (int(s[1:]) if re.fullmatch(r"i\d+", s) else 1 << 30, s))
                shown = self.extent(Ax(names[0], None, False, False, 0))
                self.notes.append(f"the ops make {', '.join(names)} one extent, written {shown}")

    def dtype(self, name: str) -> str:
        r = self.dtypes.find(name)
        if r not in self.dtypes.value:
            self.dtypes.value[r] = "f32"
            self.notes.append(f"no dtype is printed for {name} or anything tied to it: f32")
        return str(self.dtypes.value[r])

    def emit(self, params: list[str], order: list, results: list[str]) -> Imported:
        meshes: list[tuple] = []
        for n in params + [o for o, _, _ in order]:
            m = self.local_types[n][1] if n in self.local_types else self.refs[n].mesh
            if m not in meshes:
                meshes.append(m)
        self.mesh_names = {m: ("m" if len(meshes) == 1 else f"m{i}") for i, m in enumerate(meshes)}
        body = [f"  {o}: {self.type_text(o)} = {call}" for o, call, _ in order]  # types first: they add notes
        self.note_joined_symbols()
        head = [f"func main({', '.join(f'{p}: {self.type_text(p)}' for p in params)}) {{"]
        lines = []
        for m, name in self.mesh_names.items():
            lines.append(f"mesh {name} = {_nest(list(m[1]), m[0])}")
        lines.append("")
        for p in params:
            lines.append(f"# {p}: {_short(self.refs[p].spelling)}")
        lines += head
        for (_, _, comments), text in zip(order, body):
            lines += [f"  # {c}" for c in comments]
            lines.append(text)
        lines += [f"  return {', '.join(results)}", "}", ""]
        self.compare_communications(parse("\n".join(lines), f"{self.file} (imported)"))
        header = [f"# Imported from nvFuser fusion IR ({self.file}) by `refir import-nvfuser`."]
        text = "\n".join(header + [f"# note: {n}" for n in self.notes] + lines)
        program = parse(text, f"{self.file} (imported)")
        return Imported(program, text, self.notes)

    def compare_communications(self, program: Program) -> None:
        """Where the dump names the communication nvFuser chose, say if refir's
        lowering chooses another."""
        from refir.lower import lower
        from refir.ops import op_name
        from refir.verify import verify

        chosen = {out: kind for out, call, _ in self.eqns if call.startswith(("set(", "sum(", "prod(", "max(", "min("))
                  for kind in [self.comm_kinds.get(out)] if kind}
        if not chosen:
            return
        lowered = lower(verify(program))
        for out, kind in chosen.items():
            ours = [op_name(s.op) for s in lowered.steps if s.eqn.out == out and s.is_communication]
            want = _COMM_NAMES[kind]
            if want not in ours:
                self.notes.append(f"nvFuser lowered {out} to {kind}; refir lowers it to "
                                  f"{', '.join(ours) or 'no communication'}")


def _flags(call: Call, key: str) -> list[bool] | None:
    value = call.keywords.get(key)
    if value is None:
        return None
    words = re.findall(r"true|false|1|0", value)
    return [w in ("true", "1") for w in words]


def _nest(flat: list[int], shape: tuple[int, ...]) -> str:
    if len(shape) == 1:
        return "[" + ", ".join(map(str, flat)) + "]"
    step = len(flat) // shape[0]
    return "[" + ", ".join(_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])) + "]"


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def import_nvfuser(text: str, file: str = "<dump>", links: dict[str, str] | None = None,
                   bullet: str = "+") -> Imported:
    """The refir program of an nvFuser dump, its .rir text and the importer's notes."""
    return Importer(text, file, dict(links or {}), bullet).run()


def from_nvfuser(text: str, links: dict[str, str] | None = None) -> Program:
    """`refir.from_nvfuser(dump_text)`: the refir Program of a printed fusion."""
    return import_nvfuser(text, links=links).program


__all__ = ["Domain", "Imported", "from_nvfuser", "import_nvfuser", "Statement"]
