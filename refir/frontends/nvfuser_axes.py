"""nvFuser's printed IterDomains as refir's logical axes, and the equality
classes the importer keeps over extents and dtypes (refir/frontends/nvfuser.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product

from refir.errors import Loc, ParseError
from refir.frontends.nvfuser_dump import Call, Domain, TVRef
from refir.ir.blocks import nested_block


@dataclass
class Ax:
    """A logical axis of an imported TensorView (reduced ones included)."""

    extent: int | str
    shard: str | tuple[str, ...] | None  # a mesh axis, or a nest of them, outermost first
    broadcast: bool
    reduced: bool
    number: int  # nvFuser's IterDomain number, for permutation order
    terms: bool = False  # reduced, but its device domains iterate: each device holds a term (a partial)
    parts: tuple[int, ...] = ()  # a nest's device counts, outermost first
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


def split_partners(doms: list[Domain], splits: dict[int, object], static: bool,
                   split_from: dict[int, tuple[int, int]] | None = None) -> dict[int, int]:
    """outer position -> inner position of the loop splits printed in one TensorView.
    An inner domain an `Outer split:` line made pairs with that line's outer
    domain; an inner `ceilDiv(E, n)` pairs with the device or stream domain of
    extent n just before it, or with the one numbered one below it (nvFuser makes
    a split's outer and inner domains one after the other, and may print the
    device one first: `ideviceIdx.x11{2}, iS2{2}, iS12{4}`).
    With `static`, a static inner numbered one above a device or stream domain of
    static extent pairs too (`ideviceIdx.x7{2}, iS8{3}` is an axis of 6): the
    reading the importer tries where the plain one does not fit (nvfuser_ops)."""
    pairs: dict[int, int] = {}
    taken: set[int] = set()
    numbered = {d.number: i for i, d in enumerate(doms)}
    for j, inner in enumerate(doms):
        k = numbered.get((split_from or {}).get(inner.number, (-1, -1))[0])
        if k is not None and k not in taken and j not in taken and _outer_of(doms[k]):
            pairs[k] = j
            taken |= {k, j}
    for j, inner in enumerate(doms):
        if j in taken:
            continue
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


def nest_of(doms: list[Domain], i: int, j: int, splits: dict[int, object],
            split_from: dict[int, tuple[int, int]], taken: set[int]) -> tuple[list[int], object]:
    """The outer domains of the splits that made doms[j], outermost split first
    (doms[i] is the last), and the logical extent they split. A split of a split
    is a nest (docs/spec.md §3.2): nvFuser splits the logical axis by |DIDy|, then
    its inner part by |DIDx|, so the inner domain's extent reads
    `ceilDiv(ceilDiv(E, |DIDy|), |DIDx|)`, or `Outer split:` lines chain. Found
    outer domains join `taken`."""
    d, chain = doms[j], [i]
    if d.number in split_from:  # the transforms are printed: follow them
        numbered = {x.number: k for k, x in enumerate(doms)}
        cur, whole = d.number, splits[d.number]
        while split_from[cur][1] in split_from:
            cur = split_from[cur][1]
            k = numbered.get(split_from[cur][0])
            if k is None or k in taken or not _outer_of(doms[k]):
                shown = doms[k].text if k is not None else f"the domain numbered {split_from[cur][0]}"
                raise ParseError(doms[chain[0]].loc, f"cannot map {doms[chain[0]].text!r}: it splits the inner part "
                                 f"of an outer split whose outer part, {shown}, is not a device domain of "
                                 "this TensorView; refir nests device splits only")
            chain.insert(0, k)
            taken.add(k)
            whole = splits[cur]
        return chain, whole
    whole = d.extent[1] if isinstance(d.extent, tuple) else splits.get(d.number)
    while isinstance(whole, tuple):
        n, first = whole[2], doms[chain[0]]
        k = next((k for k, o in enumerate(doms) if k not in taken and k != j and _outer_of(o) and o.extent == n
                  and (k == chain[0] - 1 or o.number + 2 == first.number)), None)
        if k is None:
            raise ParseError(d.loc, f"cannot map {d.text!r}: its extent {extent_text(d.extent)} splits a split, and no "
                             f"device domain of extent {n} is printed before {first.text} to nest it with")
        chain.insert(0, k)
        taken.add(k)
        whole = whole[1]
    return chain, whole


def extent_text(e: object) -> str:
    return f"ceilDiv({extent_text(e[1])}, {e[2]})" if isinstance(e, tuple) else str(e)


def _nest_axis(doms: list[Domain], chain: list[int], j: int, whole: int | str) -> Ax:
    """One logical axis from its nest of outer splits (`chain`) and inner domain."""
    d, outers = doms[j], [doms[k] for k in chain]
    devices = [o.device for o in outers if o.device]
    if devices and any(o.device is None for o in outers[:outers.index(next(o for o in outers if o.device))]):
        raise ParseError(d.loc, f"cannot map {d.text!r}: a device split inside a stream split interleaves the "
                         "devices' blocks; refir shards contiguous blocks")
    if len(set(devices)) != len(devices):
        raise ParseError(d.loc, f"cannot map {d.text!r}: one axis split twice over the same mesh axis "
                         f"({', '.join(o.text for o in outers)})")
    shard = None if not devices else devices[0] if len(devices) == 1 else tuple(devices)
    parts = tuple(o.extent for o in outers if o.device)
    if len(devices) > 1 and isinstance(whole, int) and all(isinstance(n, int) for n in parts):
        differ = next((ks for ks in product(*map(range, parts))
                       if split_block(whole, parts, ks) != nested_block(whole, parts, ks)), None)
        if differ is not None:
            theirs, ours = split_block(whole, parts, differ), nested_block(whole, parts, differ)
            raise ParseError(d.loc, f"cannot map {d.text!r}: nvFuser's outer splits of {whole} by "
                             f"{', '.join(map(str, parts))} give the device at {differ} rows "
                             f"{theirs[0]}:{theirs[1]}, refir's nest @({','.join(devices)}) rows {ours[0]}:{ours[1]} "
                             "(an inner split cuts the padded ceilDiv block, refir the block itself, docs/spec.md "
                             "§3.2); they agree where every split but the innermost divides evenly")
    reduced = "r" in [d.kind, *(o.kind for o in outers)]
    # `ideviceIdx.x22{2}rf, rS23{4}rf`: an rFactor's device domain that the
    # reduction leaves as an iteration: each device holds its own term.
    terms = reduced and d.kind == "r" and all(o.kind == "i" for o in outers if o.device)
    return Ax(whole, shard, False, reduced, d.number, terms, parts if len(devices) > 1 else ())


def split_block(extent: int, parts: tuple[int, ...], ks: tuple[int, ...]) -> tuple[int, int]:
    """[start, stop) of the device at coordinates `ks` under nvFuser's outer splits
    of an axis of `extent` by `parts`, outermost first: each split cuts the padded
    extent of the domain before it into ceilDiv parts, and the predicates of the
    splits that do not divide (and the logical extent) mask what lies past the
    end of each split domain."""
    start, size, limit = 0, extent, extent
    for n, k in zip(parts, ks):
        limit = min(limit, start + size)
        size = -(-size // n)
        start += k * size
    return min(start, limit), min(start + size, limit)


def logical_axes(ref: TVRef, splits: dict[int, object] | None = None, static: bool = False,
                 split_from: dict[int, tuple[int, int]] | None = None) -> list[Ax]:
    """The printed domains as logical axes: a device (or stream) domain of extent n
    and the `ceilDiv(E, n)` it splits off are one axis E, sharded on that device
    axis (a stream axis changes when work runs, not what it computes: the axis is
    E, unsharded); so is a device domain and one that an `Outer split:` line made,
    and a nest of them (`nest_of`). The axis stands where the inner domain is
    printed (nvFuser moves device domains outermost in the loop domain)."""
    doms = list(ref.domains)
    splits, split_from = splits or {}, split_from or {}
    for d in doms:
        if d.kind not in "irb" or (d.ptype not in ("S", "US", STREAM) and not d.device):
            # blockIdx/threadIdx/vectorize...: a scheduled kernel's loop domain, whose merges and
            # splits of the logical axes the printout does not show (their extents are ceilDivs).
            raise ParseError(d.loc, f"cannot map IterDomain {d.text!r}: refir knows serial (S), "
                             "device (deviceIdx.x/y/z), stream, reduction and broadcast domains, not parallel "
                             f"type {d.ptype!r} (a scheduled kernel's loop domain, which does not show the "
                             "logical axes: print the fusion before it is scheduled, as fd.fusion.print_math() "
                             "or fusion->printMath() before scheduling, or with its transforms, whose logical "
                             "domains refir reads: fusion->print(), fd.fusion.print_transforms())")
    pairs = split_partners(doms, splits, static, split_from)
    taken = set(pairs)
    nests = {j: nest_of(doms, i, j, splits, split_from, taken) for i, j in pairs.items()}
    inner_splits: set[int] = set()  # device domains an inner split put inside its axis
    out: list[Ax] = []
    for j, d in enumerate(doms):
        if j in taken:
            continue
        if j in inner_splits:
            continue
        if j in nests:
            chain, whole = nests[j]
            if whole is None:
                outer = doms[chain[-1]]
                assert isinstance(d.extent, int) and isinstance(outer.extent, int)
                whole = d.extent * outer.extent
            assert isinstance(whole, (int, str))
            out.append(_nest_axis(doms, chain, j, whole))
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
                out.append(Ax(whole, nxt.device, False, False, d.number, split=whole // n if whole > n else 1))
                inner_splits.add(j + 1)
                continue
            raise ParseError(d.loc, f"cannot map {d.text!r}: ceilDiv extent without the device axis before it")
        if d.kind == "b" and d.extent != 1:
            raise ParseError(d.loc, f"cannot map {d.text!r}: a broadcast domain of extent {d.extent}")
        out.append(Ax(d.extent, d.device, d.kind == "b", d.kind == "r", d.number))
    return out


def static_nest_hint(ref: TVRef, split_from: dict[int, tuple[int, int]]) -> str:
    """What to print where a statement does not fit and `ref` may be a static nest
    printed without its transforms (`ideviceIdx.y2{2}, ideviceIdx.x4{2}, iS5{2}`:
    two outer splits of one axis read the same as two axes)."""
    doms = ref.domains
    for a, b, c in zip(doms, doms[1:], doms[2:]):
        if (a.device and b.device and isinstance(a.extent, int) and isinstance(b.extent, int)
                and isinstance(c.extent, int) and c.ptype == "S" and a.number + 2 == b.number == c.number - 1
                and c.number not in split_from):
            return (f" ({ref.name}'s {a.text}{{{a.extent}}}, {b.text}{{{b.extent}}}, {c.text}{{{c.extent}}} may be one "
                    "axis split twice: a static nest is read from its `Outer split:` lines, which this printout lacks)")
    return ""


STREAM = "streamIdx"


def kept(axes: list[Ax]) -> list[Ax]:
    return [a for a in axes if not a.reduced]


def flags_of(call: Call, key: str) -> list[bool] | None:
    value = call.keywords.get(key)
    if value is None:
        return None
    words = re.findall(r"true|false|1|0", value)
    return [w in ("true", "1") for w in words]
