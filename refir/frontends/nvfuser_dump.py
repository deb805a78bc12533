"""What a printed nvFuser fusion holds once read: its TensorViews, their
IterDomains and the statements that define them (read by
refir/frontends/nvfuser_parse.py, mapped onto refir by refir/frontends/nvfuser.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from refir.errors import Loc

# nvFuser's printed dtypes (after a TensorView, or in its name) -> refir dtypes.
NV_DTYPES = {
    "float": "f32", "double": "f64", "half": "f16", "__half": "f16", "bfloat": "bf16", "__bfloat": "bf16",
    "bfloat16": "bf16", "__nv_bfloat16": "bf16", "int": "i32", "int32_t": "i32", "int64_t": "i64",
    "int64": "i64", "int32": "i32", "long": "i64", "bool": "bool", "char": "i8", "int8_t": "i8",
    "int16_t": "i16", "uint8_t": "u8",
}

Extent = int | str | tuple  # a number, a symbol, or ("ceilDiv", a, b)


@dataclass(frozen=True)
class Domain:
    """One IterDomain as printed, e.g. `ideviceIdx.x12{4}` or `rS7{5}rf`."""

    text: str
    kind: str  # i (iteration), r (reduction), b (broadcast)
    ptype: str  # S (serial), deviceIdx.x/y/z, or another parallel type
    number: int
    extent: Extent
    rf: bool
    loc: Loc

    @property
    def device(self) -> str | None:
        """DIDx/DIDy/DIDz for a device-parallel domain."""
        return "DID" + self.ptype[-1] if self.ptype.startswith("deviceIdx.") else None

    @property
    def scheduled(self) -> bool:
        """A kernel's parallel type (blockIdx, threadIdx, vectorize, unroll...): a scheduled
        kernel's loop domain, whose extents are those of its merges and splits."""
        return scheduled_type(self.ptype)


def scheduled_type(ptype: str) -> bool:
    return ptype not in ("S", "US", "streamIdx") and not ptype.startswith("deviceIdx.")


@dataclass(frozen=True)
class TVRef:
    """A TensorView as printed: `T4_g[ ... ] (DeviceMesh{0 1}), float`.
    `name` is empty for an operand printed without its name (`[ ... ]`)."""

    name: str
    spelling: str
    domains: tuple[Domain, ...]
    mesh: tuple[tuple[int, ...], tuple[int, ...]] | None  # (shape, devices)
    dtype: str | None
    loc: Loc


@dataclass(frozen=True)
class Scalar:
    value: int | float
    loc: Loc


@dataclass(frozen=True)
class Call:
    """`op(args, key = value, ...)`, an infix `a + b`, or a cast."""

    op: str
    args: tuple[TVRef | Scalar, ...]
    keywords: dict[str, str] = field(hash=False)
    loc: Loc


@dataclass(frozen=True)
class Statement:
    out: TVRef
    expr: TVRef | Call
    text: str  # the statement as printed, on one line
    segment: int


@dataclass
class Dump:
    statements: list[Statement] = field(default_factory=list)
    inputs: list[TVRef] = field(default_factory=list)  # from `Inputs:` lists
    outputs: list[TVRef] = field(default_factory=list)  # from `Outputs:` lists
    mentions: list[TVRef] = field(default_factory=list)  # every TensorView printed
    segments: int = 0
    # `Outer split: iS0{6} by factor 2 -> ideviceIdx.x4{2}, iS5{3}` (printTransforms):
    # the number of the inner domain -> the extent of the split logical domain.
    splits: dict[int, Extent] = field(default_factory=dict)
    # ... and the numbers of its outer and split domains (4 -> (3, 2) for
    # `Outer split: iS2{3} by factor 2 -> ideviceIdx.x3{2}, iS4{2}`): a chain of
    # them is a nest, one axis split over several mesh axes (nvfuser_axes).
    split_from: dict[int, tuple[int, int]] = field(default_factory=dict)
    # ... and, where the outer domain is a device's, both domains by the split one's number
    # (a scheduled TensorView's device split, whose inner domain its loop domain no longer shows).
    device_splits: dict[int, tuple[Domain, Domain]] = field(default_factory=dict)
    # Splits of neither part a device's, `Outer split:` or `Split:` (an inner split), by the
    # outer domain's number: (the split domain, the inner one). A device split of such an
    # outer domain shards heads (`Split: iS1{24} by factor 6 -> iS5{4}, iS6{6}`, then
    # `Outer split: iS5{4} by factor 2 -> ideviceIdx.x7{2}, iS8{2}`: nvfuser_forms' head splits).
    plain_splits: dict[int, tuple[Domain, Domain]] = field(default_factory=dict)
    # ` logical domain : (iS0{i0}, iS1{i2})` (printTransforms) by the TensorView printed above it,
    # or the error reading it; nvfuser_forms.logical_views reads scheduled TensorViews by it.
    logical: dict[str, tuple[Domain, ...]] = field(default_factory=dict)
    logical_errors: dict[str, Exception] = field(default_factory=dict)


LATER = 1 << 30  # the segment of a link's reader: after every printed one


def results_of(listed: list[str], defined: dict[str, Statement], reads: set[str],
               read_in: dict[str, set[int]]) -> list[str]:
    """What the imported program returns: the `Outputs:` listed, but those a later
    segment reads (`read_in`: the segments whose statements read each; a segment's
    output is the next one's input, not a result); none listed, what nothing reads."""
    if not listed:
        return [n for n in defined if n not in reads]

    def passed_on(n: str) -> bool:
        if n not in defined:
            return n in reads
        return any(seg > defined[n].segment for seg in read_in.get(n, ()))
    return [n for n in dict.fromkeys(listed) if not passed_on(n)] or listed[-1:]
