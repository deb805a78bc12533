"""Operations: small frozen dataclasses holding only their parameters.

Source ops are what programs are written in. Lowering adds the local data
movements (`KeepBlock`, `Copy`, `Partition`) and the nine communications.
"""

from __future__ import annotations

from dataclasses import dataclass

from refir.ir.extents import Extent

BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
UNARY = ("neg", "abs", "exp", "log", "sqrt", "relu", "tanh", "erf", "sigmoid", "rsqrt", "sin", "cos")
# Unary ops that need a float dtype and are not correctly rounded (docs/spec.md §5.9, num_c7).
MASK_UNARY = ("tanh", "erf", "sigmoid", "rsqrt", "sin", "cos")
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
REDUCTIONS = ("sum", "prod", "max", "min", "band", "bor", "bxor")


# ---- source ops ---------------------------------------------------------------------


@dataclass(frozen=True)
class Binary:
    name: str  # one of BINARY


@dataclass(frozen=True)
class Unary:
    name: str  # one of UNARY


@dataclass(frozen=True)
class Compare:
    """eq ne lt le gt ge: elementwise, to bool (§5.9)."""

    name: str  # one of COMPARISONS


@dataclass(frozen=True)
class Where:
    """where(cond, x, y): np.where, elementwise (§5.9)."""


@dataclass(frozen=True)
class Iota:
    """iota(axis=k): each element's global index along axis k of the declared type (§5.9)."""

    axis: int


@dataclass(frozen=True)
class Cast:
    dtype: str


@dataclass(frozen=True)
class Permute:
    perm: tuple[int, ...]  # result axis i is operand axis perm[i]


@dataclass(frozen=True)
class Unsqueeze:
    dims: tuple[int, ...]  # positions of the new `b` axes in the result


@dataclass(frozen=True)
class Reduction:
    kind: str  # one of REDUCTIONS
    dims: tuple[int, ...]


@dataclass(frozen=True)
class Matmul:
    pass


@dataclass(frozen=True)
class Expand:
    """`expand(x, E0, E1, ...)`: its `b` axes broadcast to the extents given
    (operands after x, one per axis: literals or symbols), materialized."""


@dataclass(frozen=True)
class Set:
    pass


# Windows (docs/spec.md §5.8): which elements of the operand(s) the result holds.


@dataclass(frozen=True)
class Slice:
    """x[start:stop:step] on each of `axes` (numpy basic slicing), every other axis whole."""

    axes: tuple[int, ...]
    starts: tuple[int, ...]
    stops: tuple[int, ...]
    steps: tuple[int, ...]


@dataclass(frozen=True)
class Select:
    """x[..., index, ...] at `axis`: the axis is gone from the result."""

    axis: int
    index: int


@dataclass(frozen=True)
class Pad:
    """np.pad(x, list(zip(low, high)), constant_values=value)."""

    low: tuple[int, ...]
    high: tuple[int, ...]
    value: int | float = 0


@dataclass(frozen=True)
class Cat:
    """np.concatenate(operands, axis)."""

    axis: int


@dataclass(frozen=True)
class Reshape:
    """numpy's C-order reshape to `shape` (global extents: integers, symbol names or
    expressions such as `E/4`, refir.ir.extents). The equation's operands are the
    tensor, then one `Sym` per distinct symbol of `shape` in order (`shape_symbols`),
    so every backend gets their values as it gets any symbol's."""

    shape: tuple[Extent, ...]


# ---- local data movement added by lowering ------------------------------------------


@dataclass(frozen=True)
class KeepBlock:
    """Each device keeps its own block of data it already holds whole (text name `keep_block`)."""


@dataclass(frozen=True)
class Copy:
    """A local copy into another layout (or the same one)."""


@dataclass(frozen=True)
class Partition:
    """A replicated value made partial over `mesh_axes` without moving data (docs/spec.md
    §3.3): for sum and prod the device of coordinate 0 on each team keeps its buffer and
    the others hold the kind's identity (0, 1); for max and min every device keeps it."""

    kind: str
    mesh_axes: tuple[str, ...]


# ---- communications (nvFuser's CommunicationType) -----------------------------------


@dataclass(frozen=True)
class Allgather:
    axis: int
    mesh_axis: str


@dataclass(frozen=True)
class Gather:
    """Blocks from a 1-D source mesh, concatenated on every receiver."""

    axis: int


@dataclass(frozen=True)
class Scatter:
    axis: int
    root: int  # a device id


@dataclass(frozen=True)
class Broadcast:
    root: int  # a device id


@dataclass(frozen=True)
class SendRecv:
    """Block k moves from source-mesh device k to destination-mesh device k."""

    axis: int


@dataclass(frozen=True)
class AllToAll:
    mesh_axis: str
    split_axis: int  # becomes sharded
    concat_axis: int  # becomes whole


@dataclass(frozen=True)
class Allreduce:
    kind: str
    mesh_axes: tuple[str, ...]


@dataclass(frozen=True)
class Reduce:
    """Partials from a 1-D source mesh, folded on every receiver."""

    kind: str


@dataclass(frozen=True)
class ReduceScatter:
    kind: str
    mesh_axis: str
    axis: int


Op = (Binary | Unary | Compare | Where | Iota | Cast | Permute | Unsqueeze | Reduction | Matmul | Expand | Set
      | Slice | Select | Pad | Cat | Reshape)
WINDOWS = (Slice, Select, Pad, Cat)
# Ops whose scalar operands are extents (handed as they are), not values of the tensor's dtype.
TAKES_EXTENTS = (Expand, Reshape)
LocalOp = Op | KeepBlock | Copy | Partition
Communication = (
    Allgather | Gather | Scatter | Broadcast | SendRecv | AllToAll | Allreduce | Reduce | ReduceScatter
)
COMMUNICATIONS = (
    Allgather, Gather, Scatter, Broadcast, SendRecv, AllToAll, Allreduce, Reduce, ReduceScatter,
)


def op_name(op: object) -> str:
    """The name an op has in the text format and in the lowered listing."""
    if isinstance(op, (Binary, Unary, Compare)):
        return op.name
    if isinstance(op, Reduction):
        return op.kind
    return {
        AllToAll: "all_to_all", SendRecv: "send_recv", ReduceScatter: "reduce_scatter", KeepBlock: "keep_block",
    }.get(type(op), type(op).__name__.lower())


def is_communication(op: object) -> bool:
    return isinstance(op, COMMUNICATIONS)
