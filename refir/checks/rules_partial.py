"""What may consume a partial value (docs/spec.md §3.3, partial_c3..partial_c5).

A partial value `t: T partial[K@A]` is, on each team along the mesh axes A, the
K-reduction of the devices' buffers. An op may read one only where applying it
to every device's term and reducing afterwards gives the op of the reduced
value (DTensor's linearity rules): a sum plus a sum, a sum times (or divided by)
a value that is not partial, the negation of a sum, a max with a max. Every
other consumer is refused at its equation, naming the `set` that reduces the
operand first. `infer` wraps the per-op rules of refir.checks.inference with
these checks; the verifier and the builder both infer through it.
"""

from __future__ import annotations

from dataclasses import replace

from refir.checks.inference import INFER, EqnContext
from refir.checks.rules_interleaved import check_interleaved
from refir.checks.rules_matmul import promoted
from refir.ir import ops
from refir.ir.program import Var
from refir.ir.types import TensorType
from refir.text.printer import format_call

LINEAR = ("sum", "avg")  # kinds whose reduction is a (scaled) sum of the terms
NEGATED = {"sum": "sum", "avg": "avg", "max": "min", "min": "max"}  # -K(x) = NEGATED[K](-x)
MOVES = (ops.Permute, ops.Unsqueeze)  # per-element data movement: commutes with every fold
# Ops whose declared result may be partial from operands that are not: they reduce
# (a declared partial keeps what each device reduced locally), or reshard (set).
MAY_DECLARE = (ops.Reduction, ops.Matmul, ops.Set)


def reduced(t: TensorType) -> TensorType:
    """`t` with its pending reduction done: replicated over its partial mesh axes."""
    return replace(t, partial=(), partial_kind="")


def partial_text(t: TensorType) -> str:
    return f"partial[{t.partial_kind}@{','.join(t.partial)}]"


def insert_hint(name: str, t: TensorType) -> str:
    """Which reduction to insert before a refused consumer of the partial `name`."""
    how = "an allreduce, then a division by the team size" if t.partial_kind == "avg" else \
        f"an allreduce of {t.partial_kind}"
    return f"insert `set` of {name} to {reduced(t)} ({how}) first"


def infer(op: object, c: EqnContext) -> TensorType:
    """The result type of `c.eqn`: interleave_c1, the op's own rule, then partial_c3..partial_c5."""
    check_interleaved(op, c)
    partial = _consumed(op, c)
    result = INFER[type(op)](op, c)
    declared = c.eqn.type
    if isinstance(op, ops.Set):
        return _set(c, result)
    if partial is None:
        if declared is not None and declared.partial and not isinstance(op, MAY_DECLARE):  # partial_c4
            raise c.fail("partial_c4", f"{ops.op_name(op)} of values that are not partial gives no "
                         f"partial value, but the result is declared {partial_text(declared)}; make one "
                         "with set")
        return result
    kind, axes = partial
    if declared is not None and (declared.partial, declared.partial_kind) != (axes, kind):  # partial_c4
        want = partial_text(replace(result, partial=axes, partial_kind=kind))
        got = partial_text(declared) if declared.partial else "not partial"
        raise c.fail("partial_c4", f"{ops.op_name(op)} gives a value {want}, declared {got}; "
                     "reduce it with set")
    return replace(result, partial=axes, partial_kind=kind)


def _consumed(op: object, c: EqnContext) -> tuple[str, tuple[str, ...]] | None:
    """The (kind, axes) of the result when the op reads partial operands (None where none
    is), or a partial_c3 error naming the reduction to insert."""
    reads = [(a.name, t) for a, t in zip(c.eqn.args, c.args) if isinstance(a, Var) and t is not None]
    partials = [(n, t) for n, t in reads if t.partial]
    if not partials:
        return None
    name, first = partials[0]
    for other_name, t in partials[1:]:
        if (t.partial, t.partial_kind) != (first.partial, first.partial_kind):  # partial_c3
            raise c.fail("partial_c3", f"{_call(op, c)} reads {name}: {first} and {other_name}: {t}, "
                         f"partial differently; {insert_hint(other_name, t)}")
    kind, n_operands = first.partial_kind, len(c.eqn.args)
    n_partial = len(partials)
    if isinstance(op, (*MOVES, ops.Set)):
        return kind, first.partial
    why = None
    match op:
        case ops.Binary(name="add" | "sub"):
            if kind not in LINEAR:
                why = f"{op.name} of {kind}-partials is not the {kind} of their {op.name}"
            elif n_partial < n_operands:
                why = (f"{op.name} of a {kind}-partial and a value that is not partial {op.name}s that value "
                       "once per device of the team")
        case ops.Binary(name="mul"):
            if kind in LINEAR and n_partial == 1:
                return kind, first.partial
            if kind == "prod" and n_partial == n_operands == 2:
                return kind, first.partial
            why = (f"mul of two {kind}-partials is not linear" if n_partial == 2 else
                   f"a {kind}-partial times a value is not the {kind} of the terms times it")
        case ops.Binary(name="div"):
            if kind in LINEAR and n_partial == 1 and c.args[0] is not None and c.args[0].partial:
                return kind, first.partial
            why = f"div {'by' if not (c.args[0] and c.args[0].partial) else 'of'} a {kind}-partial is not linear"
        case ops.Binary(name="maximum" | "minimum"):
            if (op.name, kind) in (("maximum", "max"), ("minimum", "min")):
                return kind, first.partial
            why = f"{op.name} of a {kind}-partial is not the {kind} of the terms' {op.name}"
        case ops.Matmul() if len(c.tensors) == 2:
            a, b = c.tensors
            if kind in LINEAR and n_partial == 1 and promoted(a, b)[0][-1].shard is None:
                return kind, first.partial  # each device's term times the other operand
            why = (f"matmul of two {kind}-partials is not linear" if n_partial == 2 else
                   "a matmul whose contraction is sharded folds other terms in" if kind in LINEAR else
                   f"matmul does not commute with the pending {kind}")
        case ops.Reduction(kind=fold, dims=dims) if c.args[0] is not None:
            sharded = [d for d in dims if 0 <= d < c.args[0].rank and c.args[0].axes[d].shard]
            if (fold, kind) in (("sum", "sum"), ("sum", "avg"), ("prod", "prod"), ("max", "max"), ("min", "min")):
                if not sharded:
                    return kind, first.partial  # each device reduces its term
                why = "a reduction over a sharded axis of a partial would fold two kinds of terms"
            else:
                why = f"{fold} does not commute with the pending {kind}"
        case ops.Unary(name="neg"):
            if kind in NEGATED:
                return NEGATED[kind], first.partial
            why = f"neg of a {kind}-partial is not a {kind} of the negated terms"
        case ops.Unary():
            why = f"{op.name} is not linear"
        case ops.Compare():
            why = "a comparison of a partial compares its terms, not its value"
        case _:
            why = f"{ops.op_name(op)} does not commute with the pending {kind}"
    if why is None:
        return kind, first.partial
    raise c.fail("partial_c3", f"{_call(op, c)} reads {name}: {first}; {why}: {insert_hint(name, first)}")


def _set(c: EqnContext, result: TensorType) -> TensorType:
    """partial_c5: what a set may do to a partial value."""
    x = c.args[0]
    assert x is not None  # the set rule checked its operand
    if c.eqn.type is None:
        return replace(result, partial=x.partial, partial_kind=x.partial_kind)
    d = result
    name = c.eqn.args[0].name  # type: ignore[union-attr]
    kept = [k for k in d.partial if k in x.partial]
    if x.partial_kind == "avg" and kept and len(kept) < len(x.partial):  # partial_c5
        raise c.fail("partial_c5", f"set of {name}: {x} reduces some of its mesh axes and keeps {', '.join(kept)}: "
                     "an avg reduces over all its axes or none (what each device held would be no avg's term)")
    if not d.partial:
        return d
    if x.partial and x.partial_kind != d.partial_kind:  # partial_c5
        raise c.fail("partial_c5", f"set of {name}: {x} to {partial_text(d)} changes the pending reduction's "
                     f"kind; {insert_hint(name, x)}")
    if d.mesh != x.mesh:  # partial_c5
        raise c.fail("partial_c5", f"set of {name} to a partial value on mesh {d.mesh.name!r}: a partial "
                     f"target stays on its source's mesh ({x.mesh.name!r}); move the value first")
    new = [k for k in d.partial if k not in x.partial]
    if new and d.partial_kind == "avg":  # partial_c5
        raise c.fail("partial_c5", f"set of {name} to {partial_text(d)}: no terms of an avg fold exactly back to "
                     "a replicated value in team order (x + x + x rounds); make a sum-partial and divide "
                     "after reducing it")
    return d


def _call(op: object, c: EqnContext) -> str:
    return f"{c.eqn.out} = {format_call(op, c.eqn.args)}"
