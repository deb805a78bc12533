"""What every op mapper of the nvFuser importer shares: the importer's tables it
reads and extends, the helpers that unify axes and write equations, and the hooks
the importer (refir/frontends/nvfuser.py) provides. The mappers, one file a family
of ops (nvfuser_elementwise, nvfuser_matmul, nvfuser_window, nvfuser_broadcasts,
nvfuser_masks, nvfuser_partial), are mixins of this class, joined by nvfuser_ops'
OpMapper, whose `statement` dispatches each printed statement to one of them."""

from __future__ import annotations

from refir.errors import Loc, ParseError
from refir.frontends.nvfuser_axes import Ax, EqualityClasses, kept
from refir.frontends.nvfuser_dump import Call, Dump, Scalar, Statement, TVRef


class MapperBase:
    file: str
    bullet: str
    lost: str | None
    notes: list[str]
    dump: Dump
    dtypes: EqualityClasses
    refs: dict[str, TVRef]  # name -> the printing that fixes its type
    axes: dict[str, list[Ax]]
    layouts: dict[str, tuple[int, ...]]
    eqns: list[tuple[str, str, list[str]]]  # (out, call text, comments)
    local_types: dict[str, tuple[list[Ax], tuple]]  # helper values: axes, mesh
    comm_kinds: dict[str, str]  # out -> the communication nvFuser printed for it
    pads: dict[str, tuple[str, tuple[int, ...]]]  # a pad's result -> its operand, low widths
    partials: dict[str, tuple[str, tuple[str, ...]]]  # name -> (kind, mesh axes in mesh order)

    # ---- the importer's ---------------------------------------------------------------

    def same_extent(self, a: Ax, b: Ax, loc: Loc, where: str) -> None:
        raise NotImplementedError

    def extent(self, a: Ax) -> str:
        raise NotImplementedError

    def operands(self, s: Statement) -> list[TVRef | Scalar]:
        raise NotImplementedError

    def _resolve_args(self, s: Statement) -> tuple[TVRef | Scalar, ...]:
        raise NotImplementedError

    # ---- shared by the mappers --------------------------------------------------------

    def _one(self, tensors: list[TVRef], call: Call) -> TVRef:
        if len(tensors) != 1:
            raise ParseError(call.loc, f"{call.op} takes one TensorView operand here, not {len(tensors)}")
        return tensors[0]

    def _arg(self, a: TVRef | Scalar, call: Call) -> str:
        if isinstance(a, Scalar):
            return repr(a.value)
        return a.name

    def _unify(self, xs: list[Ax], ys: list[Ax], loc: Loc, where: str) -> None:
        if len(xs) != len(ys):
            raise ParseError(loc, f"{where}: {len(xs)} axes against {len(ys)}")
        for a, b in zip(xs, ys):
            self.same_extent(a, b, loc, where)

    def set_like(self, out: str, src: TVRef, loc: Loc) -> None:
        self._unify(kept(self.axes[out]), kept(self.axes[src.name]), loc, f"{out} = set({src.name})")
        self.dtypes.join(src.name, out, loc, f"the dtype of {out}")

    def emit_local(self, out: str, call: str, comment: list[str], axes: list[Ax], mesh: tuple,
                   want_axes: list[Ax], layout: tuple[int, ...] | None = None) -> None:
        """`out = call` where the op gives `axes` on `mesh`; when the TensorView is
        printed with another placement, the op writes a helper and a set reshards."""
        shards = [a.shard for a in axes]
        if mesh == self.refs[out].mesh and shards == [a.shard for a in want_axes]:
            if layout is not None:
                self.layouts[out] = layout
            self.eqns.append((out, call, comment))
            return
        helper = f"{out}_local"
        self.local_types[helper] = (axes, mesh)
        self.dtypes.join(helper, out, Loc(self.file, 0, 0), "")
        self.eqns.append((helper, call, comment))
        self.eqns.append((out, f"set({helper})", [f"{out} is printed with another placement: a resharding"]))
