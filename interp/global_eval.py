"""The global reference: a program's meaning on whole (unsharded) arrays."""

from __future__ import annotations

import numpy as np

from interp.impls import compute
from interp.masks import iota_global, value_dtype
from refir.checks.verifier import Checked
from refir.errors import RefirError, RunError
from refir.ir import ops
from refir.ir.program import Lit, Sym, Var
from refir.ir.types import Bindings, as_dtype
from refir.text.equation_context import describe_eqn


def eval_global(checked: Checked, inputs: dict[str, np.ndarray], bindings: Bindings) -> dict[str, np.ndarray]:
    env: dict[str, np.ndarray] = {p.name: inputs[p.name] for p in checked.func.params}
    for eqn in checked.func.eqns:
        t = checked.types[eqn.out]
        args = [env[a.name] if isinstance(a, Var) else bindings[a.name] if isinstance(a, Sym)
                else a.value if isinstance(a, Lit) else a for a in eqn.args]
        try:
            if isinstance(eqn.op, ops.Iota):  # no operands: its type says it all
                out = iota_global(eqn.op, t, bindings)
            else:
                out = compute(eqn.op, args, value_dtype(eqn.op, args))
        except RefirError:
            raise
        except Exception as exc:  # a bug, reported with the equation that hit it
            raise RunError(describe_eqn(checked, eqn, f"{type(exc).__name__}: {exc}")) from exc
        if out.dtype != t.np_dtype:
            out = as_dtype(out, t.np_dtype)
        env[eqn.out] = out
    # Fresh row-major copies: a result may be a view of an input (set, permute, or
    # the input itself), in the caller's strides.
    return {r: np.array(env[r], order="C", copy=True) for r in checked.func.results}
