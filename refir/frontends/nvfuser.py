"""nvFuser fusion IR -> refir: `refir.from_nvfuser(text)`, `python -m refir import-nvfuser`.

The statements read by refir/frontends/nvfuser_parse.py become one refir
function: every TensorView keeps its name (`T4_g` becomes `T4`), every equation
is preceded by the statement it came from, as a comment. Segments join where a
later one reads an earlier one's output, or where the user links an input to an
output (`--link T5=T4`: `T5 = set(T4)`). Whatever cannot be mapped is a
ParseError at its token; every guess the importer makes about a damaged paste
is written into the program's header as a note (docs/frontends/nvfuser.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from refir.errors import InputError, Loc, ParseError
from refir.frontends.nvfuser_axes import Ax, EqualityClasses, kept, logical_axes, static_nest_hint
from refir.frontends.nvfuser_dump import LATER, Call, Domain, Scalar, Statement, TVRef, results_of
from refir.frontends.nvfuser_forms import logical_views, one_copy, read_splits, stream_note, stream_views
from refir.frontends.nvfuser_ops import OpMapper, communication_notes, short
from refir.frontends.nvfuser_parse import parse_dump
from refir.frontends.nvfuser_text import mesh_text, quotient_text, sharding_text
from refir.ir.program import Program
from refir.ir.types import RESERVED
from refir.text.parser import parse, parse_extent


@dataclass
class Imported:
    """The program, its text, and every assumption the importer made."""

    program: Program
    text: str
    notes: list[str] = field(default_factory=list)


class Importer(OpMapper):
    def __init__(self, text: str, file: str, links: dict[str, str], bullet: str = "+",
                 option: str = "links", static: frozenset[str] = frozenset(), lost: str | None = None) -> None:
        self.dump = parse_dump(text, file)
        self.static = static  # TensorViews whose static loop splits read as one axis (nvfuser_forms)
        self.notes: list[str] = []
        one_copy(self.dump, self.notes)
        logical_views(self.dump, self.notes)
        stream_views(self.dump, self.notes)
        stream_note(self.dump, self.notes)
        self.file = file
        self.links = links
        self.option = option  # how errors name a link: "links" (the API) or "--link" (the command line)
        self.bullet = bullet
        self.lost = lost  # the infix operator a paste lost between two operands (None: refused)
        self.syms = EqualityClasses()
        self.dtypes = EqualityClasses()
        self.refs: dict[str, TVRef] = {}  # name -> the printing that fixes its type
        self.axes: dict[str, list[Ax]] = {}
        self.layouts: dict[str, tuple[int, ...]] = {}
        self.eqns: list[tuple[str, str, list[str]]] = []  # (out, call text, comments)
        self.local_types: dict[str, tuple[list[Ax], tuple]] = {}  # helper values: axes, mesh
        self.comm_kinds: dict[str, str] = {}  # out -> the communication nvFuser printed for it
        self.pads: dict[str, tuple[str, tuple[int, ...]]] = {}  # a pad's result -> its operand, low widths
        self.partials: dict[str, tuple[str, tuple[str, ...]]] = {}  # pending terms: kind, mesh axes (nvfuser_partial)

    # ---- TensorViews and their types ----------------------------------------------------

    def learn(self, ref: TVRef) -> None:
        """Record a printing of a TensorView: its first full printing fixes the
        axes; every other must agree, extent for extent."""
        axes = logical_axes(ref, self.dump.splits, ref.name in self.static, self.dump.split_from)
        if ref.name not in self.refs:
            self.refs[ref.name] = ref
            self.axes[ref.name] = axes
        else:
            known = self.axes[ref.name]
            if len(kept(known)) != len(kept(axes)):
                raise ParseError(ref.loc, f"{ref.name} is printed with {len(kept(axes))} axes here and "
                                 f"{len(kept(known))} elsewhere")
            for a, b in zip(kept(known), kept(axes)):
                self.same_extent(a, b, ref.loc, ref.name)
            old = self.refs[ref.name]
            if old.mesh is None and ref.mesh is not None or old.dtype is None and ref.dtype is not None:
                self.refs[ref.name] = TVRef(old.name, old.spelling, old.domains, old.mesh or ref.mesh,
                                            old.dtype or ref.dtype, old.loc)
        if ref.dtype:
            self.dtypes.fix(ref.name, ref.dtype, ref.loc, f"the dtype of {ref.name}")

    def note_nests(self) -> None:
        """A nest of symbolic extent is refir's nested rule only where nvFuser's
        padded inner splits cut the same blocks (nvfuser_axes.split_block)."""
        seen: dict[tuple, list[str]] = {}
        for name, axes in self.axes.items():
            for a in axes:
                if a.parts and isinstance(a.extent, str):
                    seen.setdefault((self.extent(a), a.parts, a.shard), []).append(name)
        for (extent, parts, shard), names in seen.items():
            names = sorted(names, key=lambda n: (len(n), n))
            outer = "*".join(map(str, parts[:-1]))
            self.notes.append(f"{', '.join(names)}: the axis {extent} is split by {', '.join(map(str, parts))} in "
                              f"turn (a nest, @({','.join(shard)})); refir cuts each block by its own length, "
                              f"nvFuser by the padded ceilDiv one: the same blocks where {outer} divides {extent} "
                              "(docs/spec.md §3.2)")

    def same_extent(self, a: Ax, b: Ax, loc: Loc, where: str) -> None:
        if a.broadcast or b.broadcast:
            return
        what = f"extents in {where}"
        ka, kb = (f"#{x.extent}" if isinstance(x.extent, int) else x.extent for x in (a, b))
        for k, x in ((ka, a), (kb, b)):
            self.syms.find(k)
            if isinstance(x.extent, int):
                self.syms.fix(k, x.extent, loc, what)
        self.syms.join(ka, kb, loc, what)

    def extent(self, a: Ax) -> str:
        if isinstance(a.extent, int):
            return str(a.extent)
        if not a.extent.isidentifier():  # `i1/4`: each symbol as refir names it, then canonical again
            return quotient_text(parse_extent(a.extent), lambda s: self.extent(Ax(s, None, False, False, 0)))
        r = self.syms.find(a.extent)
        if r in self.syms.value:
            return str(self.syms.value[r])
        members = sorted((k for k in self.syms.parent if self.syms.find(k) == r and not k.startswith("#")),
                         key=lambda s: (int(s[1:]) if re.fullmatch(r"i\d+", s) else 1 << 30, s))
        name = members[0]
        return name + "_" if name in RESERVED else name

    def mesh_of(self, name: str) -> tuple:
        ref = self.refs[name]
        if ref.mesh is None:
            raise ParseError(ref.loc, f"{name} is printed without a DeviceMesh and none can be inferred")
        return ref.mesh

    # ---- statements -------------------------------------------------------------------

    def run(self) -> Imported:
        d = self.dump
        if not d.statements and not d.inputs:
            raise ParseError(Loc(self.file, 1, 1), "no nvFuser fusion IR found (no `Tn_g[...] = ...` statement)")
        # A definition's printing shows its reduced domains: it fixes the axes.
        # Then operands: a Communication's input may be printed nowhere else (its
        # producer in a host unit the paste left out).
        args = [a for s in d.statements for a in ([s.expr] if isinstance(s.expr, TVRef) else s.expr.args)
                if isinstance(a, TVRef)]
        for ref in [s.out for s in d.statements] + d.mentions + d.inputs + d.outputs + args:
            if ref.name:
                self.learn(ref)
        self.infer_meshes()
        self.find_partials()
        defined = {s.out.name: s for s in d.statements}
        for dst, src in self.links.items():
            for n in (dst, src):
                if n not in self.refs:
                    known = sorted(self.refs, key=lambda r: (len(r), r))
                    raise InputError(f"{self.link(dst, src)}: {self.file} has no TensorView {n} "
                                     f"(it has {', '.join(known[:12])}{', ...' if len(known) > 12 else ''})")
            if dst in defined:
                raise ParseError(defined[dst].out.loc, f"{self.link(dst, src)}: {dst} is already defined here")
        reads: list[str] = []
        read_in: dict[str, set[int]] = {}  # the segments whose statements read each TensorView
        for s in d.statements:
            for a in self.operands(s):
                if isinstance(a, TVRef):
                    reads.append(a.name)
                    read_in.setdefault(a.name, set()).add(s.segment)
        reads += list(self.links.values())
        for src in self.links.values():  # a link passes a segment's output on to another's input
            read_in.setdefault(src, set()).add(LATER)
        params = [r.name for r in d.inputs if r.name not in defined and r.name not in self.links]
        params += [n for n in reads if n not in defined and n not in self.links]
        params = list(dict.fromkeys(params))
        results = results_of([r.name for r in d.outputs], defined, set(reads), read_in)
        done: set[str] = set(params)
        for i, s in enumerate(d.statements):
            try:
                self.statement(s)
            except ParseError as e:  # nvfuser_forms.read_splits may read its TensorViews' splits otherwise
                names = [r.name for r in [s.out, *self.operands(s)] if isinstance(r, TVRef) and r.name]
                hint = next((h for n in names for h in [static_nest_hint(self.refs[n], self.dump.split_from)] if h), "")
                if hint and hint not in e.message:
                    e = ParseError(e.loc, e.message + hint)
                e.tensorviews, e.statement_index = names, i
                raise e from None
        for dst, src in self.links.items():
            self.set_like(dst, self.refs[src], self.refs[dst].loc)
            self.eqns.insert(self._after(src), (dst, f"set({src})", [f"{self.link(dst, src)}: "
                                                                     f"{self.refs[dst].spelling}"]))
        order = self.topological(done)
        return self.emit(params, order, results)

    def link(self, dst: str, src: str) -> str:
        return f"--link {dst}={src}" if self.option == "--link" else f"links={{{dst!r}: {src!r}}}"

    def operands(self, s: Statement) -> list[TVRef | Scalar]:
        if isinstance(s.expr, TVRef):
            return [s.expr]
        return list(self._resolve_args(s))

    def _resolve_args(self, s: Statement) -> tuple[TVRef | Scalar, ...]:
        assert isinstance(s.expr, Call)
        return tuple(self.nameless(a, s) if isinstance(a, TVRef) and not a.name else a for a in s.expr.args)

    def nameless(self, a: TVRef, s: Statement) -> TVRef:
        """An operand pasted without its name is the one known TensorView whose
        logical extents the result carries (nvFuser prints a result's domains with
        its producer's extents)."""
        want = [x.extent for x in logical_axes(s.out, self.dump.splits, s.out.name in self.static,
                                                   self.dump.split_from)]
        hits = [n for n, axes in self.axes.items()
                if n != s.out.name and [x.extent for x in kept(axes)] == want]
        if len(hits) != 1:
            raise ParseError(a.loc, f"cannot map the operand {a.spelling!r}: it has no TensorView name, and "
                             f"{'no' if not hits else 'more than one'} TensorView has the result's extents {want}")
        note = (f"{a.loc}: the operand {a.spelling} has no TensorView name; taken as {hits[0]}, the one "
                f"TensorView with the extents {want} that {s.out.name} carries")
        if note not in self.notes:
            self.notes.append(note)
        return self.refs[hits[0]]

    def _after(self, name: str) -> int:
        for i, (out, _, _) in enumerate(self.eqns):
            if out == name:
                return i + 1
        return 0

    def topological(self, ready: set[str]) -> list[tuple[str, str, list[str]]]:
        """Equations in an order where every operand is defined first."""
        pending, order = list(self.eqns), []
        while pending:
            for k, (out, call, _) in enumerate(pending):
                if all(n in ready for n in re.findall(r"\b(T\d+\w*)\b", call) if n != out):
                    order.append(pending.pop(k))
                    ready.add(out)
                    break
            else:
                out = pending[0][0]
                raise ParseError(self.refs[out].loc, f"{out} reads a TensorView that nothing defines "
                                 "(a cycle, or a segment input that is also defined)")
        return order

    def infer_meshes(self) -> None:
        meshes = {r.mesh for r in self.refs.values() if r.mesh is not None}
        if not meshes:
            self.notes.append("the dump prints no DeviceMesh: every TensorView is put on mesh [0]")
        for s in self.dump.statements:
            if self.refs[s.out.name].mesh is None:
                src = next((a for a in self.operands(s) if isinstance(a, TVRef) and self.refs[a.name].mesh), None)
                mesh = self.refs[src.name].mesh if src else (next(iter(meshes)) if len(meshes) == 1 else None)
                self._set_mesh(s.out.name, mesh or ((1,), (0,)))
        for n, r in list(self.refs.items()):
            if r.mesh is None:
                if len(meshes) > 1:
                    raise ParseError(r.loc, f"{n} is printed without a DeviceMesh, and the dump uses several")
                self._set_mesh(n, next(iter(meshes)) if meshes else ((1,), (0,)))

    def _set_mesh(self, name: str, mesh: tuple) -> None:
        r = self.refs[name]
        self.refs[name] = TVRef(r.name, r.spelling, r.domains, mesh, r.dtype, r.loc)

    # ---- the refir text ---------------------------------------------------------------

    def type_text(self, name: str) -> str:
        if name in self.local_types:
            axes, mesh = self.local_types[name]
            layout = None
        else:
            axes, mesh, layout = kept(self.axes[name]), self.refs[name].mesh, self.layouts.get(name)
        dims = ", ".join("b" if a.broadcast else self.extent(a) + sharding_text(a.shard)
                         + (f":{a.split}" if a.shard and a.split > 1 else "") for a in axes)
        text = f"{self.dtype(name)}[{dims}] on {self.mesh_names[mesh]}"
        text += f" layout[{', '.join(map(str, layout))}]" if layout else ""
        return text + (self.partial_text(name) if name not in self.local_types else "")

    def note_joined_symbols(self) -> None:
        """Say which of nvFuser's symbols the ops made one extent."""
        classes: dict[str, list[str]] = {}
        for k in self.syms.parent:
            if not k.startswith("#"):
                classes.setdefault(self.syms.find(k), []).append(k)
        for members in classes.values():
            if len(members) > 1:
                names = sorted(members, key=lambda s: (int(s[1:]) if re.fullmatch(r"i\d+", s) else 1 << 30, s))
                shown = self.extent(Ax(names[0], None, False, False, 0))
                self.notes.append(f"the ops make {', '.join(names)} one extent, written {shown}")

    def extents_in(self, call: str) -> str:
        """An op's extent operands (expand's), written as the types write them."""
        return re.sub(r"\{\{extent:([^}]+)\}\}", lambda m: self.extent(Ax(int(m.group(1)) if m.group(1).isdigit()
                      else m.group(1), None, False, False, 0)), call)

    def dtype(self, name: str) -> str:
        r = self.dtypes.find(name)
        if r not in self.dtypes.value:
            self.dtypes.value[r] = "f32"
            self.notes.append(f"no dtype is printed for {name} or anything tied to it: f32")
        return str(self.dtypes.value[r])

    def emit(self, params: list[str], order: list, results: list[str]) -> Imported:
        meshes: list[tuple] = []
        for n in params + [o for o, _, _ in order]:
            m = self.local_types[n][1] if n in self.local_types else self.refs[n].mesh
            if m not in meshes:
                meshes.append(m)
        self.mesh_names = {m: ("m" if len(meshes) == 1 else f"m{i}") for i, m in enumerate(meshes)}
        body = [f"  {o}: {self.type_text(o)} = {self.extents_in(call)}" for o, call, _ in order]  # types add notes
        self.note_joined_symbols()
        self.note_nests()
        head = [f"func main({', '.join(f'{p}: {self.type_text(p)}' for p in params)}) {{"]
        lines = []
        for m, name in self.mesh_names.items():
            lines.append(f"mesh {name} = {mesh_text(list(m[1]), m[0])}")
        lines.append("")
        for p in params:
            lines.append(f"# {p}: {short(self.refs[p].spelling)}")
        lines += head
        for (_, _, comments), text in zip(order, body):
            lines += [f"  # {c}" for c in comments]
            lines.append(text)
        lines += [f"  return {', '.join(results)}", "}", ""]
        self.notes += communication_notes(self.eqns, self.comm_kinds,
                                          parse("\n".join(lines), f"{self.file} (imported)"))
        header = [f"# Imported from nvFuser fusion IR ({self.file}) by `refir import-nvfuser`."]
        text = "\n".join(header + [f"# note: {n}" for n in self.notes] + lines)
        program = parse(text, f"{self.file} (imported)")
        return Imported(program, text, self.notes)

def import_nvfuser(text: str, file: str = "<dump>", links: dict[str, str] | None = None,
                   bullet: str = "+", option: str = "links", lost: str | None = None) -> Imported:
    """The refir program of an nvFuser dump, its .rir text and the importer's notes.
    `option` names the links in messages: `links` (the API) or `--link` (the command line);
    `lost`: the infix operator (+ - * /) a paste lost between two operands (None: refused)."""
    if not isinstance(text, str):
        raise InputError(f"the dump is a {type(text).__name__}: pass its text (a str)")
    if links is not None and (not isinstance(links, dict)
                              or not all(isinstance(k, str) and isinstance(v, str) for k, v in links.items())):
        raise InputError(f"links={links!r}: map each later input to the earlier output it is, "
                         "e.g. links={'T5': 'T4'}")
    if lost is not None and lost not in ("+", "-", "*", "/"):
        raise InputError(f"lost={lost!r}: the operator a paste lost is one of + - * /")
    return read_splits(lambda static: Importer(text, file, dict(links or {}), bullet, option, static, lost).run())


def from_nvfuser(text: str, links: dict[str, str] | None = None) -> Program:
    """`refir.from_nvfuser(dump_text)`: the refir Program of a printed fusion."""
    return import_nvfuser(text, links=links).program


__all__ = ["Domain", "Imported", "from_nvfuser", "import_nvfuser", "Statement"]

