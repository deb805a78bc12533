"""nvFuser's window ops as refir equations (a mixin of OpMapper,
refir/frontends/nvfuser_mapping.py): what nvFuser prints for them (its SliceOp, SelectOp, PadOp and
CatOp toString) and what each becomes (docs/spec.md §5.8):

    T1 = slice( T0, { {0, 3, 1} {2, 6, 2} } )        slice(T0, starts=[..], stops=[..], steps=[..], axes=[..])
    T1 = select( T0, axis = iS1{6}, index = 2 )     select(T0, axis=1, index=2)
    T1 = pad( T0, {0, 0, 1, 2} )                    pad(T0, low=[0, 1], high=[0, 2])  (widths per axis in order)
    T3 = cat( T1, T2, 0 )                           cat(A, B, axis=0)

nvFuser prints no pad value (noted: read as 0), and makes a cat of operands padded
to the result's extent: a cat of pads is read as the cat of the pads' operands."""

from __future__ import annotations

import re

from refir.errors import ParseError
from refir.frontends.nvfuser_axes import Ax, kept
from refir.frontends.nvfuser_dump import Call, Scalar, TVRef
from refir.frontends.nvfuser_mapping import MapperBase

WINDOW_OPS = ("slice", "select", "pad", "cat")
_NUMBER = re.compile(r"^-?\d+$")


class WindowMapper(MapperBase):
    """slice, select, pad and cat statements: called by OpMapper.statement."""

    def window(self, out: str, op: str, args: tuple, call: Call, comment: list[str]) -> None:
        tensors = [a for a in args if isinstance(a, TVRef)]
        if op == "cat":
            self.cat(out, tensors, args, call, comment)
            return
        if len(tensors) != 1:
            raise ParseError(call.loc, f"{op} takes one TensorView operand here, not {len(tensors)}")
        x = tensors[0]
        self.dtypes.join(x.name, out, call.loc, f"the dtype of {out}")
        src, want = kept(self.axes[x.name]), kept(self.axes[out])
        if op == "slice":
            text, got = self.slice_call(x.name, src, want, call)
        elif op == "select":
            text, got = self.select_call(x.name, src, call)
        else:
            text, got = self.pad_call(out, x.name, src, call)
        self._unify(want, got, call.loc, f"{out} = {op}({x.name})")
        self.emit_local(out, text, comment, got, self.refs[x.name].mesh, want)

    def slice_call(self, x: str, src: list[Ax], want: list[Ax], call: Call) -> tuple[str, list[Ax]]:
        ranges = [r.split(",") for r in re.findall(r"\{([^{}]*)\}", call.keywords.get("{", ""))]
        if len(ranges) != len(src) or any(len(r) != 3 for r in ranges):
            raise ParseError(call.loc, f"slice needs one {{start, stop, step}} per axis of {x} ({len(src)})")
        axes, starts, stops, steps, got = [], [], [], [], []
        for i, (r, a) in enumerate(zip(ranges, src)):
            start, stop, step = (v.strip() for v in r)
            if (start, step) == ("0", "1") and stop == str(a.extent):
                got.append(a)  # the whole axis
                continue
            if not all(_NUMBER.match(v) for v in (start, stop, step)):
                raise ParseError(call.loc, f"cannot map slice bounds {{{start}, {stop}, {step}}} of axis {i}: "
                                 "refir slices by numbers")
            b, e, s = int(start), int(stop), int(step)
            axes.append(i)
            starts.append(b)
            stops.append(e)
            steps.append(s)
            got.append(Ax(len(range(b, e, s)) if s > 0 else 0, a.shard, a.broadcast, False, a.number))
        return (f"slice({x}, starts={starts}, stops={stops}, steps={steps}, axes={axes})", got)

    def select_call(self, x: str, src: list[Ax], call: Call) -> tuple[str, list[Ax]]:
        which = re.search(r"(\d+)\{", call.keywords.get("axis", ""))
        index = call.keywords.get("index", "").strip()
        axis = next((i for i, a in enumerate(src) if which and a.number == int(which.group(1))), None)
        if axis is None:
            raise ParseError(call.loc, f"cannot map select: axis = {call.keywords.get('axis')!r} names no axis of {x}")
        if not _NUMBER.match(index):
            raise ParseError(call.loc, f"cannot map select index {index!r}: refir selects by a number")
        return f"select({x}, axis={axis}, index={int(index)})", src[:axis] + src[axis + 1:]

    def pad_call(self, out: str, x: str, src: list[Ax], call: Call) -> tuple[str, list[Ax]]:
        widths = [w.strip() for w in call.keywords.get("{", "").strip("{} ").split(",") if w.strip()]
        if len(widths) != 2 * len(src) or not all(_NUMBER.match(w) for w in widths):
            raise ParseError(call.loc, f"pad needs two numeric widths per axis of {x} ({2 * len(src)}), "
                             f"not {{{', '.join(widths)}}}")
        low, high = [int(w) for w in widths[0::2]], [int(w) for w in widths[1::2]]
        self.notes.append(f"{call.loc}: nvFuser prints no pad value: {out} pads with 0")
        self.pads[out] = (x, tuple(low))
        got = [a if not lo and not hi else Ax(a.extent + lo + hi if isinstance(a.extent, int) else a.extent,
                                              a.shard, a.broadcast, False, a.number)
               for a, lo, hi in zip(src, low, high)]
        return f"pad({x}, low={low}, high={[int(w) for w in widths[1::2]]})", got

    def cat(self, out: str, tensors: list[TVRef], args: tuple, call: Call, comment: list[str]) -> None:
        dims = [a.value for a in args if isinstance(a, Scalar)]
        if len(tensors) < 2 or len(dims) != 1 or not isinstance(dims[0], int):
            raise ParseError(call.loc, "cat takes two or more TensorViews and the axis")
        names = [t.name for t in tensors]
        if all(n in self.pads for n in names):  # nvFuser pads each operand to the result's extent first
            names, offset = [self.pads[n][0] for n in names], 0
            for n, p in zip(names, tensors):
                low = self.pads[p.name][1]
                if low[dims[0]] != offset or any(w for i, w in enumerate(low) if i != dims[0]):
                    raise ParseError(call.loc, f"cannot map {out} = cat of pads: {p.name} is padded by {list(low)} "
                                     f"below, not by {offset} on axis {dims[0]} alone")
                offset += kept(self.axes[n])[dims[0]].extent  # type: ignore[operator]
            self.notes.append(f"{call.loc}: {out} = cat of pads, read as the cat of the pads' operands")
        for n in names:
            self.dtypes.join(n, out, call.loc, f"operands of {out}")
        src = kept(self.axes[names[0]])
        self.emit_local(out, f"cat({', '.join(names)}, axis={dims[0]})", comment,
                        [*src[:dims[0]], kept(self.axes[out])[dims[0]], *src[dims[0] + 1:]],
                        self.refs[names[0]].mesh, kept(self.axes[out]))
