"""The verifier: type inference for every op and the spec's labelled constraints.

Each check cites its constraint (`# permute_c1`) as written in docs/spec.md, and
tests/test_verify.py holds a negative test of the same name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from math import prod

from refir.checks.limits import DEVICES
from refir.errors import Loc, VerifyError
from refir.ir import ops
from refir.ir.program import Eqn, Func, Lit, Program, Sym, Var
from refir.ir.tables import registrar
from refir.ir.types import BROADCAST, FLOATS, INTEGERS, RESERVED, Axis, Mesh, TensorType


@dataclass(frozen=True)
class Checked:
    """A verified function: the type of every value, declared or inferred."""

    program: Program
    func: Func
    types: dict[str, TensorType] = field(hash=False)
    symbols: frozenset[str]  # bound by the inputs

    def type_of(self, name: str) -> TensorType:
        return self.types[name]


def check_mesh(mesh: Mesh, loc: Loc) -> None:
    """mesh_c1 (shape) and mesh_c2 (ids); the parser also checks rectangularity."""
    if not 1 <= mesh.ndim <= 3 or 0 in mesh.shape or len(mesh.devices) != prod(mesh.shape):  # mesh_c1
        raise VerifyError(loc, "mesh_c1", f"mesh {mesh.name!r} must be a non-empty 1- to 3-D array")
    if len(set(mesh.devices)) != len(mesh.devices) or min(mesh.devices) < 0:  # mesh_c2
        bad = sorted({d for d in mesh.devices if mesh.devices.count(d) > 1 or d < 0})
        raise VerifyError(loc, "mesh_c2", f"mesh {mesh.name!r} device ids must be distinct and >= 0 "
                          f"(offending: {bad})")
    top = max(mesh.devices)
    where = f"{loc}: " if loc.line else ""  # a built mesh may have no place
    DEVICES.check(top + 1, f"{where}mesh {mesh.name!r} names device {top}, which needs a world of")


def check_type(t: TensorType, loc: Loc) -> None:
    """Constraints every tensor type meets (type_c2, type_c3, type_c5, type_c6), and its
    mesh's. Any extent may be sharded: uneven blocks follow shard_c1 (type_c4 is retired)."""
    check_mesh(t.mesh, loc)
    used: dict[str, int] = {}
    for i, a in enumerate(t.axes):
        if isinstance(a.extent, int) and a.extent < 0:  # type_c6
            raise VerifyError(loc, "type_c6", f"axis {i} has a negative extent {a.extent}")
        if isinstance(a.extent, str) and a.extent in RESERVED:  # type_c6
            raise VerifyError(loc, "type_c6", f"{a.extent!r} is reserved and cannot name a symbol")
        if not a.shard:
            continue
        if not t.mesh.has(a.shard):  # type_c2
            raise VerifyError(
                loc, "type_c2", f"axis {i} is sharded on {a.shard}, but mesh {t.mesh.name!r} "
                f"has {t.mesh.ndim} dimension{'s' * (t.mesh.ndim > 1)}",
            )
        if a.shard in used:  # type_c3
            raise VerifyError(
                loc, "type_c3", f"axes {used[a.shard]} and {i} are both sharded on {a.shard}"
            )
        used[a.shard] = i
    if t.layout is not None and sorted(t.layout) != list(range(t.rank)):  # type_c5
        raise VerifyError(
            loc, "type_c5", f"layout {list(t.layout)} is not a permutation of 0..{t.rank - 1}"
        )


class _Eqn:
    """Checking context of one equation: its operands' types and a `fail` helper."""

    def __init__(self, eqn: Eqn, types: dict[str, TensorType]) -> None:
        self.eqn = eqn
        self.args = [types[a.name] if isinstance(a, Var) else None for a in eqn.args]
        self.tensors = [t for t in self.args if t is not None]

    def fail(self, label: str, message: str) -> VerifyError:
        return VerifyError(self.eqn.loc, label, f"in {self.eqn.out}: {message}")


Rule = Callable[[object, _Eqn], TensorType]
INFER: dict[type, Rule] = {}


rule = registrar(INFER)


def _same_extent(a: Axis, b: Axis) -> bool:
    return a.broadcast == b.broadcast and a.extent == b.extent


@rule(ops.Binary, ops.Unary)
def _elementwise(op: ops.Binary | ops.Unary, c: _Eqn) -> TensorType:
    if not c.tensors:  # elementwise_c1
        raise c.fail("elementwise_c1", f"{op.name} needs at least one tensor operand")
    first = c.tensors[0]
    for t in c.tensors[1:]:
        if t.dtype != first.dtype:  # elementwise_c2
            raise c.fail("elementwise_c2", f"operands differ in dtype: {first.dtype} and {t.dtype}; "
                         "use cast")
        if t.rank != first.rank:  # elementwise_c3
            raise c.fail("elementwise_c3", f"operands differ in rank: {first.rank} and {t.rank}; "
                         "use unsqueeze")
        if t.mesh != first.mesh:  # elementwise_c4
            raise c.fail("elementwise_c4", f"operands live on meshes {first.mesh.name!r} and "
                         f"{t.mesh.name!r}; move one with set")
    axes = []
    for i in range(first.rank):
        column = [t.axes[i] for t in c.tensors if not t.axes[i].broadcast]
        for a in column[1:]:
            if a.extent != column[0].extent:  # elementwise_c3
                raise c.fail("elementwise_c3", f"axis {i} has extents {column[0].extent} and "
                             f"{a.extent}; only b axes broadcast")
        shards = {a.shard for a in column if a.shard}
        if len(shards) > 1:  # elementwise_c5
            raise c.fail("elementwise_c5", f"axis {i} is sharded on {' and '.join(sorted(shards))}")
        axes.append(Axis(column[0].extent, shards.pop() if shards else None) if column else BROADCAST)
    _elementwise_dtype(op, first.dtype, c)
    inferred = TensorType(first.dtype, tuple(axes), first.mesh)
    declared = c.eqn.type
    if declared is None:
        return inferred
    _same_shape(declared, inferred, c)
    if declared.mesh != inferred.mesh:  # elementwise_c4
        raise c.fail("elementwise_c4", f"the result is on mesh {declared.mesh.name!r}, the operands "
                     f"on {inferred.mesh.name!r}; move them with set")
    for t in c.tensors:
        for i, (a, r) in enumerate(zip(t.axes, declared.axes)):
            if a.shard and a.shard != r.shard:  # elementwise_c5
                raise c.fail("elementwise_c5", f"an operand has axis {i} sharded on {a.shard} but "
                             f"the result has it {'on ' + r.shard if r.shard else 'replicated'}; "
                             "reshard with set")
    return declared


def _elementwise_dtype(op: ops.Binary | ops.Unary, dtype: str, c: _Eqn) -> None:
    if op.name in ("div", "exp", "log", "sqrt") and dtype not in FLOATS:  # elementwise_c6
        raise c.fail("elementwise_c6", f"{op.name} needs a float dtype, not {dtype}")
    if dtype == "bool" and op.name not in ("maximum", "minimum"):  # elementwise_c6
        raise c.fail("elementwise_c6", f"{op.name} is not defined on bool")
    for a in c.eqn.args:
        if isinstance(a, Lit) and isinstance(a.value, float) and dtype not in FLOATS:  # elementwise_c7
            raise c.fail("elementwise_c7", f"the float literal {a.value} needs a float tensor, "
                         f"not {dtype}")


def _same_shape(declared: TensorType, inferred: TensorType, c: _Eqn) -> None:
    if declared.dtype != inferred.dtype:  # result_c1
        raise c.fail("result_c1", f"declared dtype {declared.dtype}, but the op gives {inferred.dtype}")
    if declared.rank != inferred.rank or not all(
        _same_extent(a, b) for a, b in zip(declared.axes, inferred.axes)
    ):  # result_c1
        raise c.fail("result_c1", f"declared extents [{_extents(declared)}], but the op gives "
                     f"[{_extents(inferred)}]")


def _placement(a: Axis) -> str:
    return f"sharded on {a.shard}" if a.shard else "replicated"


def _extents(t: TensorType) -> str:
    return ", ".join("b" if a.broadcast else str(a.extent) for a in t.axes)


def _unary_operand(c: _Eqn) -> TensorType:
    if c.args[0] is None:  # op_c2
        raise c.fail("op_c2", f"{ops.op_name(c.eqn.op)} needs a tensor operand")
    return c.args[0]


def _keep(inferred: TensorType, c: _Eqn) -> TensorType:
    """Result of an op that moves no data: a declared type may change only the layout."""
    declared = c.eqn.type
    if declared is None:
        return inferred
    _same_shape(declared, inferred, c)
    if declared.mesh != inferred.mesh or declared.sharding() != inferred.sharding():  # result_c2
        raise c.fail("result_c2", f"{ops.op_name(c.eqn.op)} gives {inferred}, declared {declared}; "
                     "a resharding needs an explicit set")
    return declared


@rule(ops.Cast)
def _cast(op: ops.Cast, c: _Eqn) -> TensorType:
    return _keep(replace(_unary_operand(c), dtype=op.dtype, layout=None), c)


@rule(ops.Permute)
def _permute(op: ops.Permute, c: _Eqn) -> TensorType:
    x = _unary_operand(c)
    if sorted(op.perm) != list(range(x.rank)):  # permute_c1
        raise c.fail("permute_c1", f"{list(op.perm)} is not a permutation of 0..{x.rank - 1}")
    return _keep(replace(x, axes=tuple(x.axes[p] for p in op.perm), layout=None), c)


@rule(ops.Unsqueeze)
def _unsqueeze(op: ops.Unsqueeze, c: _Eqn) -> TensorType:
    x = _unary_operand(c)
    rank = x.rank + len(op.dims)
    if len(set(op.dims)) != len(op.dims) or not all(0 <= d < rank for d in op.dims):  # unsqueeze_c1
        raise c.fail("unsqueeze_c1", f"dims {list(op.dims)} must be distinct positions in 0..{rank - 1}")
    rest = iter(x.axes)
    axes = tuple(BROADCAST if i in op.dims else next(rest) for i in range(rank))
    return _keep(replace(x, axes=axes, layout=None), c)


@rule(ops.Reduction)
def _reduction(op: ops.Reduction, c: _Eqn) -> TensorType:
    x = _unary_operand(c)
    if len(set(op.dims)) != len(op.dims) or not all(0 <= d < x.rank for d in op.dims):  # reduce_c1
        raise c.fail("reduce_c1", f"dims {list(op.dims)} must be distinct axes in 0..{x.rank - 1}")
    if op.kind in ("band", "bor", "bxor") and x.dtype not in INTEGERS | {"bool"}:  # reduce_c2
        raise c.fail("reduce_c2", f"{op.kind} needs an integer or bool dtype, not {x.dtype}")
    if op.kind in ("sum", "prod") and x.dtype == "bool":  # reduce_c2
        raise c.fail("reduce_c2", f"{op.kind} is not defined on bool; use max or min")
    kept = tuple(a for i, a in enumerate(x.axes) if i not in op.dims)
    inferred = TensorType(x.dtype, kept, x.mesh)
    if c.eqn.type is None:
        return inferred
    _same_shape(c.eqn.type, inferred, c)
    return c.eqn.type


@rule(ops.Matmul)
def _matmul(op: ops.Matmul, c: _Eqn) -> TensorType:
    if len(c.tensors) != 2:  # op_c2
        raise c.fail("op_c2", "matmul takes two tensor operands")
    a, b = c.tensors
    if a.rank != b.rank or a.rank < 2:  # matmul_c1
        raise c.fail("matmul_c1", f"operands need one rank of at least 2, not {a.rank} and {b.rank}")
    if a.dtype != b.dtype or a.dtype == "bool" or a.mesh != b.mesh:  # matmul_c1
        raise c.fail("matmul_c1", f"operands need one numeric dtype and one mesh "
                     f"({a.dtype} on {a.mesh.name}, {b.dtype} on {b.mesh.name})")
    ka, kb = a.axes[-1], b.axes[-2]
    if not _same_extent(ka, kb):  # matmul_c2
        raise c.fail("matmul_c2", f"contracted extents differ: {ka.extent} and {kb.extent}")
    for i, (x, y) in enumerate(zip(a.axes[:-2], b.axes[:-2])):
        if not _same_extent(x, y) or x.shard != y.shard:  # matmul_c2
            raise c.fail("matmul_c2", f"batch axis {i} differs: {x} and {y}")
    m, n = a.axes[-2], b.axes[-1]
    if ka.shard != kb.shard:  # matmul_c3
        raise c.fail("matmul_c3", f"the contracted axis is {_placement(ka)} in one operand and "
                     f"{_placement(kb)} in the other")
    if m.shard and m.shard == n.shard:  # matmul_c3
        raise c.fail("matmul_c3", f"M and N are both sharded on {m.shard}")
    axes = tuple(a.axes[:-2]) + (m, n)
    inferred = TensorType(a.dtype, axes, a.mesh)
    if ka.shard is None or c.eqn.type is None:
        return _keep(inferred, c)
    # A sharded contraction leaves partial sums: the result may be laid out anew, like a reduction.
    _same_shape(c.eqn.type, inferred, c)
    return c.eqn.type


@rule(ops.Set)
def _set(op: ops.Set, c: _Eqn) -> TensorType:
    x = _unary_operand(c)
    if c.eqn.type is None:
        return replace(x, layout=None)
    if c.eqn.type.dtype != x.dtype or c.eqn.type.rank != x.rank or not all(
        _same_extent(p, q) for p, q in zip(c.eqn.type.axes, x.axes)
    ):  # set_c1
        raise c.fail("set_c1", f"set keeps dtype and extents: {x} cannot become {c.eqn.type}")
    return c.eqn.type


def verify(program: Program, func_name: str | None = None) -> Checked:
    """Check one function (or `main`/the only one) and infer every type."""
    check_program(program)
    return verify_func(program, program.func(func_name))


def verify_all(program: Program) -> list[Checked]:
    """Every function checked, in order; the program-wide checks run once."""
    check_program(program)
    return [verify_func(program, f) for f in program.funcs]


def check_program(program: Program) -> None:
    """What concerns the whole program: unique function and mesh names, and the
    meshes of programs built in Python rather than parsed."""
    seen: dict[str, Func] = {}
    for f in program.funcs:
        if f.name in seen:  # func_c5
            raise VerifyError(seen[f.name].loc, "func_c5", f"function {f.name!r} is defined twice")
        seen[f.name] = f
    mesh_names: set[str] = set()
    for m in program.meshes:
        check_mesh(m, program.funcs[0].loc)
        if m.name in mesh_names:  # mesh_c3
            raise VerifyError(program.funcs[0].loc, "mesh_c3", f"mesh {m.name!r} is declared twice")
        mesh_names.add(m.name)


def verify_func(program: Program, func: Func) -> Checked:
    """Check `func` of `program` (whose program-wide checks passed) and infer every type."""
    types: dict[str, TensorType] = {}
    symbols: set[str] = set()
    for p in func.params:
        check_type(p.type, p.loc)
        symbols |= p.type.symbols()
    for p in func.params:
        _define(p.name, p.loc, types, symbols)
        types[p.name] = p.type
    for eqn in func.eqns:
        for a in eqn.args:
            if isinstance(a, Var) and a.name not in types:  # func_c2
                raise VerifyError(_at(a, eqn), "func_c2", f"in {eqn.out}: {a.name!r} is not defined "
                                  "before this equation")
            if isinstance(a, Sym) and a.name not in symbols:  # func_c3
                raise VerifyError(_at(a, eqn), "func_c3", f"in {eqn.out}: symbol {a.name!r} is bound "
                                  "by no input")
        if eqn.type is not None:
            check_type(eqn.type, eqn.loc)
            unbound = eqn.type.symbols() - symbols
            if unbound:  # func_c3
                raise VerifyError(eqn.loc, "func_c3", f"in {eqn.out}: symbol "
                                  f"{sorted(unbound)[0]!r} is bound by no input")
        _define(eqn.out, eqn.loc, types, symbols)
        ctx = _Eqn(eqn, types)
        if isinstance(eqn.op, (ops.Binary, ops.Unary)):
            want = 2 if isinstance(eqn.op, ops.Binary) else 1
            if len(eqn.args) != want:  # op_c2
                raise ctx.fail("op_c2", f"{eqn.op.name} takes {want} operand(s)")
        result = INFER[type(eqn.op)](eqn.op, ctx)
        check_type(result, eqn.loc)
        types[eqn.out] = result
    for r in func.results:
        if r not in types:  # func_c4
            raise VerifyError(func.results_loc, "func_c4", f"result {r!r} is not defined")
    twice = [r for i, r in enumerate(func.results) if r in func.results[:i]]
    if twice:  # func_c4 (the parser refuses it first, at the name)
        raise VerifyError(func.results_loc, "func_c4", f"{twice[0]!r} is returned twice")
    return Checked(program, func, types, frozenset(symbols))


def _at(a: Var | Sym, eqn: Eqn) -> Loc:
    return a.loc if a.loc.line else eqn.loc


def _define(name: str, loc: Loc, types: dict[str, TensorType], symbols: set[str]) -> None:
    if name in RESERVED:  # func_c1
        raise VerifyError(loc, "func_c1", f"{name!r} is reserved")
    if name in types:  # func_c1
        raise VerifyError(loc, "func_c1", f"{name!r} is defined twice")
    if name in symbols:  # func_c1
        raise VerifyError(loc, "func_c1", f"{name!r} is already a symbol")
