"""Operations: small frozen dataclasses holding only their parameters.

Source ops are what programs are written in. Lowering adds the local data
movements (`Slice`, `Copy`) and the nine communications.
"""

from __future__ import annotations

from dataclasses import dataclass

BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
UNARY = ("neg", "abs", "exp", "log", "sqrt", "relu")
REDUCTIONS = ("sum", "prod", "max", "min", "band", "bor", "bxor")


# ---- source ops ---------------------------------------------------------------------


@dataclass(frozen=True)
class Binary:
    name: str  # one of BINARY


@dataclass(frozen=True)
class Unary:
    name: str  # one of UNARY


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
class Set:
    pass


@dataclass(frozen=True)
class Reshape:
    """numpy's C-order reshape to `shape` (global extents: integers or symbol names).
    The equation's operands are the tensor, then one `Sym` per distinct symbol of
    `shape` in order, so every backend gets their values as it gets any symbol's."""

    shape: tuple[int | str, ...]


# ---- local data movement added by lowering ------------------------------------------


@dataclass(frozen=True)
class Slice:
    """Each device keeps its own block of data it already holds whole."""


@dataclass(frozen=True)
class Copy:
    """A local copy into another layout (or the same one)."""


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


Op = Binary | Unary | Cast | Permute | Unsqueeze | Reduction | Matmul | Set | Reshape
LocalOp = Op | Slice | Copy
Communication = (
    Allgather | Gather | Scatter | Broadcast | SendRecv | AllToAll | Allreduce | Reduce | ReduceScatter
)
COMMUNICATIONS = (
    Allgather, Gather, Scatter, Broadcast, SendRecv, AllToAll, Allreduce, Reduce, ReduceScatter,
)


def op_name(op: object) -> str:
    """The name an op has in the text format and in the lowered listing."""
    if isinstance(op, (Binary, Unary)):
        return op.name
    if isinstance(op, Reduction):
        return op.kind
    return {
        AllToAll: "all_to_all", SendRecv: "send_recv", ReduceScatter: "reduce_scatter",
    }.get(type(op), type(op).__name__.lower())


def is_communication(op: object) -> bool:
    return isinstance(op, COMMUNICATIONS)
