"""Build refir programs in Python, the way JAX or nvFuser's frontend builds them.

    b = Builder()
    m = b.mesh([0, 1, 2, 3])
    x = b.input("x", "f32", ["N@DIDx", 4])
    y = (x + 1.0).relu()
    s = y.sum(dims=[0])                      # a reduction of a sharded axis
    g = s.set(shard={0: "DIDx"})             # a resharding
    b.output(g)
    prog = b.build()                         # a refir.Program
    print(refir.print_program(prog)); refir.run(prog, {"x": ...})

Every op is checked as it is called, by the verifier's own type rules, so a
mistake fails at the line that makes it (a VerifyError naming the constraint).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from refir.checks.inference import EqnContext
from refir.checks.rules_partial import infer
from refir.checks.type_checks import check_mesh, check_param_extents, check_type
from refir.checks.verifier import verify
from refir.errors import InputError
from refir.frontends.builder_checks import OWN, AxisSpec, axis, caller, check_limits, flatten, located, prod
from refir.frontends.builder_values import (  # noqa: F401  (the functions are the builder's too)
    Value,
    add,
    binary,
    cast,
    cat,
    compare,
    div,
    expand,
    iota,
    matmul,
    maximum,
    minimum,
    mul,
    permute,
    reshape,
    reshard,
    sub,
    unary,
    where,
)
from refir.ir import ops
from refir.ir.program import Eqn, Func, Lit, Operand, Param, Program, Sym, Var
from refir.ir.types import DIDS, DTYPES, PARTIAL_KINDS, Axis, Mesh, ShardSpec, TensorType, dids_of

OWN.add(__file__)  # errors are placed at the caller's line, outside this module
_MAX_LITERAL_DIGITS = 1000  # as the parser reads integer literals

PartialSpec = tuple[str, Sequence[str]]  # ("sum", ["DIDx"]): a pending reduction's kind and mesh axes


def partial_fields(partial: PartialSpec | None, mesh: Mesh) -> tuple[tuple[str, ...], str]:
    """A type's (partial, partial_kind) from `("sum", ["DIDx"])`, its mesh axes in mesh order."""
    if partial is None:
        return (), ""
    kind, dids = partial
    dids = [dids] if isinstance(dids, str) else list(dids)
    if kind not in PARTIAL_KINDS or any(d not in DIDS for d in dids):
        raise InputError(f"partial={partial!r}: give (kind, mesh axes): a kind of {', '.join(PARTIAL_KINDS)}, "
                         "mesh axes of DIDx, DIDy, DIDz")
    return tuple(sorted(dids, key=lambda d: mesh.axis_of(d) if mesh.has(d) else -1)), kind


class Builder:
    """Collects meshes, parameters and equations; `build()` gives the Program."""

    def __init__(self, func: str = "main") -> None:
        self.func = func
        self.meshes: list[Mesh] = []
        self.params: list[Param] = []
        self.eqns: list[Eqn] = []
        self.types: dict[str, TensorType] = {}
        self.results: list[str] = []
        self._names = (f"t{i}" for i in itertools.count())

    # ---- declarations -----------------------------------------------------------------

    @located
    def mesh(self, devices: Sequence, name: str | None = None, shape: Sequence[int] | None = None) -> Mesh:
        """A mesh from nested lists of device ids, `[0, 1]` or `[[0, 1], [2, 3]]`, or
        from a flat list in row-major order and its `shape`: `mesh([3, 1, 0, 2], shape=(2, 2))`."""
        name = name or ("m" if not self.meshes else f"m{len(self.meshes)}")
        nested = any(isinstance(d, (list, tuple)) for d in devices)
        if shape is not None and nested:
            raise InputError(f"mesh {name}: with shape=, give the device ids as one flat list")
        if shape is None:
            found: list[int] = []
            level: object = devices
            while isinstance(level, (list, tuple)):
                found.append(len(level))
                level = level[0] if level else None
            shape = found
        flat = flatten(devices)
        mesh = Mesh(name, tuple(shape), tuple(flat))
        if len(flat) != prod(list(shape)):
            raise InputError(f"mesh {name}: rows of unequal length" if nested else
                             f"mesh {name}: {len(flat)} device ids do not fill shape {list(shape)}")
        if any(m.name == name for m in self.meshes):
            raise InputError(f"mesh {name!r} is declared twice")
        check_mesh(mesh, caller())
        self.meshes.append(mesh)
        return mesh

    @located
    def type(self, dtype: str, axes: Sequence[AxisSpec | Axis], mesh: Mesh | None = None,
             layout: Sequence[int] | None = None, partial: PartialSpec | None = None) -> TensorType:
        """A type on `mesh` (the only mesh if there is one): `type("bf16", ["N@DIDy", 3, "b"])`.
        `layout` is the memory order, outermost axis first (None: row-major); `partial`,
        a pending reduction: `("sum", ["DIDx"])` (docs/spec.md §3.3)."""
        if dtype not in DTYPES:
            raise InputError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
        m = self._mesh(mesh)
        t = TensorType(dtype, tuple(axis(a) for a in axes), m,
                       tuple(layout) if layout is not None else None, *partial_fields(partial, m))
        check_type(t, caller())
        check_limits(t, str(t))  # the decorator says where
        return t

    @located
    def input(self, name: str, dtype: str | TensorType, axes: Sequence[AxisSpec | Axis] | None = None,
              mesh: Mesh | None = None, layout: Sequence[int] | None = None,
              partial: PartialSpec | None = None) -> Value:
        """A parameter: `input("x", "f32", ["N@DIDx", 4])`, or `input("x", t)` of a TensorType;
        `partial=("sum", ["DIDx"])` makes it a partial value (each device holds a term)."""
        if isinstance(dtype, TensorType):
            if axes is not None or mesh is not None or layout is not None or partial is not None:
                raise InputError(f"input {name!r}: give a TensorType or dtype and axes, not both")
            t = dtype
            self._source_type(t)
        elif axes is None:
            raise InputError(f"input {name!r}: say its axes")
        else:
            t = self.type(dtype, axes, mesh, layout, partial)
        check_param_extents(name, t, caller())  # type_c10: an input's extents bind its symbols
        self._define(name)
        self.params.append(Param(name, t, caller()))
        self.types[name] = t
        return Value(self, name, t)

    @located
    def sym(self, name: str) -> Sym:
        """A symbolic extent used as a scalar operand: `x + b.sym("N")`. An input
        declared before must have an axis of that extent (its binding is the global extent)."""
        bound = sorted({s for p in self.params for s in p.type.symbols()})
        if name not in bound:
            raise InputError(f"symbol {name!r} is the extent of no input "
                             f"(bound: {', '.join(bound) or 'none'})")
        return Sym(name)

    @located
    def output(self, *values: Value) -> None:
        for v in values:
            if v.builder is not self:
                raise InputError(f"{v.name} belongs to another builder")
            self.results.append(v.name)

    # ---- ops --------------------------------------------------------------------------

    @located
    def apply(self, op: ops.Op, args: tuple, name: str | None = None, result_type: TensorType | None = None,
              shard: dict[int, ShardSpec] | None = None, mesh: Mesh | None = None,
              layout: Sequence[int] | None = None, typed: bool = True,
              partial: PartialSpec | Literal[False] | None = None) -> Value:
        """Add `name = op(args)`. The result type is inferred, or `result_type`, or the
        inferred one with its `shard`ing (axis -> DIDx/DIDy/DIDz), `mesh` or
        `layout` replaced, or its `partial` (`("sum", ["DIDx"])`; False: reduced, as a set
        from a partial value does). `typed=False` leaves an inferred type out of the program
        (the text then reads `t3 = relu(t2)`, and the verifier infers it again)."""
        operands = tuple(self._operand(a) for a in args)
        out = name or next(n for n in self._names if n not in self.types)
        here = caller()
        self._define(out)
        declared = result_type
        restyled = shard is not None or mesh is not None or layout is not None or partial is not None
        if not typed and (declared is not None or restyled):
            raise InputError(f"{out}: typed=False leaves the type to inference; "
                             "result_type, shard, mesh, layout and partial declare one")
        if declared is not None and restyled:
            raise InputError(f"{out}: give result_type, or shard/mesh/layout to change the inferred type, "
                             "not both")
        if declared is not None:
            self._source_type(declared)
        if mesh is not None:
            self._known_mesh(mesh)
        if declared is None and restyled:
            base = infer(op, EqnContext(Eqn(out, None, op, operands, here), self.types))
            declared = self._restyle(base, shard, mesh, layout, partial)
        eqn = Eqn(out, declared, op, operands, here)
        if declared is not None:
            check_type(declared, here)
        t = infer(op, EqnContext(eqn, self.types))
        check_type(t, here)
        check_limits(t, f"{out}: {t}")  # every type is written out, and must parse back
        self.eqns.append(replace(eqn, type=t if typed else None))  # by default every type written out
        self.types[out] = t
        return Value(self, out, t)

    def _restyle(self, t: TensorType, shard: dict[int, ShardSpec] | None, mesh: Mesh | None,
                 layout: Sequence[int] | None, partial: PartialSpec | Literal[False] | None = None) -> TensorType:
        if shard is not None:
            bad = [d for k in shard.values() for d in dids_of(k) if d not in DIDS]  # a nest: each of its mesh axes
            if bad:
                raise InputError(f"shard names {bad[0]!r}: use DIDx, DIDy or DIDz")
            t = t.with_sharding(shard)
        if mesh is not None:
            t = replace(t, mesh=mesh)
        t = replace(t, layout=tuple(layout) if layout is not None else None)
        if partial is False or (partial is None and (shard is not None or mesh is not None)):
            return replace(t, partial=(), partial_kind="")  # a resharding of a partial value reduces it
        if partial is not None:
            t = replace(t, partial=(), partial_kind="")
            return replace(t, **dict(zip(("partial", "partial_kind"), partial_fields(partial, t.mesh))))
        return t

    def _operand(self, a: object) -> Operand:
        if isinstance(a, Value):
            if a.builder is not self:
                raise InputError(f"{a.name} belongs to another builder")
            return Var(a.name)
        if isinstance(a, Sym):
            return a
        if isinstance(a, bool) or not isinstance(a, (int, float)):
            raise InputError(f"an operand must be a Value, a number or a symbol, not {a!r}")
        if isinstance(a, float) and a != a:  # no literal prints NaN (inf and -inf do)
            raise InputError("a NaN operand has no literal; make it with div(0.0, 0.0) of a tensor")
        if isinstance(a, int) and len(str(abs(a))) > _MAX_LITERAL_DIGITS:
            raise InputError(f"the integer operand has {len(str(abs(a)))} digits; an integer literal has at "
                             f"most {_MAX_LITERAL_DIGITS}")
        return Lit(a)

    def _source_type(self, t: TensorType) -> None:
        """A type given whole: on a mesh of this builder, and of a source program."""
        self._known_mesh(t.mesh)
        check_type(t, caller())
        check_limits(t, str(t))  # the decorator says where

    def _known_mesh(self, mesh: Mesh) -> None:
        if mesh not in self.meshes:
            raise InputError(f"mesh {mesh.name!r} was not declared with this builder's mesh()")

    def _mesh(self, mesh: Mesh | None) -> Mesh:
        if mesh is not None:
            self._known_mesh(mesh)
            return mesh
        if len(self.meshes) != 1:
            raise InputError("say which mesh (mesh=...): the builder has "
                             f"{len(self.meshes) or 'no'} meshes")
        return self.meshes[0]

    def _define(self, name: str) -> None:
        if name in self.types:
            raise InputError(f"{name!r} is defined twice")

    # ---- the program ------------------------------------------------------------------

    @located
    def build(self) -> Program:
        """The Program, verified as a whole."""
        if not self.results:
            raise InputError("mark at least one result with output(...)")
        func = Func(self.func, tuple(self.params), tuple(self.eqns), tuple(self.results))
        program = Program(tuple(self.meshes), (func,), file="<built>")
        verify(program)
        return program
