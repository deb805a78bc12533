"""nvFuser's printed IterDomains as refir's logical axes, and the equality
classes the importer keeps over extents and dtypes (refir/frontends/nvfuser.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from refir.errors import Loc, ParseError
from refir.frontends.nvfuser_dump import Call, Domain, TVRef


@dataclass
class Ax:
    """A logical axis of an imported TensorView (reduced ones included)."""

    extent: int | str
    shard: str | None
    broadcast: bool
    reduced: bool
    number: int  # nvFuser's IterDomain number, for permutation order


class EqualityClasses:
    """Union-find over names (symbols or dtypes), with a fixed value per class."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.value: dict[str, str | int] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def fix(self, x: str, value: str | int, loc: Loc, what: str) -> None:
        r = self.find(x)
        if r in self.value and self.value[r] != value:
            raise ParseError(loc, f"{what}: {self.value[r]} and {value} cannot both hold")
        self.value[r] = value

    def join(self, a: str, b: str, loc: Loc, what: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if ra in self.value and rb in self.value and self.value[ra] != self.value[rb]:
            raise ParseError(loc, f"{what}: {self.value[ra]} and {self.value[rb]} cannot both hold")
        self.parent[rb] = ra
        if rb in self.value:
            self.value[ra] = self.value.pop(rb)


def logical_axes(ref: TVRef, splits: dict[int, object] | None = None) -> list[Ax]:
    """The printed domains as logical axes: a device axis of extent n followed by
    `ceilDiv(E, n)` is an outer split of E, i.e. E sharded on that device axis;
    so is a device axis followed by a domain that an `Outer split:` line made."""
    out: list[Ax] = []
    doms = list(ref.domains)
    i = 0
    while i < len(doms):
        d = doms[i]
        nxt = doms[i + 1] if i + 1 < len(doms) else None
        if d.kind not in "irb" or (d.ptype not in ("S", "US") and not d.device):
            raise ParseError(d.loc, f"cannot map IterDomain {d.text!r}: refir knows serial (S), "
                             "device (deviceIdx.x/y/z), reduction and broadcast domains, not parallel type "
                             f"{d.ptype!r}")
        if isinstance(d.extent, tuple):
            if nxt is not None and nxt.device and d.extent[2] == nxt.extent:
                raise ParseError(nxt.loc, f"cannot map {nxt.text!r}: an inner split puts the device axis "
                                 "inside the logical axis (blocks interleaved); refir shards contiguous blocks")
            raise ParseError(d.loc, f"cannot map {d.text!r}: ceilDiv extent without the device axis before it")
        split = (splits or {}).get(nxt.number) if nxt is not None else None
        if d.device and nxt is not None and split is not None:
            nxt = Domain(nxt.text, nxt.kind, nxt.ptype, nxt.number, ("ceilDiv", split, d.extent), nxt.rf, nxt.loc)
        if d.device and nxt is not None and isinstance(nxt.extent, tuple) and nxt.extent[2] == d.extent:
            whole = nxt.extent[1]
            if isinstance(whole, tuple):
                raise ParseError(nxt.loc, f"cannot map {nxt.text!r}: nested splits")
            out.append(Ax(whole, d.device, False, d.kind == "r", nxt.number))
            i += 2
            continue
        if d.kind == "b" and d.extent != 1:
            raise ParseError(d.loc, f"cannot map {d.text!r}: a broadcast domain of extent {d.extent}")
        out.append(Ax(d.extent, d.device, d.kind == "b", d.kind == "r", d.number))
        i += 1
    return out


def kept(axes: list[Ax]) -> list[Ax]:
    return [a for a in axes if not a.reduced]


def flags_of(call: Call, key: str) -> list[bool] | None:
    value = call.keywords.get(key)
    if value is None:
        return None
    words = re.findall(r"true|false|1|0", value)
    return [w in ("true", "1") for w in words]
