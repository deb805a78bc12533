"""Type rules of `reshape` (docs/spec.md §5.10): numpy's C-order reshape, local on every
device where each device's block of the operand is exactly its block of the result.

The operand's and the result's axes fall into **groups**: runs whose products
agree (an axis split into several, several merged into one, or an axis kept).
Products are compared as monomials (a coefficient times symbols), so that
`[S, E]` -> `[S, h, d]` groups S with S and E with h, d; where the extents
cannot be told apart statically the rest is one group, and its element count is
checked once the symbols are bound (`check_bound`, called before any run).
Monomials are rational (refir.ir.extents.Monomial), so an extent expression is
a product like any other: `[S, E]` -> `[S, 4, E/4]` has E*S elements on both
sides, which the verifier proves where an expression is involved (reshape_c7).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import product
from math import prod
from typing import TYPE_CHECKING

from refir.checks.inference import EqnContext, keep_sharding, rule, unary_operand
from refir.errors import InputError
from refir.ir import ops
from refir.ir.extents import ExtentExpr, Monomial, NotAnExtent, NotDivisible, shape_symbols, symbols_of
from refir.ir.program import Eqn, Sym
from refir.ir.types import RESERVED, Axis, Bindings, Extent, TensorType, extent_value, nested_block, shard_text

if TYPE_CHECKING:
    from refir.checks.verifier import Checked

@dataclass(frozen=True)
class Group:
    src: tuple[int, ...]  # operand axes, outermost first
    dst: tuple[int, ...]  # result axes


def _mono(extents: list[Extent]) -> Monomial:
    return Monomial.of(extents)


def _divides(a: Monomial, b: Monomial) -> bool:
    return a.divides(b)


def extents_of(t: TensorType) -> list[Extent]:
    return [1 if a.broadcast else a.extent for a in t.axes]


def groups(x: TensorType, shape: tuple[Extent, ...]) -> list[Group]:
    """The groups of a reshape of `x` to `shape`. An unsharded operand axis of
    static extent 1 (or `b`) and a result axis of extent 1 are groups of their own,
    so that dropping or adding one never puts a sharded axis inside a group."""
    xs, ts = extents_of(x), list(shape)
    i = j = 0
    out: list[Group] = []
    while i < len(xs) or j < len(ts):
        if i < len(xs) and xs[i] == 1 and not x.axes[i].shard:
            out.append(Group((i,), ()))
            i += 1
            continue
        if j < len(ts) and ts[j] == 1:
            out.append(Group((), (j,)))
            j += 1
            continue
        if i == len(xs) or j == len(ts):
            out.append(Group(tuple(range(i, len(xs))), tuple(range(j, len(ts)))))
            break
        gi, gj = [i], [j]
        i, j = i + 1, j + 1
        while _mono([xs[k] for k in gi]) != _mono([ts[k] for k in gj]):
            a, b = _mono([xs[k] for k in gi]), _mono([ts[k] for k in gj])
            if _divides(a, b) and i < len(xs):
                gi.append(i)
                i += 1
            elif _divides(b, a) and j < len(ts):
                gj.append(j)
                j += 1
            else:  # not comparable before the symbols are bound: the rest is one group
                gi += range(i, len(xs))
                gj += range(j, len(ts))
                i, j = len(xs), len(ts)
                break
        out.append(Group(tuple(gi), tuple(gj)))
    return out


def _replicated_hint(name: str, x: TensorType, axis: int) -> str:
    whole = x.with_sharding({k: v for k, v in x.sharding().items() if k != axis})
    return f"set {name} to replicated on axis {axis} first: `{name}_whole: {whole} = set({name})`"


INFERRED = -1  # numpy's inferred extent (reshape_c5, reshape_c6, reshape_c8)


def check_shape(shape: tuple[Extent, ...], c: EqnContext) -> None:
    for e in shape:
        no_extent = isinstance(e, bool) or not isinstance(e, (int, str, ExtentExpr))
        if no_extent or isinstance(e, int) and e < INFERRED:  # reshape_c1
            raise c.fail("reshape_c1", f"reshape extent {e!r} is no extent: every extent is a non-negative "
                         "integer, a symbol, an expression such as E/4, or -1 (numpy's inferred extent)")
        reserved = [s for s in symbols_of(e) if s in RESERVED]
        if reserved:  # reshape_c1
            raise c.fail("reshape_c1", f"{reserved[0]!r} is reserved and names no extent")
    if list(shape).count(INFERRED) > 1:  # reshape_c5
        raise c.fail("reshape_c5", f"reshape into [{', '.join(map(str, shape))}]: at most one extent is -1 "
                     "(two cannot both be inferred)")
    syms = shape_symbols(shape)
    if tuple(a.name if isinstance(a, Sym) else a for a in c.eqn.args[1:]) != syms:  # op_c2
        raise c.fail("op_c2", f"reshape's operands are its tensor, then the symbols of its shape ({', '.join(syms)})")


def inferred_shape(x: TensorType, shape: tuple[Extent, ...], c: EqnContext) -> tuple[Extent, ...]:
    """`shape` with its -1 (if any) replaced by the operand's element count divided by
    the product of the other extents, exactly, as monomials: an integer, a symbol or an
    extent expression (`[B, S, E] -> [B, S, h, -1]` is `[B, S, h, E/h]`), whose division
    type_c9 checks once the symbols are bound (reshape_c6, reshape_c8)."""
    if INFERRED not in shape:
        return shape
    at = shape.index(INFERRED)
    mx, mk = _mono(extents_of(x)), _mono([e for e in shape if e != INFERRED])
    given = f"reshape of [{', '.join(map(str, extents_of(x)))}] into [{', '.join(map(str, shape))}]"
    if mk.coef == 0:  # reshape_c6
        raise c.fail("reshape_c6", f"{given}: the other extents have 0 elements, so -1 stands for no extent")
    q = mx / mk
    try:
        extent = q.as_extent()
    except NotAnExtent:  # reshape_c6: a fraction of no symbols, 6/4, is no extent whatever the bindings
        raise c.fail("reshape_c6", f"{given}: the other extents ({mk} elements) do not divide the "
                     f"operand's {mx}, so -1 stands for no extent") from None
    if extent is None:  # reshape_c8: an extent for some bindings, but no expression of §3 writes it
        raise c.fail("reshape_c8", f"{given}: -1 would be {q}, which no extent expression writes (a product "
                     "over at most one integer or one symbol); write the shape with a symbol an input binds")
    return (*shape[:at], extent, *shape[at + 1:])


def inferred_note(checked: Checked, out: str) -> str:
    """What a reshape's -1 stood for, for `refir explain` (`-1 is E/h: the operand's
    B*E*S elements over the other extents' B*S*h`); "" where `out` was written out."""
    func = next(f for f in checked.program.funcs if f.name == checked.func.name)
    eqn = next((e for e in func.eqns if e.out == out), None)
    if eqn is None or not isinstance(eqn.op, ops.Reshape) or INFERRED not in eqn.op.shape:
        return ""
    at = eqn.op.shape.index(INFERRED)
    x, y = checked.types[eqn.tensor_args()[0]], checked.types[out]
    others = _mono([e for e in eqn.op.shape if e != INFERRED])
    return (f"-1 (axis {at}) is {extents_of(y)[at]}: the operand's {_mono(extents_of(x))} elements over the "
            f"other extents' {others}" + (", divided exactly once the symbols are bound (type_c9)"
                                          if isinstance(extents_of(y)[at], ExtentExpr) else ""))


def resolved(eqn: Eqn, result: TensorType) -> Eqn:
    """A reshape with its -1 replaced by the extent inferred (`result`'s), its
    operands the tensor and the symbols of that shape: what lowering and every
    backend are handed (Checked.func), so that none of them infers anything."""
    if not isinstance(eqn.op, ops.Reshape) or INFERRED not in eqn.op.shape:
        return eqn
    shape = tuple(1 if a.broadcast else a.extent for a in result.axes)
    syms = tuple(Sym(e, eqn.loc) for e in shape_symbols(shape))
    return replace(eqn, op=ops.Reshape(shape), args=(eqn.args[0], *syms))


def infer(x: TensorType, shape: tuple[Extent, ...], c: EqnContext) -> TensorType:
    check_shape(shape, c)
    shape = inferred_shape(x, shape, c)
    name = c.eqn.args[0].name  # type: ignore[union-attr]
    xs = extents_of(x)
    mx, mt = _mono(xs), _mono(list(shape))
    given = (f"reshape of [{', '.join(map(str, xs))}] ({mx} elements) into [{', '.join(map(str, shape))}] "
             f"({mt} elements)")
    if mx.powers == mt.powers and mx.coef != mt.coef:  # reshape_c2
        raise c.fail("reshape_c2", given)
    if mx != mt and any(isinstance(e, ExtentExpr) for e in (*xs, *shape)):  # reshape_c7
        raise c.fail("reshape_c7", f"{given}: with an extent expression the element counts must be equal as "
                     "products of the symbols, which these are not")
    sharding: dict[int, str | tuple[str, ...]] = {}
    for g in groups(x, shape):
        inside = [k for k in g.src if x.axes[k].shard]
        if not inside:
            continue
        if inside[0] != g.src[0] or len(inside) > 1 or not g.dst:  # reshape_c3
            k = inside[-1] if inside[0] == g.src[0] and len(inside) > 1 else inside[0]
            what = "merges" if len(g.src) > 1 else "splits"
            where = ("is dropped by this reshape" if not g.dst else f"is not the outermost of the axes "
                     f"{list(g.src)} that this reshape {what} into result axes {list(g.dst)}")
            raise c.fail("reshape_c3", f"axis {k} ({x.axes[k]}) {where}, so devices' blocks are not whole rows "
                         f"of the result; {_replicated_hint(name, x, k)}")
        sharding[g.dst[0]] = x.axes[g.src[0]].shard  # type: ignore[assignment]
        problem = block_problem(x, shape, g, {})
        if problem:  # reshape_c4
            raise c.fail("reshape_c4", f"{problem}; {_replicated_hint(name, x, g.src[0])}")
    axes = tuple(Axis(e, sharding.get(i)) for i, e in enumerate(shape))
    return keep_sharding(TensorType(x.dtype, axes, x.mesh), c)


def block_problem(x: TensorType, shape: tuple[Extent, ...], g: Group, bindings: Bindings) -> str:
    """Why the blocks of group `g` (its operand's outer axis sharded) are not whole
    blocks of its result's outer axis, or "" (also where a symbol is not yet bound).
    Device k's block is the element range [k*c*R, ...) of the group on both sides,
    c the block length of the outer axis and R the product of the others."""
    try:
        xo, *xr = [extent_value(e, bindings) for e in (extents_of(x)[k] for k in g.src)]
        to, *tr = [extent_value(shape[k], bindings) for k in g.dst]
    except KeyError:
        return ""
    a = x.axes[g.src[0]]
    if a.nested:
        return _nest_problem(x, a, g, (xo, prod(xr)), (to, prod(tr)))
    n = x.mesh.size(a.shard)  # type: ignore[arg-type]
    rows_x, rows_t = -(-xo // n) * prod(xr), -(-to // n) * prod(tr)
    if xo * prod(xr) == 0 or rows_x == rows_t:
        return ""
    return (f"a device's block of axis {g.src[0]} ({xo} over {n}: {-(-xo // n)} rows of {prod(xr)}) is "
            f"{rows_x} elements, its block of result axis {g.dst[0]} ({to} over {n}: {-(-to // n)} rows of "
            f"{prod(tr)}) {rows_t}: the blocks do not split exactly")


def _nest_problem(x: TensorType, a: Axis, g: Group, xs: tuple[int, int], ts: tuple[int, int]) -> str:
    """block_problem for an axis cut over a nest: every block's element range
    (blocks.nested_block, rows of R) the same on both sides, block by block."""
    parts = tuple(x.mesh.size(d) for d in a.dids)
    for ks in product(*(range(n) for n in parts)):
        (x0, x1), (t0, t1) = nested_block(xs[0], parts, ks), nested_block(ts[0], parts, ks)
        if (x0 * xs[1], x1 * xs[1]) != (t0 * ts[1], t1 * ts[1]):
            return (f"block {list(ks)} of axis {g.src[0]} ({xs[0]} over the nest {shard_text(a.shard)}: rows "
                    f"{x0}:{x1} of {xs[1]}) is not block {list(ks)} of result axis {g.dst[0]} ({ts[0]}: rows "
                    f"{t0}:{t1} of {ts[1]}): the blocks do not split exactly")
    return ""


@rule(ops.Reshape)
def _reshape(op: ops.Reshape, c: EqnContext) -> TensorType:
    return infer(unary_operand(c), op.shape, c)


def check_bound(checked: Checked, bindings: Bindings) -> None:
    """What the verifier could not check before the symbols were bound: every
    reshape's element count (reshape_c2) and its blocks (reshape_c4). An InputError,
    found alike on every rank before anything runs. Its callers check the extent
    expressions first (check_quotients, type_c9), before any shape is worked out."""
    from refir.text.equation_context import describe_eqn  # the text layer imports the checks

    for e in checked.func.eqns:
        if not isinstance(e.op, ops.Reshape):
            continue
        x = checked.types[e.tensor_args()[0]]
        have = prod(extent_value(a, bindings) for a in extents_of(x))
        want = prod(extent_value(a, bindings) for a in e.op.shape)
        bound = ", ".join(f"{s}={bindings[s]}" for s in sorted(x.symbols() | set(shape_symbols(e.op.shape))))
        if have != want:  # reshape_c2
            raise InputError(describe_eqn(checked, e, f"the inputs bind {bound}: reshape of {have} elements "
                                          f"into {want} [reshape_c2]"))
        for g in groups(x, e.op.shape):
            if g.src and x.axes[g.src[0]].shard:
                problem = block_problem(x, e.op.shape, g, bindings)
                if problem:  # reshape_c4
                    raise InputError(describe_eqn(checked, e, f"the inputs bind {bound}: {problem} "
                                                  "[reshape_c4]"))


def check_quotients(checked: Checked, bindings: Bindings) -> None:
    """type_c9: every extent expression of a value's type or a reshape's shape divides
    exactly under `bindings`; else a one-line InputError naming the equation and
    the symbols' values (`E=10, h=4: E/h is no extent`)."""
    for e in checked.func.eqns:
        shape = e.op.shape if isinstance(e.op, ops.Reshape) else ()
        for extent in (*shape, *(a.extent for a in checked.types[e.out].axes)):
            if isinstance(extent, ExtentExpr):
                try:
                    extent_value(extent, bindings)
                except NotDivisible as err:
                    raise NotDivisible(f"{e.loc}: in {e.out}: {err}") from None


__all__ = ["Group", "block_problem", "check_bound", "check_quotients", "groups", "infer", "inferred_note",
           "inferred_shape", "resolved"]
