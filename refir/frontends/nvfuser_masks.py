"""nvFuser's comparisons, `where` and `iota` as refir equations: a mixin of the
importer's OpMapper (refir/frontends/nvfuser_mapping.py), using its tables and emitters."""

from __future__ import annotations

from refir.errors import ParseError
from refir.frontends.nvfuser_axes import kept
from refir.frontends.nvfuser_dump import Call, Scalar, TVRef
from refir.frontends.nvfuser_mapping import MapperBase


class MaskMapper(MapperBase):
    """compare, where, iota: called by OpMapper.statement."""

    def compare(self, out: str, name: str, args: tuple, call: Call, comment: list[str]) -> None:
        """eq ne lt le gt ge: elementwise like a binary op, operands of one dtype, a bool result."""
        tensors = [a for a in args if isinstance(a, TVRef)]
        if len(args) != 2 or not tensors:
            raise ParseError(call.loc, f"{name} compares two operands, one of them a TensorView")
        want = kept(self.axes[out])
        for t in tensors:
            self._unify(want, kept(self.axes[t.name]), call.loc, f"{out} = {name}(...)")
            self.dtypes.join(tensors[0].name, t.name, call.loc, f"operands of {out}")
        self.dtypes.fix(out, "bool", call.loc, f"{name} writes {out}")
        text = f"{name}({', '.join(self._arg(a, call) for a in args)})"
        self.emit_local(out, text, comment, want, self.refs[tensors[0].name].mesh, want)

    def where(self, out: str, args: tuple, call: Call, comment: list[str]) -> None:
        """where(cond, x, y): cond a bool TensorView, x and y (one may be a number) out's dtype."""
        if len(args) != 3 or not isinstance(args[0], TVRef) or not any(isinstance(a, TVRef) for a in args[1:]):
            raise ParseError(call.loc, "where(cond, x, y) needs a TensorView condition and a TensorView value")
        want = kept(self.axes[out])
        cond = args[0]
        self.dtypes.fix(cond.name, "bool", call.loc, f"the condition of {out}")
        for t in args:
            if isinstance(t, TVRef):
                self._unify(want, kept(self.axes[t.name]), call.loc, f"{out} = where(...)")
                if t is not cond:
                    self.dtypes.join(t.name, out, call.loc, f"values of {out}")
        text = f"where({', '.join(self._arg(a, call) for a in args)})"
        self.emit_local(out, text, comment, want, self.refs[cond.name].mesh, want)

    def iota(self, out: str, args: tuple, call: Call, comment: list[str]) -> None:
        """nvFuser's iota(length, start, step, dtype) is 1-D: start 0, step 1 map onto iota(axis=0)."""
        numbers = [a.value for a in args if isinstance(a, Scalar)][-2:]  # start and step, after the length
        if len(kept(self.axes[out])) != 1 or (numbers and numbers != [0, 1]):
            raise ParseError(call.loc, f"cannot map {call.op}: refir maps a 1-D iota of start 0 and step 1")
        self.eqns.append((out, "iota(axis=0)", comment))
