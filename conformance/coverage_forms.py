"""`conform --coverage`'s resharding rows: every `set` that moves a value (a mesh,
sharding or partial changed), counted by its source and target form (the rows of
conformance/generate_forms.py's FORMS) and where it runs: the same mesh of 1, 2 or
3 dimensions, or another mesh; from a partial value, by kind and target form; and
each set from or to a value with an interleaved axis (§3.4, a partial one too), by
the other side's form and how the interleaved axes cut: into runs of one length
on every device or not, in a nest, on a partial value. A count, not a tick: a
user sees how often each pair was exercised."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from rich.table import Table

from conformance.cases import Case
from conformance.generate_forms import NAMES, form_of, is_resharding
from refir.ir import ops
from refir.ir.types import PARTIAL_KINDS, TensorType, axis_length, extent_value

COLUMNS = ("1-D", "2-D", "3-D", "another mesh")
SPLIT_COLUMNS = ("even", "uneven", "in a nest", "partial")  # how the interleaved side's axes cut
SPLIT_PHRASES = {"even": "cut into runs of one length on every device", "uneven": "cut into runs of unequal length",
                 "in a nest": "interleaved in a nest", "partial": "also partial"}
SPLIT_ROWS = tuple((side, other) for side in ("from", "to") for other in NAMES)  # interleaved side, other form


def pairs_of(case: Case) -> Counter:
    """(from form, to form, column) and (partial kind, to form, column) of every resharding set."""
    out: Counter = Counter()
    types = case.checked.types
    for e in case.checked.func.eqns:
        if not isinstance(e.op, ops.Set):
            continue
        s, d = types[e.args[0].name], types[e.out]
        if is_resharding(s, d):
            out[(form_of(s), form_of(d), column(s, d))] += 1
            for side, t, other in (("from", s, d), ("to", d, s)):
                out.update(("split", side, form_of(other), c) for c in split_columns(t, case.bindings))
    return out


def split_columns(t: TensorType, bindings: dict[str, int]) -> list[str]:
    """SPLIT_COLUMNS that t's interleaved axes have (none: t has none)."""
    strided = [a for a in t.axes if a.split]
    if not strided:
        return []
    even = all(len({axis_length(t.mesh, a, extent_value(a.extent, bindings), k) for k in t.mesh.devices}) == 1
               for a in strided)
    return ["even" if even else "uneven"] + ["in a nest"] * any(a.nested for a in strided) + ["partial"] * bool(
        t.partial)


def kinds_of(case: Case) -> Counter:
    out: Counter = Counter()
    types = case.checked.types
    for e in case.checked.func.eqns:
        s = types[e.args[0].name] if isinstance(e.op, ops.Set) else None
        if s is not None and s.partial and is_resharding(s, types[e.out]):
            out[(s.partial_kind, form_of(types[e.out]))] += 1
    return out


def column(s: TensorType, d: TensorType) -> str:
    return "another mesh" if s.mesh != d.mesh else f"{s.mesh.ndim}-D"


def allowed(src: str, dst: str, col: str) -> bool:
    """Whether some valid program has such a resharding (spec §3.2, partial_c1, partial_c5)."""
    if col == "another mesh":
        return dst != "partial"  # a partial target stays on its source's mesh
    if src == dst == "replicated":
        return False  # the same mesh and placement: a copy
    if col == "1-D":  # no nest on one mesh axis, and a partial over it leaves no other placement
        return "nested" not in (src, dst) and (src, dst) != ("partial", "partial")
    return True


def _cell(n: int, ok: bool) -> str:
    return "" if not ok else str(n) if n else "✗"


def tables(pairs: Counter, kinds: Counter, table: Callable[[str, Iterable[str]], Table]) -> list[Table]:
    """`table(title, columns)` makes an empty table in coverage's style."""
    t = table("reshardings (set) from form to form x mesh: how many sets", COLUMNS)
    for src in NAMES:
        for dst in NAMES:
            t.add_row(f"{src} -> {dst}", *(_cell(pairs[(src, dst, c)], allowed(src, dst, c)) for c in COLUMNS))
    k = table("reshardings from a partial value: kind x to form, how many sets", NAMES)
    for kind in PARTIAL_KINDS:
        k.add_row(kind, *(_cell(kinds[(kind, dst)], True) for dst in NAMES))
    i = table("reshardings from or to an interleaved axis (§3.4): its cut x the other side's form, how many sets",
              SPLIT_COLUMNS)
    for side, other in SPLIT_ROWS:
        i.add_row(_split_row(side, other), *(_cell(pairs[("split", side, other, c)], True) for c in SPLIT_COLUMNS))
    return [t, k, i]


def _split_row(side: str, other: str) -> str:
    return f"from: interleaved -> {other}" if side == "from" else f"to: {other} -> interleaved"


def missing(pairs: Counter, kinds: Counter, why: str) -> list[str]:
    out = [f"a set {src} -> {dst} on {'another mesh' if c == 'another mesh' else f'a {c} mesh'}: {why}"
           for src in NAMES for dst in NAMES for c in COLUMNS if allowed(src, dst, c) and not pairs[(src, dst, c)]]
    out += [f"a set from a {kind}-partial to {dst}: {why}" for kind in PARTIAL_KINDS for dst in NAMES
            if not kinds[(kind, dst)]]
    return out + [f"a set {_split_row(side, other).split(': ')[1]}, the {'source' if side == 'from' else 'target'} "
                  f"{SPLIT_PHRASES[c]}: {why}"
                  for side, other in SPLIT_ROWS for c in SPLIT_COLUMNS if not pairs[("split", side, other, c)]]
