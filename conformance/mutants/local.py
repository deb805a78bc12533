"""Mutants of a device's own steps in the spmd loop: the symbols a segment
binds, a compute impl, a local slice, a permute's or a copy's result.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from unittest import mock

import numpy as np

import interp.backend
import interp.impls
import interp.spmd
from conformance.mutants.patching import OTHER, sharded_symbols_from_blocks
from conformance.mutants.registry import mutant
from refir.ir import ops
from refir.ir.types import TensorType, as_shard, has_layout
from refir.lowering.lower import Lowered, Step
from refir.world.backend_types import Shards
from refir.world.ranks import World


@mutant("a segment re-binds an input's symbols from its type before the reduction that made it (nvFuser #2481)",
        by="isolation")
def reduced_axis_symbol() -> Iterator[None]:
    run, operands = interp.backend.run_spmd, interp.spmd.operand_values

    def run_spmd(lowered: Lowered, inputs: Shards, scalars: dict[str, int], world: World) -> Shards:
        made_by = {e.out: e for e in lowered.checked.func.eqns}
        types = lowered.checked.types

        def operand_values(step: Step, device: int, env: dict, types_: dict, known: dict) -> tuple[list, dict]:
            values, bound = operands(step, device, env, types_, known)
            for a in step.tensor_args():
                e = made_by.get(a.split("~")[0])
                if e is not None and isinstance(e.op, (ops.Reduction, ops.Matmul)):
                    for s in sorted(s for x in e.tensor_args() for s in types[x].symbols()):
                        if s not in bound:
                            bound[s] = scalars[s]
            return values, bound

        with mock.patch.object(interp.spmd, "operand_values", operand_values):
            return run(lowered, inputs, scalars, world)

    with mock.patch.object(interp.backend, "run_spmd", run_spmd):
        yield


@mutant("a permute writes its result row-major, whatever its layout", by="strides")
def permute_row_major() -> Iterator[None]:
    call = interp.spmd.NumpyLocal.__call__

    def local(self: interp.spmd.NumpyLocal, step: Step, device: int, args: list) -> np.ndarray:
        out = call(self, step, device, args)
        return np.array(out, order="C") if isinstance(step.op, ops.Permute) else out

    with mock.patch.object(interp.spmd.NumpyLocal, "__call__", local):
        yield


@mutant("max drops NaN (fmax), locally and across devices", by="values")
def max_drops_nan() -> Iterator[None]:
    reduction = interp.impls.IMPLS[ops.Reduction]

    def impl(op: ops.Reduction, x: np.ndarray) -> np.ndarray:
        if op.kind != "max":
            return reduction(op, x)
        return np.asarray(np.fmax.reduce(x, axis=op.dims, initial=interp.impls.identity("max", x.dtype)))

    with mock.patch.dict(interp.impls.IMPLS, {ops.Reduction: impl}), \
            mock.patch.dict(interp.impls.COMBINE, {"max": np.fmax}):
        yield


@mutant("a kernel writes its result into its input buffer", by="inputs")
def kernel_writes_input() -> Iterator[None]:
    unary = interp.impls.IMPLS[ops.Unary]

    def impl(op: ops.Unary, x: np.ndarray) -> np.ndarray:
        out = unary(op, x)
        if isinstance(x, np.ndarray) and x.flags.writeable and x.shape == out.shape:
            x[...] = out
            return x
        return out

    with mock.patch.dict(interp.impls.IMPLS, {ops.Unary: impl}):
        yield


@mutant("a symbol used as a value is a device's local extent, not the global one (nvFuser #2758)", by="values")
def local_extent_symbol() -> Iterator[None]:
    with sharded_symbols_from_blocks(lambda t, axis, n: n):
        yield


@mutant("a local slice takes its block at the device's coordinate on the other mesh axis", by="values")
def slice_wrong_mesh_axis() -> Iterator[None]:
    original = interp.spmd.slice_block

    def slice_block(step: Step, device: int, x: np.ndarray, src: TensorType) -> np.ndarray:
        t, right = step.type, original(step, device, x, src)
        # a nest cut further is left alone (its swapped nest would not begin with the operand's)
        # and an interleaved cut (§3.4), whose runs are no block of the other mesh axis either
        if t.mesh.ndim < 2 or t.interleaved() or any(a.nested and src.axes[i].shard for i, a in enumerate(t.axes)):
            return right
        swapped = {i: as_shard(tuple(OTHER[d] for d in ks)) for i, ks in t.nests().items()}
        wrong = original(replace(step, type=t.with_sharding(swapped)), device, x, src)
        # Only where the blocks have one shape: a short block where a long one belongs
        # fails the step on some ranks only, which under MPI is a hang rather than a bug.
        return wrong if wrong.shape == right.shape else right

    with mock.patch.object(interp.spmd, "slice_block", slice_block):
        yield


@mutant("a copy whose operand already lies in its layout hands back the operand itself", by="fresh")
def copy_elided() -> Iterator[None]:
    call = interp.spmd.NumpyLocal.__call__

    def local(self: interp.spmd.NumpyLocal, step: Step, device: int, args: list) -> np.ndarray:
        if isinstance(step.op, ops.Copy) and has_layout(args[0], step.type.order):
            return args[0]
        return call(self, step, device, args)

    with mock.patch.object(interp.spmd.NumpyLocal, "__call__", local):
        yield
