"""nvFuser's matmul and linear as refir equations (a mixin of nvfuser_ops' OpMapper):
np.matmul of any ranks (batch axes broadcast), and linear(x, w [, bias]) as a
permute of w, a matmul and, with a bias, an unsqueeze and an add."""

from __future__ import annotations

from refir.errors import ParseError
from refir.frontends.nvfuser_axes import Ax, kept
from refir.frontends.nvfuser_dump import Call, TVRef
from refir.frontends.nvfuser_mapping import MapperBase


class MatmulMapper(MapperBase):
    """matmul and linear statements: called by OpMapper.statement."""

    def matmul(self, out: str, tensors: list[TVRef], call: Call, comment: list[str]) -> None:
        """np.matmul of any ranks >= 1 (refir's matmul: docs/spec.md 5.6)."""
        if len(tensors) != 2:
            raise ParseError(call.loc, "matmul takes two TensorViews")
        a, b = (kept(self.axes[t.name]) for t in tensors)
        if not a or not b:
            raise ParseError(call.loc, f"cannot map matmul of ranks {len(a)} and {len(b)}: refir's matmul "
                             "takes operands of rank at least 1")
        where = f"{out} = matmul(...)"
        self._contract(a, b[-2:-1] if len(b) > 1 else b, a[:-2], b[:-2], call, where)
        batch = self._batch(a[:-2], b[:-2])
        self._unify(kept(self.axes[out]), batch + a[-2:-1] + (b[-1:] if len(b) > 1 else []), call.loc, where)
        for t in tensors:
            self.dtypes.join(t.name, out, call.loc, f"operands of {out}")
        self.eqns.append((out, f"matmul({tensors[0].name}, {tensors[1].name})", comment))

    def _contract(self, a: list[Ax], k: list[Ax], ba: list[Ax], bb: list[Ax], call: Call, where: str) -> None:
        self._unify(a[-1:], k, call.loc, where)
        for x, y in zip(reversed(ba), reversed(bb)):
            if not x.broadcast and not y.broadcast:
                self.same_extent(x, y, call.loc, where)

    def _batch(self, ba: list[Ax], bb: list[Ax]) -> list[Ax]:
        n = max(len(ba), len(bb))
        pa = [None] * (n - len(ba)) + list(ba)
        pb = [None] * (n - len(bb)) + list(bb)
        return [y if x is None or x.broadcast and y is not None else x for x, y in zip(pa, pb)]  # type: ignore[misc]

    def linear(self, out: str, tensors: list[TVRef], call: Call, comment: list[str]) -> None:
        """linear(x[..., K], w[N, K], bias[N]) = x @ w^T + bias: any rank of x (a
        [B, S, E] input in every sequence-parallel layer)."""
        if len(tensors) not in (2, 3) or not kept(self.axes[tensors[0].name]) \
                or len(kept(self.axes[tensors[1].name])) != 2:
            raise ParseError(call.loc, "cannot map linear: refir maps linear(x[..., K], w[N, K] [, bias[N]])")
        x, w = tensors[:2]
        xa, wa = kept(self.axes[x.name]), kept(self.axes[w.name])
        where = f"{out} = linear(...)"
        self._unify(xa[-1:], wa[-1:], call.loc, where)
        self._unify(kept(self.axes[out]), xa[:-1] + wa[:1], call.loc, where)
        for t in tensors:
            self.dtypes.join(t.name, out, call.loc, f"operands of {out}")
        wt = f"{w.name}_t"
        self.local_types[wt] = ([wa[1], wa[0]], self.refs[w.name].mesh)
        self.dtypes.join(wt, out, call.loc, "")
        self.eqns.append((wt, f"permute({w.name}, [1, 0])", comment))
        if len(tensors) == 2:
            self.eqns.append((out, f"matmul({x.name}, {wt})", ["linear = x @ w^T"]))
            return
        bias = tensors[2]
        if out in self.partials:
            raise ParseError(call.loc, f"cannot map linear with a bias writing {out} as a partial value: the bias "
                             "would be added once per device (nvFuser adds it after the reduction)")
        self._unify(kept(self.axes[bias.name]), wa[:1], call.loc, where)
        mm, bb = f"{out}_mm", f"{bias.name}_b"
        lead = len(xa) - 1
        self.local_types[mm] = (kept(self.axes[out]), self.refs[out].mesh)
        self.local_types[bb] = ([Ax(1, None, True, False, 0)] * lead + kept(self.axes[bias.name]),
                                self.refs[bias.name].mesh)
        for n in (mm, bb):
            self.dtypes.join(n, out, call.loc, "")
        self.eqns.append((mm, f"matmul({x.name}, {wt})", ["linear = x @ w^T + bias"]))
        self.eqns.append((bb, f"unsqueeze({bias.name}, dims=[{', '.join(map(str, range(lead)))}])", []))
        self.eqns.append((out, f"add({mm}, {bb})", []))
