"""nvFuser's elementwise ops as refir equations (a mixin of nvfuser_ops' OpMapper):
binary ops (printed as calls or infix), unary ops and casts. A result printed with
another placement than its operands give is written as a helper and a set
(MapperBase.emit_local)."""

from __future__ import annotations

import re

from refir.errors import ParseError
from refir.frontends.nvfuser_axes import Ax, kept
from refir.frontends.nvfuser_dump import Call, TVRef
from refir.frontends.nvfuser_mapping import MapperBase

CAST = re.compile(r"^_*(half|float|double|bfloat16|bfloat|int64|int32|int|bool)2"
               r"(half|float|double|bfloat16|bfloat|int64|int32|int|bool)$")
CAST_DTYPES = {"half": "f16", "float": "f32", "double": "f64", "bfloat": "bf16", "bfloat16": "bf16",
               "int": "i32", "int32": "i32", "int64": "i64", "bool": "bool"}
BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "maximum", "fmax": "maximum",
          "max": "maximum", "minimum": "minimum", "fmin": "minimum", "min": "minimum"}
UNARY = {"neg": "neg", "abs": "abs", "fabs": "abs", "exp": "exp", "log": "log", "sqrt": "sqrt", "relu": "relu",
         "tanh": "tanh", "erf": "erf", "sigmoid": "sigmoid", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos"}
# printMath writes CUDA's float overloads: sqrtf, expf, fabsf
UNARY.update({f + "f": v for f, v in list(UNARY.items()) if f not in ("neg", "relu", "sigmoid")})


class ElementwiseMapper(MapperBase):
    """binary, unary and cast statements: called by OpMapper.statement."""

    def binary(self, out: str, name: str, args: tuple, call: Call, comment: list[str]) -> None:
        tensors = [a for a in args if isinstance(a, TVRef)]
        if not tensors:
            raise ParseError(call.loc, f"{name} of two numbers is not a TensorView")
        want = kept(self.axes[out])
        shards: list[str | None] = [None] * len(want)
        for t in tensors:
            axes = kept(self.axes[t.name])
            self._unify(want, axes, call.loc, f"{out} = {name}(...)")
            self.dtypes.join(t.name, out, call.loc, f"operands of {out}")
            for i, a in enumerate(axes):
                shards[i] = shards[i] or a.shard
        follows = all(a.shard in (None, w.shard) for t in tensors for a, w in zip(kept(self.axes[t.name]), want))
        axes = [Ax(w.extent, w.shard if follows else s, w.broadcast, False, w.number, split=w.split if follows else 1)
                for w, s in zip(want, shards)]
        text = f"{name}({', '.join(self._arg(a, call) for a in args)})"
        self.emit_local(out, text, comment, axes, self.refs[tensors[0].name].mesh, want)

    def unary_like(self, out: str, text: str, x: TVRef, call: Call, comment: list[str]) -> None:
        want = kept(self.axes[out])
        self._unify(want, kept(self.axes[x.name]), call.loc, f"{out} = {call.op}({x.name})")
        self.dtypes.join(x.name, out, call.loc, f"the dtype of {out}")
        self.emit_local(out, text, comment, kept(self.axes[x.name]), self.refs[x.name].mesh, want)

    def cast(self, out: str, op: str, x: TVRef, call: Call, comment: list[str]) -> None:
        m = CAST.match(op)
        src, dst = (CAST_DTYPES[m.group(1)], CAST_DTYPES[m.group(2)]) if m else (None, op.partition(":")[2])
        if src:
            self.dtypes.fix(x.name, src, call.loc, f"{op} reads {x.name}")
        self.dtypes.fix(out, dst, call.loc, f"{op} writes {out}")
        want = kept(self.axes[out])
        self._unify(want, kept(self.axes[x.name]), call.loc, f"{out} = {op}({x.name})")
        self.emit_local(out, f"cast({x.name}, dtype={dst})", comment, kept(self.axes[x.name]),
                        self.refs[x.name].mesh, want)
