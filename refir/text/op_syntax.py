"""The call syntax of each op, `name(positional, key=value)` -> an op and its operands
(op_c1, op_c2, cast_c1). An op family registers its syntax here with `@syntax("name")`,
naming the keywords it takes; the parser knows no op by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from refir.errors import Loc, VerifyError
from refir.ir import ops
from refir.ir.extents import ExtentExpr, shape_symbols
from refir.ir.program import Lit, Operand, Sym, Var
from refir.ir.types import DTYPES, RESERVED

Built = tuple[ops.Op, tuple]


@dataclass(frozen=True)
class ExtentItem:
    """An extent expression in a list (`reshape(x, [S, 4, E/4])`), with its
    symbols where the text writes them (func_c3 points there)."""

    extent: ExtentExpr
    syms: tuple[Sym, ...]


OpSyntax = Callable[[str, Loc, list[object], dict[str, object]], Built]
SYNTAX: dict[str, OpSyntax] = {}  # in the order the unknown-op message lists them
KEYWORDS: dict[str, frozenset[str]] = {}


def syntax(*names: str, keywords: tuple[str, ...] = ()) -> Callable[[OpSyntax], OpSyntax]:
    """`@syntax("permute")` on a function (name, loc, positional, keywords) -> (op, operands)."""

    def add(fn: OpSyntax) -> OpSyntax:
        for name in names:
            SYNTAX[name] = fn
            KEYWORDS[name] = frozenset(keywords)
        return fn

    return add


def build_op(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    """Turn `name(positional, key=value)` into an op and its operands (op_c1, op_c2)."""
    if name not in SYNTAX:
        raise VerifyError(loc, "op_c1", f"unknown op {name!r} (known: {', '.join(SYNTAX)})")
    extra = set(kw) - KEYWORDS[name]
    if extra:
        raise VerifyError(loc, "op_c2", f"{name} takes no argument {sorted(extra)[0]!r}")
    return SYNTAX[name](name, loc, pos, kw)


def operands(name: str, loc: Loc, values: list[object], count: int) -> tuple[Operand, ...]:
    """Exactly `count` operands, none of them a list (op_c2)."""
    if len(values) != count or any(isinstance(v, list) for v in values):
        raise VerifyError(loc, "op_c2", f"{name} takes {count} operand{'s' * (count != 1)}")
    return tuple(values)  # type: ignore[arg-type]


def int_list(name: str, loc: Loc, keywords: dict[str, object], key: str) -> tuple[int, ...]:
    """A keyword that must be a list of integers: `dims=[0, 1]` (op_c2)."""
    v = keywords.get(key)
    if not isinstance(v, list) or not all(type(x) is int for x in v):
        raise VerifyError(loc, "op_c2", f"{name} needs {key}=[...] of integers")
    return tuple(v)


# ---- today's ops, in the order the unknown-op message has always listed them ------------


@syntax(*ops.BINARY)
def _binary(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    return ops.Binary(name), operands(name, loc, pos, 2)


@syntax(*ops.UNARY)
def _unary(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    return ops.Unary(name), operands(name, loc, pos, 1)


@syntax("cast", keywords=("dtype",))
def _cast(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    dt = kw.get("dtype")
    if not isinstance(dt, Var) or dt.name not in DTYPES:
        raise VerifyError(loc, "cast_c1", f"cast needs dtype= one of {', '.join(DTYPES)}")
    return ops.Cast(dt.name), operands(name, loc, pos, 1)


@syntax("permute")
def _permute(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    if len(pos) != 2 or not isinstance(pos[1], list) or not all(type(x) is int for x in pos[1]):
        raise VerifyError(loc, "op_c2", "permute takes an operand and a list of integers: permute(x, [1, 0])")
    return ops.Permute(tuple(pos[1])), operands(name, loc, pos[:1], 1)


@syntax("unsqueeze", keywords=("dims",))
def _unsqueeze(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    return ops.Unsqueeze(int_list(name, loc, kw, "dims")), operands(name, loc, pos, 1)


@syntax(*ops.REDUCTIONS, keywords=("dims",))
def _reduction(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    return ops.Reduction(name, int_list(name, loc, kw, "dims")), operands(name, loc, pos, 1)


@syntax("matmul")
def _matmul(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    return ops.Matmul(), operands(name, loc, pos, 2)


@syntax("set")
def _set(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    return ops.Set(), operands(name, loc, pos, 1)


@syntax("expand")
def _expand(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    """`expand(x, 4, N)`: the operand, then one extent per axis (expand_c1 checks them)."""
    if len(pos) < 1 or any(isinstance(v, list) for v in pos):
        raise VerifyError(loc, "op_c2", "expand takes an operand and one extent per axis: expand(x, N, 8)")
    return ops.Expand(), tuple(pos)  # type: ignore[arg-type]


# ---- windows: slice, select, pad, cat (docs/spec.md §5.8) --------------------------------


def int_keyword(name: str, loc: Loc, keywords: dict[str, object], key: str) -> int:
    """A keyword that must be one integer: `axis=1` (op_c2)."""
    v = keywords.get(key)
    if not isinstance(v, Lit) or type(v.value) is not int:
        raise VerifyError(loc, "op_c2", f"{name} needs {key}=N, an integer")
    return v.value


@syntax("slice", keywords=("starts", "stops", "steps", "axes"))
def _slice(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    """`slice(x, starts=[..], stops=[..])`: the leading axes, as x[a:b, c:d] does;
    `axes=[..]` names others, `steps=[..]` (all 1 when left out)."""
    starts, stops = int_list(name, loc, kw, "starts"), int_list(name, loc, kw, "stops")
    steps = int_list(name, loc, kw, "steps") if "steps" in kw else (1,) * len(starts)
    axes = int_list(name, loc, kw, "axes") if "axes" in kw else tuple(range(len(starts)))
    return ops.Slice(axes, starts, stops, steps), operands(name, loc, pos, 1)


@syntax("select", keywords=("axis", "index"))
def _select(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    return ops.Select(int_keyword(name, loc, kw, "axis"), int_keyword(name, loc, kw, "index")), \
        operands(name, loc, pos, 1)


@syntax("pad", keywords=("low", "high", "value"))
def _pad(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    value = kw.get("value", Lit(0))
    if not isinstance(value, Lit):
        raise VerifyError(loc, "op_c2", "pad needs value= a number literal (0 when left out)")
    low, high = int_list(name, loc, kw, "low"), int_list(name, loc, kw, "high")
    return ops.Pad(low, high, value.value), operands(name, loc, pos, 1)


@syntax("cat", keywords=("axis",))
def _cat(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    axis = int_keyword(name, loc, kw, "axis")
    if len(pos) < 2 or any(isinstance(v, list) for v in pos):
        raise VerifyError(loc, "op_c2", "cat takes two or more operands and axis=N")
    return ops.Cat(axis), operands(name, loc, pos, len(pos))


# ---- comparisons, where and iota (docs/spec.md §5.9) ----------------------------------


@syntax(*ops.COMPARISONS)
def _compare(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    return ops.Compare(name), operands(name, loc, pos, 2)


@syntax("where")
def _where(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    return ops.Where(), operands(name, loc, pos, 3)


@syntax("iota", keywords=("axis",))
def _iota(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    axis = kw.get("axis")
    if not isinstance(axis, Lit) or not isinstance(axis.value, int) or isinstance(axis.value, bool):
        raise VerifyError(loc, "op_c2", "iota takes no operands and axis= an integer: iota(axis=0)")
    return ops.Iota(axis.value), operands(name, loc, pos, 0)


@syntax("reshape")
def _reshape(name: str, loc: Loc, pos: list[object], kw: dict[str, object]) -> Built:
    """`reshape(x, [S, h, 8])`, `reshape(x, [S, 4, E/4])`: the operands are x, then each
    distinct symbol of the shape (ops.Reshape, shape_symbols), so that its value
    reaches every backend."""
    if len(pos) != 2 or not isinstance(pos[1], list):
        raise VerifyError(loc, "op_c2", "reshape takes an operand and a list of extents: reshape(x, [4, S])")
    written: list[Sym] = [s for x in pos[1] for s in (x.syms if isinstance(x, ExtentItem) else (x,))
                          if isinstance(s, Sym)]
    for x in written:
        if x.name in RESERVED:  # reshape_c1 (before func_c3 calls it an unbound symbol)
            raise VerifyError(x.loc, "reshape_c1", f"{x.name!r} is reserved and names no extent")
    shape = tuple(x if isinstance(x, int) else x.extent if isinstance(x, ExtentItem) else x.name  # type: ignore[union-attr]
                  for x in pos[1])  # the rule checks the rest
    first: dict[str, Sym] = {}
    for x in written:
        first.setdefault(x.name, x)  # func_c3 points at a symbol's first use
    syms = tuple(first[s] for s in shape_symbols(shape))
    return ops.Reshape(shape), (*operands(name, loc, pos[:1], 1), *syms)
