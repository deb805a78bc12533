"""nvFuser's ops that add, grow or drop broadcast axes, as refir equations (a
mixin of OpMapper, refir/frontends/nvfuser_mapping.py): what nvFuser prints for them and what
each becomes:

    T1 = broadcast( T0, flags = {true, false} )     unsqueeze(T0, dims=[0])
    T2 = expand( T1, {8, 4} )                       expand(T1, 8, 4)
    T3 = squeeze( T2, flags = {true, false} )       max(T2, dims=[0])  (one element an axis)

An expand that leaves some broadcast axes at 1 writes three equations (its
docstring says which)."""

from __future__ import annotations

from refir.errors import Loc, ParseError
from refir.frontends.nvfuser_axes import Ax, flags_of, kept
from refir.frontends.nvfuser_dump import Call, TVRef
from refir.frontends.nvfuser_mapping import MapperBase


class BroadcastMapper(MapperBase):
    """broadcast, expand and squeeze statements: called by OpMapper.statement."""

    def broadcast(self, out: str, x: TVRef, call: Call, comment: list[str]) -> None:
        want = kept(self.axes[out])
        src = kept(self.axes[x.name])
        flags = flags_of(call, "flags")
        b_axes = [i for i, a in enumerate(want) if a.broadcast]
        if flags is None:  # every b axis of out is new, which only an operand without b axes says
            if any(a.broadcast for a in src):
                raise ParseError(call.loc, f"{out} = broadcast({x.name}) prints no flags, and {x.name} has "
                                 "broadcast axes of its own: which of the result's are new is not said")
            dims = b_axes
        else:  # the flags name the new axes
            dims = [i for i, f in enumerate(flags) if f]
            if len(flags) != len(want) or not set(dims) <= set(b_axes):
                raise ParseError(call.loc, f"broadcast flags {flags} disagree with {out}'s broadcast axes {b_axes}")
        rest = [a for i, a in enumerate(want) if i not in dims]
        self._unify(rest, src, call.loc, f"{out} = broadcast({x.name})")
        self.dtypes.join(x.name, out, call.loc, f"the dtype of {out}")
        it = iter(src)
        got = [Ax(1, None, True, False, 0) if i in dims else next(it) for i in range(len(want))]
        self.emit_local(out, f"unsqueeze({x.name}, dims=[{', '.join(map(str, dims))}])", comment, got,
                        self.refs[x.name].mesh, want)

    def expand(self, out: str, x: TVRef, call: Call, comment: list[str]) -> None:
        """expand(x): the b axes of x that the result prints with an extent
        (`iS3{8}`, or `bS3{1 ex 8}`) become that extent. Those it leaves
        broadcast (nvFuser's expand to 1) stay `b`: refir's expand gives every b
        axis an extent, so they leave first (a max over them: one element each)
        and come back after it (an unsqueeze)."""
        want, src = kept(self.axes[out]), kept(self.axes[x.name])
        if len(want) != len(src):
            raise ParseError(call.loc, f"expand: {out} has {len(want)} axes, {x.name} has {len(src)}")
        staying = [i for i, (a, w) in enumerate(zip(src, want)) if a.broadcast and w.broadcast]
        for a, w in zip(src, want):
            if not a.broadcast:
                self.same_extent(a, w, call.loc, f"{out} = expand({x.name})")
        self.dtypes.join(x.name, out, call.loc, f"the dtype of {out}")
        mesh = self.refs[x.name].mesh
        axes = [Ax(w.extent, w.shard if a.broadcast else a.shard, False, False, w.number,
                   split=w.split if a.broadcast else a.split) for a, w in zip(src, want)]
        if not staying:
            extents = ", ".join(f"{{{{extent:{w.extent}}}}}" for w in want)  # written once the extents are joined
            self.emit_local(out, f"expand({x.name}, {extents})", comment, axes, mesh, want)
            return
        dims = ", ".join(map(str, staying))
        if len(staying) == sum(a.broadcast for a in src):  # nothing grows: the values as they are
            self.emit_local(out, f"set({x.name})", comment, src, mesh, want)
            return
        squeezed, grown = f"{out}_squeezed", f"{out}_grown"
        for helper, helper_axes in ((squeezed, [a for i, a in enumerate(src) if i not in staying]),
                                    (grown, [a for i, a in enumerate(axes) if i not in staying])):
            self.local_types[helper] = (helper_axes, mesh)
            self.dtypes.join(helper, out, Loc(self.file, 0, 0), "")
        self.notes.append(f"{call.loc}: expand leaves axes [{dims}] of {x.name} broadcast: written as a max over "
                          "them, the expand of the others, and an unsqueeze that brings them back")
        extents = ", ".join(f"{{{{extent:{w.extent}}}}}" for i, w in enumerate(want) if i not in staying)
        self.eqns.append((squeezed, f"max({x.name}, dims=[{dims}])", comment))
        self.eqns.append((grown, f"expand({squeezed}, {extents})", [f"{out}: the axes that grow"]))
        got = [Ax(1, None, True, False, 0) if i in staying else a for i, a in enumerate(axes)]
        self.emit_local(out, f"unsqueeze({grown}, dims=[{dims}])", [f"{out}: the broadcast axes back"], got, mesh,
                        want)

    def squeeze(self, out: str, x: TVRef, call: Call, comment: list[str]) -> None:
        src = kept(self.axes[x.name])
        flags = flags_of(call, "flags") or flags_of(call, "squeeze_flags")
        if flags is None:
            raise ParseError(call.loc, "squeeze needs its flags = {...} to say which axes go")
        dims = [i for i, f in enumerate(flags) if f]
        for i in dims:
            if not (src[i].broadcast or src[i].extent == 1) or src[i].shard:
                raise ParseError(call.loc, f"squeeze of axis {i} of {x.name}, which is not of extent 1")
        self._unify(kept(self.axes[out]), [a for i, a in enumerate(src) if i not in dims], call.loc,
                    f"{out} = squeeze({x.name})")
        self.dtypes.join(x.name, out, call.loc, f"the dtype of {out}")
        self.notes.append(f"{call.loc}: squeeze of extent-1 axes {dims} written as max over them (one element "
                          "each: the same values)")
        self.eqns.append((out, f"max({x.name}, dims=[{', '.join(map(str, dims))}])", comment))
