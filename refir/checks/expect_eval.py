"""A restricted evaluator for `# expect:` expressions.

Program text is untrusted, so an expect line is never handed to `eval`. It is parsed
with Python's `ast` and walked here: numpy arithmetic and comparisons, indexing and
slicing, tuples and lists, the whitelisted numpy functions, ufunc reductions, array
methods and attributes below, the names of the function's inputs and symbols, and
`bf16` (bfloat16, as a dtype: `x.astype(bf16)`, rounded as refir rounds it).
Anything else (other names or attributes, dunders, lambdas, comprehensions,
f-strings, calls to anything not listed) is an InputError at the expect line,
found before anything is evaluated. docs/spec.md ("Expect lines") lists the same.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from refir.checks.limits import ELEMENTS
from refir.errors import InputError, Loc
from refir.ir.types import as_dtype, bf16, finfo, is_bf16, is_float

NUMPY_FUNCTIONS = frozenset({
    "abs", "absolute", "add", "all", "amax", "amin", "any", "ceil", "clip", "concatenate", "cos", "cumsum", "divide",
    "einsum", "equal", "exp", "expand_dims", "floor", "greater", "isfinite", "isinf", "isnan", "less",
    "full_like", "log", "logical_and", "logical_not", "logical_or", "matmul", "max", "maximum", "mean", "min",
    "minimum", "moveaxis", "multiply", "nan_to_num", "negative", "prod", "reshape", "round", "sign",
    "sin", "sqrt", "square", "squeeze", "subtract", "sum", "swapaxes", "tanh", "transpose", "trunc",
    "where", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
    "greater_equal", "less_equal", "not_equal", "tril", "triu", "ones_like", "zeros_like",  # masks
})
# `np.<ufunc>.reduce(x, axis)`
UFUNC_REDUCTIONS = frozenset({
    "add", "multiply", "maximum", "minimum", "logical_and", "logical_or", "bitwise_and", "bitwise_or",
    "bitwise_xor",
})
NUMPY_DTYPES = frozenset({
    "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
    "float32", "float64",
})
NUMPY_CONSTANTS = frozenset({"nan", "inf", "pi", "e"})
DTYPE_NAMES = frozenset({"bf16"})  # refir's dtypes numpy has no name for, as bare names
ARRAY_METHODS = frozenset({
    "all", "any", "astype", "clip", "copy", "cumsum", "max", "mean", "min", "prod", "reshape", "round",
    "squeeze", "sum", "swapaxes", "transpose",
})
ARRAY_ATTRIBUTES = frozenset({"T", "shape", "ndim", "size", "dtype"})

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.MatMult: operator.matmul, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
    ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
_MAX_DEPTH = 100  # nested sub-expressions
_MAX_INT_BITS = 4096  # Python integers the expression itself computes


class _Np:
    """The name `np`: only whitelisted attributes resolve."""


class _Ufunc:
    def __init__(self, name: str) -> None:
        self.name = name


def parse_expr(expr: str, names: frozenset[str], loc: Loc) -> ast.Expression:
    """Parse and check `expr` against the whitelist; InputError at `loc` otherwise."""
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise _refuse(loc, f"not an expression: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise _refuse(loc, "too deeply nested to parse") from None
    except ValueError as exc:  # e.g. an integer literal of thousands of digits
        raise _refuse(loc, f"cannot parse: {exc}") from None
    _Checker(names, loc).check(tree.body, 0)
    return tree


def evaluate(expr: str, scope: Mapping[str, Any], loc: Loc) -> Any:
    """The value of a whitelisted expression over `scope` (inputs and symbols)."""
    return evaluate_rounded(expr, scope, loc)[0]


def evaluate_rounded(expr: str, scope: Mapping[str, Any], loc: Loc) -> tuple[Any, np.dtype | None]:
    """The value, and the least precise float dtype of any value the expression
    computed (an operator's, a call's; not an input's or a constant's): the
    precision its arithmetic ran in, None where it computed no float."""
    tree = parse_expr(expr, frozenset(scope), loc)
    evaluator = _Evaluator(scope, loc)
    with np.errstate(all="ignore"):
        value = evaluator.eval(tree.body)
    floats = [d for d in evaluator.computed if is_float(d)]
    return value, min(floats, key=lambda d: finfo(d).nmant) if floats else None


def _refuse(loc: Loc, message: str) -> InputError:
    return InputError(f"{loc.show()}\nexpect line: {message}")


class _Checker:
    """The static half: only whitelisted syntax, names and attributes."""

    def __init__(self, names: frozenset[str], loc: Loc) -> None:
        self.names = names
        self.loc = loc

    def fail(self, node: ast.AST, what: str) -> InputError:
        return _refuse(self.loc, f"{what} is not allowed (see docs/spec.md, 'Expect lines')"
                       + (f": {ast.unparse(node)[:60]!r}" if isinstance(node, ast.expr) else ""))

    def check(self, node: ast.AST, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise _refuse(self.loc, f"more than {_MAX_DEPTH} nested sub-expressions")
        match node:
            case ast.Constant(value=v):
                if not (v is None or v is Ellipsis or isinstance(v, (bool, int, float, str))):
                    raise self.fail(node, f"a {type(v).__name__} constant")
                return
            case ast.Name(id=name):
                if name != "np" and name not in self.names and name not in DTYPE_NAMES:
                    raise self.fail(node, f"the name {name!r} (neither an input, a symbol, np nor bf16)")
                return
            case ast.Attribute():
                self.attribute(node, depth)
                return
            case ast.Call():
                self.call(node, depth)
                return
            case ast.BinOp(op=op) if type(op) in _BINARY:
                children: list[ast.AST] = [node.left, node.right]
            case ast.UnaryOp(op=op) if type(op) in _UNARY:
                children = [node.operand]
            case ast.Compare(ops=ops) if all(type(o) in _COMPARE for o in ops):
                children = [node.left, *node.comparators]
            case ast.Subscript():
                children = [node.value, node.slice]
            case ast.Slice():
                children = [x for x in (node.lower, node.upper, node.step) if x is not None]
            case ast.Tuple() | ast.List():
                children = list(node.elts)
            case _:
                raise self.fail(node, f"{type(node).__name__}")
        for c in children:
            self.check(c, depth + 1)

    def attribute(self, node: ast.Attribute, depth: int) -> None:
        base = node.value
        if isinstance(base, ast.Name) and base.id == "np":
            if node.attr not in NUMPY_FUNCTIONS | NUMPY_DTYPES | NUMPY_CONSTANTS | {"load"}:
                raise self.fail(node, f"np.{node.attr}")
            return
        if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id == "np":
            if base.attr not in UFUNC_REDUCTIONS or node.attr != "reduce":
                raise self.fail(node, f"np.{base.attr}.{node.attr}")
            return
        if node.attr not in ARRAY_METHODS | ARRAY_ATTRIBUTES:
            raise self.fail(node, f"the attribute .{node.attr}")
        self.check(base, depth + 1)

    def call(self, node: ast.Call, depth: int) -> None:
        if not isinstance(node.func, ast.Attribute):
            raise self.fail(node, "a call of anything but a whitelisted numpy function or array method")
        self.attribute(node.func, depth)
        if isinstance(node.func.value, ast.Name) and node.func.attr in NUMPY_CONSTANTS:
            raise self.fail(node, f"calling np.{node.func.attr}")
        if node.func.attr in ARRAY_ATTRIBUTES - ARRAY_METHODS:
            raise self.fail(node, f"calling .{node.func.attr}")
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise self.fail(a, "*arguments")
            self.check(a, depth + 1)
        for k in node.keywords:
            if k.arg is None or k.arg.startswith("_"):
                raise self.fail(node, "**arguments or private keywords")
            self.check(k.value, depth + 1)


class _Evaluator:
    """The dynamic half: evaluates a checked tree, refusing results over the limits."""

    def __init__(self, scope: Mapping[str, Any], loc: Loc) -> None:
        self.scope = scope
        self.loc = loc
        self.computed: list[np.dtype] = []  # the dtype of every value an operator or a call made

    def eval(self, node: ast.AST) -> Any:
        value = self._eval(node)
        if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Call)) and isinstance(value, (np.ndarray, np.generic)):
            self.computed.append(value.dtype)
        return value

    def _eval(self, node: ast.AST) -> Any:
        match node:
            case ast.Constant(value=v):
                return v
            case ast.Name(id=name):
                if name in self.scope:
                    return self.scope[name]
                return _Np() if name == "np" else bf16()
            case ast.Attribute():
                return self.attribute(node)
            case ast.Call():
                return self.call(node)
            case ast.BinOp():
                a, b = self.eval(node.left), self.eval(node.right)
                self.guard_operands(type(node.op), a, b)
                return _BINARY[type(node.op)](a, b)
            case ast.UnaryOp():
                return _UNARY[type(node.op)](self.eval(node.operand))
            case ast.Compare():
                left, out = self.eval(node.left), None
                for op, right_node in zip(node.ops, node.comparators):
                    right = self.eval(right_node)
                    self.guard_operands(ast.Eq, left, right)
                    step = _COMPARE[type(op)](left, right)
                    out = step if out is None else out & step
                    left = right
                return out
            case ast.Subscript():
                return self.eval(node.value)[self.eval(node.slice)]
            case ast.Slice():
                return slice(*(None if x is None else self.eval(x) for x in (node.lower, node.upper, node.step)))
            case ast.Tuple():
                return tuple(self.eval(x) for x in node.elts)
            case ast.List():
                return [self.eval(x) for x in node.elts]
        raise AssertionError(f"unchecked node {type(node).__name__}")  # the checker refuses every other node

    def attribute(self, node: ast.Attribute) -> Any:
        base = node.value
        if isinstance(base, ast.Name) and base.id == "np":
            return _Ufunc(node.attr) if node.attr in UFUNC_REDUCTIONS else getattr(np, node.attr)
        if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id == "np":
            return getattr(np, base.attr).reduce
        value = self.eval(base)
        if not isinstance(value, (np.ndarray, np.generic)):
            raise _refuse(self.loc, f".{node.attr} of a {type(value).__name__}: only arrays have attributes")
        return getattr(value, node.attr)

    def call(self, node: ast.Call) -> Any:
        f = node.func
        assert isinstance(f, ast.Attribute)
        args = [self.eval(a) for a in node.args]
        kwargs = {k.arg: self.eval(k.value) for k in node.keywords if k.arg is not None}
        for key, value in [*(("astype", a) for a in args if f.attr == "astype"), *kwargs.items()]:
            if key in ("dtype", "astype") and value is not None and not _is_dtype(value):
                raise _refuse(self.loc, f"{key} must be a numpy dtype such as np.int32, not {value!r}")
        arrays = [a for a in [*args, *kwargs.values()] if isinstance(a, np.ndarray)]
        self.guard_shapes([a.shape for a in arrays])
        if isinstance(f.value, ast.Name) and f.value.id == "np" and f.attr == "load":
            return self.load(args, kwargs)
        if isinstance(f.value, ast.Name) and f.value.id == "np" and f.attr == "einsum":
            self.guard_einsum(args)
        target = self.attribute(f)
        if isinstance(target, _Ufunc):
            target = getattr(np, target.name)
        if f.attr == "astype" and len(args) == 1 and not kwargs and _is_bf16(args[0]):
            return as_dtype(target.__self__, bf16())  # through float32, as refir rounds a bf16
        return target(*args, **kwargs)

    def load(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """`np.load('results.npz')`: an .npz read with refir's checked reader."""
        from refir.running.inputs import read_npz

        if len(args) != 1 or kwargs or not isinstance(args[0], str) or not args[0].endswith(".npz"):
            raise _refuse(self.loc, "np.load takes one path ending in .npz")
        return read_npz(Path(args[0]))

    def guard_operands(self, op: type, a: Any, b: Any) -> None:
        if isinstance(a, (str, list, tuple)) or isinstance(b, (str, list, tuple)):
            if op is not ast.Eq:
                raise _refuse(self.loc, "arithmetic on strings, lists or tuples is not allowed")
        if type(a) is int and type(b) is int:
            bits_a, bits_b = a.bit_length(), b.bit_length()
            too_big = (op is ast.Pow and abs(a) > 1 and b > 0 and bits_a * b > _MAX_INT_BITS
                       or op is ast.LShift and b > _MAX_INT_BITS or op is ast.Mult and bits_a + bits_b > _MAX_INT_BITS)
            if too_big:
                raise _refuse(self.loc, f"an integer of more than {_MAX_INT_BITS} bits")
        self.guard_shapes([np.shape(x) for x in (a, b) if isinstance(x, (np.ndarray, np.generic))])

    def guard_shapes(self, shapes: list[tuple[int, ...]]) -> None:
        if len(shapes) < 2:
            return
        try:
            shape = np.broadcast_shapes(*shapes)
        except ValueError:
            return  # numpy itself reports the mismatch
        ELEMENTS.check(prod(shape), f"{self.loc}: an expect line's intermediate of shape {shape} has")

    def guard_einsum(self, args: list[Any]) -> None:
        if not args or not isinstance(args[0], str) or "->" not in args[0]:
            raise _refuse(self.loc, "np.einsum needs explicit subscripts 'ij,jk->ik'")
        ins, out = args[0].replace(" ", "").split("->", 1)
        extent: dict[str, int] = {}
        for subs, x in zip(ins.split(","), args[1:]):
            for letter, n in zip(subs, np.shape(x)):
                extent[letter] = n
        ELEMENTS.check(prod(extent.get(c, 1) for c in out), f"{self.loc}: np.einsum's result has")


def _is_dtype(value: object) -> bool:
    return _is_bf16(value) or any(value is getattr(np, name) for name in NUMPY_DTYPES) or (
        isinstance(value, np.dtype) and value in {np.dtype(getattr(np, n)) for n in NUMPY_DTYPES})


def _is_bf16(value: object) -> bool:
    return isinstance(value, np.dtype) and is_bf16(value)
