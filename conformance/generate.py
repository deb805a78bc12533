"""Random valid programs and their input data, built from a stream of draws.

`generate(draw)` asks `draw.below(n)` for every decision, and 0 is always the
simplest answer (fewer equations, no sharding, row-major, exact data). So the
same code runs under hypothesis (conformance/strategies.py) and from a seed
(conformance/shrink.py), and shrinking the draws shrinks the program.

The program is made through refir's Python builder (refir/frontends/builder.py), as a
user would make it: meshes, typed inputs, one call per equation with the
result type the draws chose (or `typed=False`: inferred), results, `build()`.
Text, where it is needed (failure files, --save, the shrinker's output), is
that program printed by refir's printer.

Programs are kept tiny (at most BUDGET elements per tensor at the largest
binding): the GPU simulator runs a Python thread per element. Any axis may be
sharded, whether or not its extent divides the mesh axis (spec §3.1): extents
of 1 and 3 over 2 or 4 devices give short and empty blocks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from math import lcm, prod
from typing import Protocol

from conformance import generate_reshape
from conformance.data import KINDS, DataSpec, View
from conformance.generate_broadcast import broadcast_menu
from conformance.generate_budget import BUDGET, STATIC  # noqa: E402
from conformance.generate_forms import forms_tail
from conformance.generate_masks import mask_step
from conformance.generate_reshape_expr import expression_tail
from conformance.generate_window import window_menu
from refir.frontends import builder
from refir.frontends.builder import Value
from refir.ir import ops
from refir.ir.program import Program
from refir.ir.types import BROADCAST, DIDS, FLOATS, INTEGERS, Axis, Extent, Mesh, TensorType
from refir.text.parser import parse
from refir.text.printer import print_program

SYMBOLS = ("N", "M", "P")
MESH_SHAPES = ((2, 2), (1, 2), (2, 1), (1, 2, 2), (2, 1, 2), (2, 2, 1))  # every 3-D mesh axis reaches 2
MAX_EQNS = 6
# Simplest first; i16 and bf16 last, so that the drawn programs of earlier dtypes stay as they were.
UNARY_DRAWN = tuple(u for u in ops.UNARY if u not in ops.MASK_UNARY)  # mask_step draws those
DTYPES_DRAWN = ("f32", "i32", "f64", "f16", "i64", "i8", "u8", "bool", "i16", "bf16")


class Draw(Protocol):
    def below(self, n: int) -> int:
        """An integer in [0, n); 0 is the simplest choice."""
        ...


@dataclass(frozen=True)
class Generated:
    program: Program
    bindings: tuple[dict[str, int], ...]  # one case each
    data: DataSpec
    spans: tuple[tuple[int, int], ...] = ()  # the draws of each list item (seeded draws only)


class Chooser:
    def __init__(self, draw: Draw) -> None:
        self.draw = draw
        self.count = 0  # draws so far
        self.spans: list[tuple[int, int]] = []  # draws that make one list item, for the shrinker

    def items(self, least: int, most: int, percent: int) -> Iterator[int]:
        """Indices of a list whose length is drawn item by item: a "one more?"
        flag before each optional item, so that deleting an item's draws (its
        span) leaves the items after it as they were."""
        for i in range(most):
            start = self.count
            if i >= least and not self.maybe(percent):
                return
            yield i
            self.spans.append((start, self.count))

    def below(self, n: int) -> int:
        if n <= 1:
            return 0
        self.count += 1
        return self.draw.below(n)

    def pick(self, options: list | tuple) -> object:
        return options[self.below(len(options))]

    def maybe(self, percent: int) -> bool:
        """True with this probability; the simplest draw says False."""
        return self.below(100) >= 100 - percent

    def permutation(self, n: int) -> tuple[int, ...]:
        out = list(range(n))
        for i in range(n - 1):
            j = i + self.below(n - i)
            out[i], out[j] = out[j], out[i]
        return tuple(out)


class Maker:
    """Draws one program and makes it through refir's builder: each method draws
    an op's choices, then calls it (on a `Value`), with its declared type or
    `typed=False` where the draws leave the type to inference."""

    def __init__(self, c: Chooser, b: builder.Builder, units: dict[str, int],
                 values: dict[str, tuple[int, ...]]) -> None:
        self.c = c
        self.b = b
        self.meshes = b.meshes
        self.units = units  # every binding of a symbol is a multiple of its unit
        self.values = values  # the bindings of each symbol
        self.views: list[tuple[str, View]] = []

    # ---- types -----------------------------------------------------------------------

    def largest(self, e: Extent) -> int:
        return e if isinstance(e, int) else max(self.values[e])

    def size(self, axes: tuple[Axis, ...]) -> int:
        return prod(self.largest(a.extent) for a in axes)

    def extent(self, room: int) -> Extent:
        symbols = [s for s in self.units if max(self.values[s]) <= room]
        if symbols and self.c.maybe(40):
            return self.c.pick(symbols)
        return self.c.pick([e for e in STATIC if e <= room])

    def fresh_axes(self, rank: int, room: int = BUDGET) -> tuple[Axis, ...]:
        axes = []
        for _ in range(rank):
            e = self.extent(room)
            room //= self.largest(e)
            axes.append(Axis(e))
        return tuple(axes)

    def place(self, axes: tuple[Axis, ...], mesh: Mesh, keep: dict[int, str] | None = None) -> tuple[Axis, ...]:
        """Shard some axes on the mesh's axes; `keep` shardings stay."""
        shard = dict(keep or {})
        for did in DIDS[:mesh.ndim]:
            if did in shard.values():
                continue
            free = [i for i, a in enumerate(axes)
                    if not a.broadcast and i not in shard]
            k = self.c.below(len(free) + 1)
            if k:
                shard[free[k - 1]] = did
        return tuple(replace(a, shard=shard.get(i)) for i, a in enumerate(axes))

    def layout(self, rank: int) -> tuple[int, ...] | None:
        return self.c.permutation(rank) if rank and self.c.maybe(50) else None

    def placed(self, dtype: str, axes: tuple[Axis, ...], mesh: Mesh | None = None,
               keep: dict[int, str] | None = None) -> TensorType:
        mesh = mesh or self.c.pick(self.meshes)
        return self.b.type(dtype, self.place(axes, mesh, keep), mesh, self.layout(len(axes)))

    def other_mesh(self, mesh: Mesh) -> Mesh:
        """Mostly the same mesh; sometimes the next pipeline stage."""
        return self.c.pick([m for m in self.meshes if m != mesh]) if len(self.meshes) > 1 and self.c.maybe(30) else mesh

    # ---- values ----------------------------------------------------------------------

    def param(self, t: TensorType) -> Value:
        """A new input, and how its array will lie in memory (drawn here, so that
        dropping a later equation leaves the earlier inputs as they were)."""
        x = self.b.input(f"x{len(self.b.params)}", t)
        c = self.c
        self.views.append((x.name, View(c.permutation(t.rank), tuple(1 + c.below(2) for _ in t.axes),
                                        tuple(c.maybe(50) for _ in t.axes))))
        return x

    def out(self, declared: TensorType | None) -> dict:
        """The next equation's name and its declared type, or none (inferred)."""
        name = f"t{len(self.b.eqns) + 1}"
        return {"name": name, "result_type": declared} if declared else {"name": name, "typed": False}

    def bound_symbols(self) -> list[str]:
        return sorted({s for p in self.b.params for s in p.type.symbols()})

    # ---- ops: each takes an operand and makes one equation --------------------------

    def unary(self, x: Value, t: TensorType) -> Value:
        kind = self.c.pick(UNARY_DRAWN if t.dtype in FLOATS else ("neg", "abs", "relu"))
        return x.unary(kind, **self.out(self.relaid(t)))

    def scalar(self, x: Value, t: TensorType) -> Value:
        names = ("maximum", "minimum") if t.dtype == "bool" else ops.BINARY if t.dtype in FLOATS else (
            "add", "sub", "mul", "maximum", "minimum")
        lits = (1, 0) if t.dtype == "bool" else (2.0, 0.5, -1.5, 3) if t.dtype in FLOATS else (2, -1, 3)
        symbols = self.bound_symbols() if t.dtype != "bool" else []
        # A symbol as a value, as global extent, is what nvFuser #2758 got wrong.
        s = self.b.sym(self.c.pick(symbols)) if symbols and self.c.maybe(50) else self.c.pick(lits)
        args = (s, x) if self.c.maybe(25) else (x, s)
        kind = self.c.pick(names)
        return builder.binary(kind, *args, **self.out(self.relaid(t)))

    def binary(self, x: Value, t: TensorType) -> Value:
        names = ("maximum", "minimum") if t.dtype == "bool" else ops.BINARY if t.dtype in FLOATS else (
            "add", "sub", "mul", "maximum", "minimum")
        y = x if self.c.maybe(20) else self.partner(t)
        u = y.type
        union = {i: a.shard or b.shard for i, (a, b) in enumerate(zip(t.axes, u.axes)) if a.shard or b.shard}
        axes = tuple(b if a.broadcast else a for a, b in zip(t.axes, u.axes))
        declared = None
        if self.c.maybe(60):
            declared = self.b.type(t.dtype, self.place(axes, t.mesh, union), t.mesh, self.layout(t.rank))
        args = (y, x) if self.c.maybe(25) else (x, y)
        kind = self.c.pick(names)
        return builder.binary(kind, *args, **self.out(declared))

    def partner(self, t: TensorType) -> Value:
        """A new input that may stand beside `t` in an elementwise op: same
        extents or `b`, each axis sharded as in `t` or replicated."""
        used = {a.shard for a in t.axes if a.shard}
        axes = []
        for a in t.axes:
            if a.broadcast or self.c.maybe(20):
                axes.append(BROADCAST)
            else:
                axes.append(Axis(a.extent, a.shard if a.shard and not self.c.maybe(30) else None))
        # Sometimes shard an axis `t` leaves whole, on a mesh axis `t` does not use.
        spare = [d for d in DIDS[:t.mesh.ndim] if d not in used]
        if spare and self.c.maybe(20):
            did = self.c.pick(spare)
            free = [i for i, a in enumerate(axes) if not a.broadcast and not t.axes[i].shard]
            if free:
                i = self.c.pick(free)
                axes[i] = replace(axes[i], shard=did)
        return self.param(self.b.type(t.dtype, axes, t.mesh, self.layout(t.rank)))

    def cast(self, x: Value, t: TensorType) -> Value:
        to = self.c.pick([d for d in DTYPES_DRAWN if d != t.dtype])
        return x.cast(to, **self.out(self.relaid(replace(t, dtype=to))))

    def permute(self, x: Value, t: TensorType) -> Value:
        perm = self.c.permutation(t.rank)
        moved = replace(t, axes=tuple(t.axes[p] for p in perm))
        return x.permute(perm, **self.out(self.relaid(moved)))

    def unsqueeze(self, x: Value, t: TensorType) -> Value:
        at = self.c.below(t.rank + 1)
        axes = t.axes[:at] + (BROADCAST,) + t.axes[at:]
        return x.unsqueeze([at], **self.out(self.relaid(replace(t, axes=axes))))

    def reduce(self, x: Value, t: TensorType) -> Value:
        kinds = ["sum", "prod", "max", "min"] if t.dtype in FLOATS else ["max", "min", "band", "bor", "bxor"]
        if t.dtype in INTEGERS:
            kinds = ["sum", "prod", "max", "min", "band", "bor", "bxor"]
        dims = tuple(sorted(self.c.permutation(t.rank)[:1 + self.c.below(t.rank)]))
        kept = tuple(replace(a, shard=None) for i, a in enumerate(t.axes) if i not in dims)
        partial = [t.axes[d].shard for d in dims if t.axes[d].shard]
        declared = None
        if partial and self.c.maybe(30):  # the partial sums land sharded: a reduce_scatter
            free = [i for i, a in enumerate(kept) if not a.broadcast]
            if free:
                declared = self.b.type(t.dtype, self.place(kept, t.mesh, {self.c.pick(free): partial[0]}), t.mesh,
                                       self.layout(len(kept)))
        if declared is None and self.c.maybe(70):
            declared = self.placed(t.dtype, kept, self.other_mesh(t.mesh))
        return x.reduce(self.c.pick(kinds), dims, **self.out(declared))

    def set(self, x: Value, t: TensorType) -> Value:
        if self.c.maybe(10):
            return x.set(**self.out(None))
        mesh = self.c.pick([t.mesh] + [m for m in self.meshes if m != t.mesh])
        axes = tuple(replace(a, shard=None) for a in t.axes)
        if mesh != t.mesh and mesh.shape == t.mesh.shape and t.sharding() and self.c.maybe(50):
            return x.set(**self.out(replace(t, mesh=mesh, layout=self.layout(t.rank))))  # a stage move
        return x.set(**self.out(self.placed(t.dtype, axes, mesh)))

    def relaid(self, t: TensorType) -> TensorType | None:
        """The type an op infers, declared (with a layout) or left out."""
        return replace(t, layout=self.layout(t.rank)) if self.c.maybe(50) else None

    def step(self, x: Value) -> Value:
        t = x.type
        # Resharding is what the suite is for: set and reduce come up most.
        menu = [self.set, self.scalar, self.set, self.binary, self.cast, self.permute, self.set,
                lambda x, t: mask_step(self, x, t)]  # comparisons, iota, where, the mask unary ops
        if t.dtype != "bool":
            menu.insert(1, self.unary)
        if t.rank < 4:
            menu.append(self.unsqueeze)
        if t.rank:
            menu += [self.reduce, self.reduce]
        menu += broadcast_menu(self, t)  # expand, matmul of any ranks (conformance/generate_broadcast.py)
        menu += window_menu(self, t)  # slice, select, pad, cat (conformance/generate_window.py)
        menu.append(lambda x, t: generate_reshape.reshape(self, x, t))
        return self.c.pick(menu)(x, t)


def draw_meshes(c: Chooser, b: builder.Builder) -> list[Mesh]:
    for i in c.items(1, 3, 50):
        ids = c.permutation(4)
        if b.meshes and c.maybe(40):  # a pipeline stage of the first one's shape: send_recv between them
            shape = b.meshes[0].shape
        elif c.maybe(25):
            shape = c.pick(MESH_SHAPES)
        else:
            shape = (1 + c.below(4),)
        b.mesh(ids[:prod(shape)], name=f"m{i}", shape=shape)
    return b.meshes


def draw_symbols(c: Chooser, meshes: list[Mesh]) -> tuple[dict[str, int], dict[str, tuple[int, ...]]]:
    sizes = sorted({k for m in meshes for k in m.shape if k > 1})
    units = [1, *sizes] + ([lcm(*sizes)] if sizes and lcm(*sizes) <= 8 and lcm(*sizes) not in sizes else [])
    out_units, out_values = {}, {}
    for i in c.items(0, len(SYMBOLS), 60):
        s = SYMBOLS[i]
        unit = c.pick(units)
        multiples = [m for m in (1, 2, 3, 4) if unit * m <= 8]
        first = c.pick(multiples)
        rest = [m for m in multiples if m != first]
        second = c.pick(rest) if rest else first
        out_units[s] = unit
        out_values[s] = tuple(dict.fromkeys((unit * first, unit * second)))
    return out_units, out_values


def generate(draw: Draw) -> Generated:
    """A random program that verifies and prints back to itself, its bindings
    and its input data."""
    c = Chooser(draw)
    kind, seed = c.pick(KINDS), c.below(1000)
    b = builder.Builder()
    meshes = draw_meshes(c, b)
    units, values = draw_symbols(c, meshes)
    m = Maker(c, b, units, values)
    dtype = c.pick(DTYPES_DRAWN)
    x = m.param(m.placed(dtype, m.fresh_axes(1 + c.below(3))))
    made: list[Value] = []
    for _ in c.items(1, MAX_EQNS, 75):
        x = m.step(x if not made or not c.maybe(20) else c.pick(made))
        made.append(x)
    extra = [v for v in made[:-1] if c.maybe(20)]
    tail = forms_tail(m)  # drawn last: the draws above, and so older seeds' programs, stay as they were
    shaped = expression_tail(m, made)  # after that: reshapes of extent expressions (generate_reshape_expr.py)
    b.output(*extra, made[-1], *tail, *shaped)
    program = b.build()
    text = print_program(program)
    if parse(text) != program:  # the printer and parser must agree on every generated program
        raise AssertionError(f"the program does not survive printing:\n{text}")
    used = m.bound_symbols()
    n = max((len(values[s]) for s in used), default=1)
    bindings = tuple({s: values[s][min(i, len(values[s]) - 1)] for s in used} for i in range(n))
    return Generated(program, bindings, DataSpec(kind, seed, tuple(m.views)), tuple(c.spans))
