"""Partial values in nvFuser printouts (docs/spec.md §3.3, docs/frontends/nvfuser.md).

nvFuser keeps a sum over a sharded axis pending as an rFactor: the local
reduction's result keeps the device domain of the reduced axis as an iteration
domain (`ideviceIdx.x22{2}rf, rS23{4}rf`: every device holds its own term), and
a later statement reduces the terms: a `reduction` whose result prints the
device domain alone as reduced (`rdeviceIdx.x9{2}`), or an Allreduce,
ReduceScatter or Reduce Communication. Such a TensorView is a refir partial
value, `partial[sum@DIDx]` (the kind its definition or its reducer names), and
the reducing statement is a `set`, which refir lowers to allreduce or
reduce_scatter. A TensorView printed with a reduced device domain that nothing
later reduces (`T4[iS9{i0}, iS10{i3}, rdeviceIdx.x20{2}, rS21{...}rf] =
linear(...)`) is the reduced value, as nvFuser reads it: the expression itself
reduces, and stays what it was.

`PartialMapper` is a mixin of the importer's `OpMapper` (nvfuser_ops.py)."""

from __future__ import annotations

from refir.errors import Loc, ParseError
from refir.frontends.nvfuser_axes import kept
from refir.frontends.nvfuser_dump import Call, Statement, TVRef
from refir.frontends.nvfuser_mapping import MapperBase

MESH_ORDER = ("DIDz", "DIDy", "DIDx")  # refir keeps a partial's mesh axes in this order
REDUCE_KINDS = {"add": "sum", "sum": "sum", "mul": "prod", "max": "max", "fmax": "max", "min": "min", "fmin": "min"}
REDUCTIONS = ("reduction", "reduce", "sum")
SETS = ("Set", "set", "LoadStoreOp", "ShardByStream")
REDUCING_COMMS = ("Allreduce", "Reduce", "ReduceScatter")


class PartialMapper(MapperBase):
    """Finds the partial TensorViews and maps the statements that reduce them."""

    # ---- which TensorViews are partial --------------------------------------------------

    def find_partials(self) -> None:
        """Every TensorView with a reduced, device-split axis whose terms are still
        pending: its device domain iterates (an rFactor), or a later statement
        reduces that device axis."""
        self.partials = {}
        statements = self.dump.statements
        readers: dict[str, list[Statement]] = {}
        for s in statements:
            for a in self.operands(s):
                if isinstance(a, TVRef):
                    readers.setdefault(a.name, []).append(s)
        defs = {s.out.name: s for s in statements}
        for name in dict.fromkeys([n for n in self.axes if n not in defs] + [s.out.name for s in statements]):
            held = [a for a in self.axes[name] if a.reduced and a.shard]
            if not held:
                continue
            reducers = [s for s in readers.get(name, []) if self._reduces_terms(s, name)]
            if not reducers and not any(a.terms for a in held):
                continue  # reduced within its own expression
            kind = self._made_kind(defs[name]) if name in defs else None
            for s in reducers:
                theirs = _reducer_kind(s)
                if kind and theirs and theirs != kind:
                    raise ParseError(s.out.loc, f"{s.out.name} reduces the device terms of {name} with {theirs}, "
                                     f"but {name}'s definition (line {defs[name].out.loc.line}) leaves {kind} terms")
                kind = kind or theirs
            if kind is None:
                raise ParseError(self.refs[name].loc, f"{name} holds one term per device (a reduced axis split "
                                 "by an iterating device domain), and no statement says which reduction they await")
            over = {m for a in held for m in ((a.shard,) if isinstance(a.shard, str) else a.shard or ())}
            self.partials[name] = (kind, tuple(m for m in MESH_ORDER if m in over))

    def _reduces_terms(self, s: Statement, name: str) -> bool:
        """Does `s` reduce the device terms of `name`: a reducing Communication of
        it, or a reduction whose result has more axes than `name` keeps (the
        device domains it reduces, printed alone)?"""
        call = s.expr
        if not isinstance(call, Call):
            return False
        if call.op.startswith("communication:"):
            return call.op.partition(":")[2] in REDUCING_COMMS
        return call.op in REDUCTIONS and len(self.axes[s.out.name]) > len(kept(self.axes[name]))

    def _made_kind(self, s: Statement) -> str | None:
        """The kind of terms a partial's definition leaves (None: it does not say)."""
        call = s.expr
        if isinstance(call, TVRef) or (isinstance(call, Call) and call.op in SETS):
            src = call if isinstance(call, TVRef) else next((a for a in call.args if isinstance(a, TVRef)), None)
            return self.partials.get(src.name, (None,))[0] if src is not None else None
        if call.op in ("matmul", "linear"):
            return "sum"
        if call.op in REDUCTIONS:
            return REDUCE_KINDS.get(call.keywords.get("op", "add"))
        return None

    # ---- the statements around them ----------------------------------------------------

    def partial_text(self, name: str) -> str:
        if name not in self.partials:
            return ""
        kind, over = self.partials[name]
        return f" partial[{kind}@{','.join(over)}]"

    def check_partial_use(self, out: str, op: str, tensors: list[TVRef], loc: Loc) -> None:
        """Only a reduction, a set or a Communication reads a partial value here; only
        those and a matmul or linear write one (refir's other readers of a partial,
        docs/spec.md §3.3, never meet a printed rFactor)."""
        reading = op in REDUCTIONS or op in SETS or op.startswith("communication:")
        for t in tensors:
            if t.name in self.partials and not reading:
                kind, over = self.partials[t.name]
                raise ParseError(loc, f"cannot map {op} of {t.name}, a partial value (one {kind} term per device "
                                 f"over {','.join(over)}, pending): the importer maps a partial's reduction, set "
                                 "or Communication only")
        if out in self.partials and not (reading or op in ("matmul", "linear")):
            raise ParseError(loc, f"cannot map {op} writing {out} as a partial value (its reduced axis is split by "
                             "an iterating device domain): only a reduction, matmul, linear or set makes one here")

    def reduce_terms(self, out: str, kind: str, x: TVRef, call: Call, comment: list[str]) -> None:
        """`out = reduction(x)` whose result prints x's device domains alone, reduced:
        the reduction of x's terms, refir's `set` (an allreduce, or a
        reduce_scatter where out is split on the same mesh axis)."""
        held, over = self.partials[x.name]
        axes = self.axes[out]
        extra = [a for a in axes if a.reduced]
        rest = [a for a in axes if not a.reduced]
        src = kept(self.axes[x.name])
        if len(rest) != len(src) or any(not a.shard for a in extra):
            raise ParseError(call.loc, f"{out} = {kind}({x.name}) reduces the device terms of {x.name} and other "
                             "axes at once: the importer maps one or the other in a statement")
        named = {m for a in extra for m in ((a.shard,) if isinstance(a.shard, str) else a.shard or ())}
        if named != set(over):
            raise ParseError(call.loc, f"{out} reduces the terms of {x.name} over {','.join(sorted(named))}, "
                             f"but they are pending over {','.join(over)}: the importer maps a reduction of all")
        if kind != held:
            raise ParseError(call.loc, f"{out} reduces {x.name}'s {held} terms with {kind}")
        self._unify(rest, src, call.loc, f"{out} = {kind}({x.name})")
        self.dtypes.join(x.name, out, call.loc, f"the dtype of {out}")
        self.eqns.append((out, f"set({x.name})", comment + [f"the {held} of {x.name}'s terms over {','.join(over)}"]))


def _reducer_kind(s: Statement) -> str | None:
    call = s.expr
    assert isinstance(call, Call)
    if call.op.startswith("communication:"):
        op = next((v for k, v in call.keywords.items() if k in ("red_op", "redop", "reduction_op", "op")), "add")
        return REDUCE_KINDS.get(op.split("::")[-1].lower())
    return REDUCE_KINDS.get(call.keywords.get("op", "add"))
