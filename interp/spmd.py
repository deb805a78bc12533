"""The per-device interpreter of a lowered program.

Segment by segment, each starting from its own inputs only: the tensors it
reads and the symbols it takes as scalars. Symbols are re-bound inside a
segment from the shapes of the buffers each step reads (worked out once per
step, device and operand shapes: `step_facts`). The loop is shared by every backend:
`Local` computes one local step on one device, a Transport moves data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from interp.expand import local_extents
from interp.impls import compute, reshape_into
from interp.liveness import drops
from interp.masks import iota_block, value_dtype
from interp.partition import partition_block
from interp.transport import Transport, own_buffer
from refir.errors import RefirError, RunError
from refir.ir import ops
from refir.ir.blocks import inner_runs
from refir.ir.program import Lit, Sym, Var
from refir.ir.program_cache import Memo
from refir.ir.types import (
    SHARD_C1,
    SHARD_C2,
    Bindings,
    Runs,
    TensorType,
    as_dtype,
    dense_strides,
    entries_of,
    inner_block,
    local_shape,
    materialize,
    resolved,
    shape_symbols,
)
from refir.lowering.lower import Lowered, Step
from refir.running.bindings import bind_local
from refir.text.equation_context import describe_eqn

Buffers = dict[int, Any]  # device -> local buffer


class Local(Protocol):
    """How one backend runs a local step on one device."""

    def __call__(self, step: Step, device: int, args: list[Any]) -> Any: ...


def operand_values(step: Step, device: int, env: dict[str, Buffers], types: dict[str, TensorType],
                   scalars: Bindings) -> tuple[list[Any], dict[str, int]]:
    """The step's operands on `device`, and the symbols they bind: the segment's
    carried extents first, then the unsharded axes of its tensor operands."""
    bindings: dict[str, int] = dict(scalars)
    for a in step.args:
        if isinstance(a, Var):
            bind_local(types[a.name], tuple(env[a.name][device].shape), bindings)
    values: list[Any] = []
    for a in step.args:
        if isinstance(a, Var):
            values.append(env[a.name][device])
        elif isinstance(a, Sym):
            values.append(bindings[a.name] if a.name in bindings else scalars[a.name])
        elif isinstance(a, Lit):
            values.append(a.value)
    return values, bindings


def execute(lowered: Lowered, inputs: dict[str, Buffers], scalars: Bindings, local: Local,
            transport: Transport, keep: dict[str, Buffers] | None = None) -> dict[str, Buffers]:
    """Run every segment; return the results' buffers on the hosted devices.
    With `keep`, every input's and every step's buffers are also put there."""
    env: dict[str, Buffers] = dict(inputs)
    if keep is not None:
        keep.update(inputs)
    del inputs  # buffers are forgotten after their last reader (interp/liveness.py): hold none here
    hosted = transport.hosted
    plan = drops(lowered)
    for s, seg in enumerate(lowered.segments):
        scope: dict[str, Buffers] = {name: env[name] for name in seg.inputs}
        for name in plan.taken[s]:
            del env[name]
        for name in plan.before[s]:
            del scope[name]
        missing = [sym for sym in seg.symbols if sym not in scalars]
        if missing:  # never guessed from a local block
            raise RunError(f"segment {seg.index} needs symbol {missing[0]}, a global extent or value, "
                           f"and it was not handed in [{SHARD_C2}]")
        known = {s: scalars[s] for s in seg.symbols}
        known_key = tuple(known.items())
        for step, dropped in zip(seg.steps, plan.after_step[s]):
            try:
                if step.is_communication:
                    (src,) = step.tensor_args()
                    # Block sizes come from global extents, never from local buffers.
                    scope[step.out] = transport.communicate(step.op, *_ends(lowered, step, known), scope[src])
                    if keep is not None:
                        keep[step.out] = scope[step.out]
                    for name in dropped:
                        del scope[name]
                    continue
                out: Buffers = {}
                for d in devices_of(step, hosted):
                    fill, want = step_facts(lowered, step, d, scope, known, known_key)
                    out[d] = local(step, d, [scope[x][d] if var else x for var, x in fill])
                    if tuple(out[d].shape) != want:
                        raise RunError(f"the result has local shape {tuple(out[d].shape)}, "
                                       f"its type {step.type} gives {want} on device {d} [{SHARD_C1}]")
                scope[step.out] = out
                if keep is not None:
                    keep[step.out] = out
                out = None  # hold no operand past its last reader
                for name in dropped:
                    del scope[name]
            except Exception as exc:  # named after the equation it came from
                if getattr(exc, "heard", False):  # another rank's failure (refir.world.rank_failures): its words
                    raise
                rank = hosted[0] if len(hosted) == 1 else None
                kind = "" if isinstance(exc, RefirError) else type(exc).__name__
                raise RunError(describe_eqn(lowered.checked, step.eqn, _what(step, exc, kind), rank)) from exc
        for name in seg.outputs:
            if name not in plan.unkept[s]:
                env[name] = scope[name]
        del scope
    return {r: env[lowered.source(r)] for r in lowered.results}


_RESOLVED: Memo[tuple[TensorType, TensorType]] = Memo(256)

Fill = tuple[tuple[bool, Any], ...]  # per operand: (True, tensor name) or (False, its value)


def step_facts(lowered: Lowered, step: Step, device: int, scope: dict[str, Buffers], known: dict[str, int],
               known_key: tuple) -> tuple[Fill, tuple[int, ...]]:
    """How to fill the step's operands on `device`, and its result's local
    shape: operand_values and local_shape, worked out once per step, device,
    segment symbols and operand shapes (a pure function of them), so a
    program run again on inputs of the same shapes does not bind its
    symbols afresh at every step. (A plain dict per program rather than a
    refir.ir.program_cache.Memo: asked at every step of every run, the Memo's
    bookkeeping cost ~10% of a small spmd run.)"""
    kept = _FACTS.get(id(lowered))
    if kept is None or kept[0] is not lowered:
        if len(_FACTS) >= 16:
            _FACTS.pop(next(iter(_FACTS)))
        kept = _FACTS[id(lowered)] = (lowered, {})
    facts = kept[1]
    key = (step.out, device, known_key, tuple(tuple(scope[n][device].shape) for n in tensor_names(step)))
    got = facts.get(key)
    if got is None:
        if len(facts) >= FACTS_KEPT:  # a program run on ever new shapes: start again
            facts.clear()
        args, bound = operand_values(step, device, scope, lowered.types, known)
        fill = tuple((True, a.name) if isinstance(a, Var) else (False, v) for a, v in zip(step.args, args))
        got = facts[key] = (fill, local_shape(step.type, bound, device))
    return got


FACTS_KEPT = 4096  # per program
_FACTS: dict[int, tuple[Lowered, dict[tuple, tuple[Fill, tuple[int, ...]]]]] = {}


def tensor_names(step: Step) -> tuple[str, ...]:
    """step.tensor_args(), made once per step (by hand rather than
    refir.ir.program_cache.by_identity, whose generic key costs ~5% of a small spmd run)."""
    got = _NAMES.get(id(step))
    if got is None or got[0] is not step:
        if len(_NAMES) >= 4096:
            _NAMES.clear()
        got = _NAMES[id(step)] = (step, tuple(step.tensor_args()))
    return got[1]


_NAMES: dict[int, tuple[Step, tuple[str, ...]]] = {}


def devices_of(step: Step, hosted: tuple[int, ...]) -> tuple[int, ...]:
    """The hosted devices of the step's mesh, in hosted order (once per step and hosting)."""
    key = (id(step), hosted)
    got = _DEVICES.get(key)
    if got is None or got[0] is not step:
        if len(_DEVICES) >= 4096:
            _DEVICES.clear()
        got = _DEVICES[key] = (step, tuple(d for d in hosted if d in step.type.mesh))
    return got[1]


_DEVICES: dict[tuple[int, tuple[int, ...]], tuple[Step, tuple[int, ...]]] = {}


def _ends(lowered: Lowered, step: Step, known: dict[str, int]) -> tuple[TensorType, TensorType]:
    """A communication's source and result types with every symbol resolved
    (once per lowered program, step and extents)."""
    (src,) = step.tensor_args()
    return _RESOLVED.get(lowered, (step.out, tuple(known.items())),
                         lambda: (resolved(lowered.types[src], known), resolved(step.type, known)))


def _what(step: Step, exc: Exception, kind: str = "") -> str:
    prefix = f"{kind}: " if kind else ""
    return f"in lowered step {step.out} = {ops.op_name(step.op)}: {prefix}{exc}"


# ---- the numpy backend ----------------------------------------------------------------


def slice_block(step: Step, device: int, x: Any, src: TensorType,
                join: Callable[[list[Any], int], Any] = np.concatenate) -> Any:
    """The device's block along every axis the result cuts further than `src`
    (whose nest begins the result's: blocks.inner_block). An interleaved cut
    (§3.4) keeps several runs of an axis: `join` puts them side by side."""
    index: list[slice] = []
    cuts: list[tuple[int, Runs]] = []
    for i, a in enumerate(step.type.axes):
        have = src.axes[i]
        if len(a.dids) > len(have.dids) and not (a.split or have.split):
            index.append(slice(*inner_block(step.type.mesh, have, a, x.shape[i], device)))
        elif entries_of(a) != entries_of(have):
            runs = inner_runs(step.type.mesh, have, a, x.shape[i], device)
            if len(runs) == 1:
                index.append(slice(*runs[0]))
            else:
                index.append(slice(None))
                cuts.append((i, runs))
        else:
            index.append(slice(None))
    out = x[tuple(index)]
    for i, runs in cuts:
        whole = (slice(None),) * i
        out = join([out[(*whole, slice(*r))] for r in runs], i) if runs else out[(*whole, slice(0, 0))]
    return out


def reshape_block(step: Step, device: int, args: list[Any]) -> tuple[int, ...]:
    """A reshape's result extents on `device`: its block of the result (the verifier
    made sure it holds exactly the elements of its block of the operand)."""
    shape = step.op.shape  # type: ignore[attr-defined]
    bound = {s: int(v) for s, v in zip(shape_symbols(shape), args[1:])}  # the shape's symbols, E of E/4 too
    return local_shape(step.type, bound, device)


class NumpyLocal:
    """Local steps on numpy: the IMPLS table, then the result's declared layout."""

    def __init__(self, types: dict[str, TensorType]) -> None:
        self.types = types

    def __call__(self, step: Step, device: int, args: list[Any]) -> np.ndarray:
        if isinstance(step.op, ops.KeepBlock):
            out = slice_block(step, device, args[0], self.types[step.tensor_args()[0]])
        elif isinstance(step.op, ops.Iota):  # its operands are the global extents (lowering)
            out = iota_block(step.op, step.type, device, args)
        elif isinstance(step.op, ops.Partition):  # the device's term: its buffer or the identity
            out = partition_block(step.op, step.type, device, args[0])
        elif isinstance(step.op, ops.Reshape):  # to the device's block of the result
            out = reshape_into(args[0], reshape_block(step, device, args))
        else:
            if isinstance(step.op, ops.Expand):  # the extents of this device's block
                args = local_extents(step, device, args, self.types[step.tensor_args()[0]])
            out = compute(step.op, args, value_dtype(step.op, args))
        out = np.asarray(out)
        if out.dtype != step.type.np_dtype:
            out = as_dtype(out, step.type.np_dtype)
        if fresh_in_order(out, step.type.order) and not any(out is a for a in args):
            return out  # already a new array of its own, laid out as materialize would lay it
        return materialize(out, step.type.order)


def fresh_in_order(x: Any, order: tuple[int, ...]) -> bool:
    """Whether `x` is a numpy array (not a numpy scalar: a 0-d fold gives one)
    that owns its memory (or was handed out as a buffer of its own:
    interp.transport.own_buffer) and has exactly the strides a materialized
    copy in `order` would have (an empty one is always copied: its strides are
    refir's, not numpy's)."""
    return (type(x) is np.ndarray and own_buffer(x) and x.size > 0
            and x.strides == dense_strides(x.shape, order, x.itemsize))


class NumpyTransport:
    """Wraps a transport so received buffers land in the result's layout, each
    device's a buffer of its own."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.hosted = inner.hosted

    def communicate(self, op: ops.Communication, src: TensorType, dst: TensorType,
                    buffers: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        got = self.inner.communicate(op, src, dst, buffers)
        taken = {id(x) for x in buffers.values()}  # a buffer sent on, or handed to a second receiver, is copied
        laid: dict[int, np.ndarray] = {}  # a buffer handed to many receivers, laid out once: the rest copy that
        out = {}
        for d, x in got.items():
            if id(x) not in taken and fresh_in_order(x, dst.order):
                out[d] = laid[id(x)] = x
            else:
                first = laid.get(id(x))
                out[d] = materialize(x if first is None else first, dst.order)
                if first is None:
                    laid[id(x)] = out[d]
            taken.add(id(x))
        return out
