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
    split: int = 1  # an inner split's split factor (spec §3.4): E / d, the device axis inner


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


def _outer_of(d: Domain) -> bool:
    """A domain that can be the outer part of a loop split: a device or stream one."""
    return d.kind in "ir" and (d.device is not None or d.ptype == STREAM)


def split_partners(doms: list[Domain], splits: dict[int, object], static: bool) -> dict[int, int]:
    """outer position -> inner position of the loop splits printed in one TensorView.
    An inner `ceilDiv(E, n)` (or one an `Outer split:` line made) pairs with the
    device or stream domain of extent n just before it, or with the one numbered
    one below it (nvFuser makes a split's outer and inner domains one after the
    other, and may print the device one first: `ideviceIdx.x11{2}, iS2{2}, iS12{4}`).
    With `static`, a static inner numbered one above a device or stream domain of
    static extent pairs too (`ideviceIdx.x7{2}, iS8{3}` is an axis of 6): the
    reading the importer tries where the plain one does not fit (nvfuser_ops)."""
    pairs: dict[int, int] = {}
    taken: set[int] = set()
    for j, inner in enumerate(doms):
        extent = inner.extent
        if not isinstance(extent, tuple) and inner.number in splits and j > 0:
            extent = ("ceilDiv", splits[inner.number], doms[j - 1].extent)
        for i, outer in enumerate(doms):
            if i == j or i in taken or not _outer_of(outer):
                continue
            near = i == j - 1 or outer.number + 1 == inner.number
            if isinstance(extent, tuple) and extent[2] == outer.extent and near:
                pairs[i] = j
            elif (static and not isinstance(extent, tuple) and isinstance(extent, int)
                  and isinstance(outer.extent, int) and outer.number + 1 == inner.number and inner.kind in "ir"
                  and inner.ptype in ("S", "US")):
                pairs[i] = j
            else:
                continue
            taken |= {i, j}
            break
    return pairs


def logical_axes(ref: TVRef, splits: dict[int, object] | None = None, static: bool = False) -> list[Ax]:
    """The printed domains as logical axes: a device (or stream) domain of extent n
    and the `ceilDiv(E, n)` it splits off are one axis E, sharded on that device
    axis (a stream axis changes when work runs, not what it computes: the axis is
    E, unsharded); so is a device domain and one that an `Outer split:` line made.
    The axis stands where the inner domain is printed (nvFuser moves device
    domains outermost in the loop domain)."""
    doms = list(ref.domains)
    for d in doms:
        if d.kind not in "irb" or (d.ptype not in ("S", "US", STREAM) and not d.device):
            raise ParseError(d.loc, f"cannot map IterDomain {d.text!r}: refir knows serial (S), "
                             "device (deviceIdx.x/y/z), stream, reduction and broadcast domains, not parallel "
                             f"type {d.ptype!r}")
    pairs = split_partners(doms, splits or {}, static)
    inner_of = {j: i for i, j in pairs.items()}
    inner_splits: set[int] = set()  # device domains an inner split put inside its axis
    out: list[Ax] = []
    for j, d in enumerate(doms):
        if j in pairs:
            continue
        if j in inner_of:
            outer = doms[inner_of[j]]
            whole = d.extent[1] if isinstance(d.extent, tuple) else (splits or {}).get(d.number)
            if whole is None:
                assert isinstance(d.extent, int) and isinstance(outer.extent, int)
                whole = d.extent * outer.extent
            if isinstance(whole, tuple):
                raise ParseError(d.loc, f"cannot map {d.text!r}: nested splits")
            out.append(Ax(whole, outer.device, False, "r" in (d.kind, outer.kind), d.number))
            continue
        if j in inner_splits:
            continue
        nxt = doms[j + 1] if j + 1 < len(doms) else None
        if isinstance(d.extent, tuple):
            if nxt is not None and nxt.device and d.extent[2] == nxt.extent:
                whole, n = d.extent[1], nxt.extent
                if not (isinstance(whole, int) and isinstance(n, int) and whole % n == 0 and "r" not in d.kind):
                    raise ParseError(nxt.loc, f"cannot map {nxt.text!r}: an inner split puts the device axis inside "
                                     "the logical axis (device k holds i*d + k); refir's interleaved axis (spec "
                                     "§3.4) is that only where d divides a static extent (DTensor's rule differs "
                                     "elsewhere)")
                # device k holds rows i*n + k: E/n pieces of n rows, one row of each per device (§3.4)
                out.append(Ax(whole, nxt.device, False, False, d.number, whole // n if whole > n else 1))
                inner_splits.add(j + 1)
                continue
            raise ParseError(d.loc, f"cannot map {d.text!r}: ceilDiv extent without the device axis before it")
        if d.kind == "b" and d.extent != 1:
            raise ParseError(d.loc, f"cannot map {d.text!r}: a broadcast domain of extent {d.extent}")
        out.append(Ax(d.extent, d.device, d.kind == "b", d.kind == "r", d.number))
    return out


STREAM = "streamIdx"


def kept(axes: list[Ax]) -> list[Ax]:
    return [a for a in axes if not a.reduced]


def flags_of(call: Call, key: str) -> list[bool] | None:
    value = call.keywords.get(key)
    if value is None:
        return None
    words = re.findall(r"true|false|1|0", value)
    return [w in ("true", "1") for w in words]
