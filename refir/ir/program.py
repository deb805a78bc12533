"""Programs: meshes, functions of SSA equations, and `# expect:` lines."""

from __future__ import annotations

from dataclasses import dataclass, field

from refir.errors import NOWHERE, Loc
from refir.ir.ops import Op
from refir.ir.types import Mesh, TensorType


@dataclass(frozen=True)
class Var:
    name: str
    loc: Loc = field(default=NOWHERE, compare=False)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Sym:
    """A symbolic extent used as a scalar value (`add(rs, D)`)."""

    name: str
    loc: Loc = field(default=NOWHERE, compare=False)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Lit:
    value: int | float

    def __str__(self) -> str:
        return repr(self.value)


Operand = Var | Sym | Lit


@dataclass(frozen=True)
class Eqn:
    """`out: type = op(args)`; `type` is None where the text leaves it out."""

    out: str
    type: TensorType | None
    op: Op
    args: tuple[Operand, ...]
    loc: Loc = field(default=NOWHERE, compare=False)

    def tensor_args(self) -> list[str]:
        return [a.name for a in self.args if isinstance(a, Var)]


@dataclass(frozen=True)
class Param:
    name: str
    type: TensorType
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Func:
    name: str
    params: tuple[Param, ...]
    eqns: tuple[Eqn, ...]
    results: tuple[str, ...]
    loc: Loc = field(default=NOWHERE, compare=False)
    results_loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Expect:
    """`# expect: name = numpy expression over the global inputs`."""

    name: str
    expr: str
    loc: Loc = field(default=NOWHERE, compare=False)


@dataclass(frozen=True)
class Program:
    meshes: tuple[Mesh, ...]
    funcs: tuple[Func, ...]
    expects: tuple[Expect, ...] = ()
    file: str = field(default="<text>", compare=False)

    def func(self, name: str | None = None) -> Func:
        """The named function, or `main`, or the only one."""
        from refir.errors import InputError

        if name is None:
            if len(self.funcs) == 1:
                return self.funcs[0]
            name = "main"
        for f in self.funcs:
            if f.name == name:
                return f
        known = ", ".join(f.name for f in self.funcs)
        raise InputError(f"{self.file}: no function named {name!r} (functions: {known})")
