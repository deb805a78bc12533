"""The verifier: type inference for every op and the spec's labelled constraints.

Each check cites its constraint (`# permute_c1`) as written in docs/spec.md, and
one of tests/test_verify_*.py holds a negative test of the same name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from refir.checks import (
    op_rules,  # noqa: F401  (registers the rules of today's ops)
    rules_expand,  # noqa: F401  (expand of b axes)
    rules_masks,  # noqa: F401  (comparisons, where, iota)
    rules_matmul,  # noqa: F401  (matmul of any ranks >= 1)
    rules_reshape,  # noqa: F401  (reshape's rules)
    rules_window,  # noqa: F401  (slice, select, pad, cat)
)
from refir.checks.inference import EqnContext
from refir.checks.rules_partial import infer
from refir.checks.rules_reshape import resolved
from refir.checks.type_checks import check_mesh, check_param_extents, check_type
from refir.errors import Loc, VerifyError
from refir.ir import ops
from refir.ir.program import Eqn, Func, Program, Sym, Var
from refir.ir.types import RESERVED, TensorType


@dataclass(frozen=True)
class Checked:
    """A verified function: the type of every value, declared or inferred."""

    program: Program
    func: Func
    types: dict[str, TensorType] = field(hash=False)
    symbols: frozenset[str]  # bound by the inputs

    def type_of(self, name: str) -> TensorType:
        return self.types[name]



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
        check_param_extents(p.name, p.type, p.loc)  # type_c10
        symbols |= p.type.symbols()
    for p in func.params:
        _define(p.name, p.loc, types, symbols)
        types[p.name] = p.type
    eqns: list[Eqn] = []
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
        ctx = EqnContext(eqn, types)
        if isinstance(eqn.op, (ops.Binary, ops.Unary)):
            want = 2 if isinstance(eqn.op, ops.Binary) else 1
            if len(eqn.args) != want:  # op_c2
                raise ctx.fail("op_c2", f"{eqn.op.name} takes {want} operand(s)")
        result = infer(eqn.op, ctx)
        check_type(result, eqn.loc)
        types[eqn.out] = result
        eqns.append(resolved(eqn, result))  # a reshape's -1 as the extent inferred (rules_reshape)
    for r in func.results:
        if r not in types:  # func_c4
            raise VerifyError(func.results_loc, "func_c4", f"result {r!r} is not defined")
    twice = [r for i, r in enumerate(func.results) if r in func.results[:i]]
    if twice:  # func_c4 (the parser refuses it first, at the name)
        raise VerifyError(func.results_loc, "func_c4", f"{twice[0]!r} is returned twice")
    if any(a is not b for a, b in zip(eqns, func.eqns)):
        func = replace(func, eqns=tuple(eqns))
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
