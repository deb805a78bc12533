"""Pictures from Python, for a notebook or a terminal (as
`jax.debug.visualize_array_sharding` and DTensor's `visualize_sharding`),
exported as refir.visualize and refir.visualize_placement:

    refir.visualize(prog, "t3", bind={"N": 8})       # what `explain --value t3` draws
    refir.visualize_placement((8, 6), "2x2", "S0,R")  # a DTensor-style placement

Each prints the text picture through rich and returns a Picture, which a
Jupyter cell shows as the drawing (`_repr_html_`, `_repr_svg_`: refir.explain.svg's,
self-contained) and which saves itself as .svg or .html.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console, RenderableType

from refir.errors import InputError
from refir.explain.pictures import value_picture
from refir.explain.placement import Explained, Placement, explain, placement
from refir.explain.report import WIDTH, wanted
from refir.explain.step_pictures import step_picture
from refir.explain.svg import html_of, svg_of
from refir.ir.program import Program
from refir.ir.types import Mesh


@dataclass(frozen=True)
class Picture:
    """The pictures of one value: `text` as explain prints it, `svg` and `html` as drawings."""

    title: str
    items: tuple[RenderableType, ...]

    @property
    def text(self) -> str:
        console = Console(width=WIDTH, color_system=None, force_terminal=False, highlight=False, markup=False,
                          soft_wrap=False, record=True, file=_Null())
        for item in self.items:
            console.print(item)
        return "".join(line.rstrip() + "\n" for line in console.export_text().splitlines())

    @property
    def svg(self) -> str:
        return svg_of(self.items, self.title)

    @property
    def html(self) -> str:
        return html_of(self.items, self.title)

    def _repr_svg_(self) -> str:
        return self.svg

    def _repr_html_(self) -> str:
        return svg_of(self.items, self.title, standalone=False)

    def save(self, path: str | Path) -> Path:
        """Write the drawing: HTML for a name ending in .html or .htm, else SVG."""
        from refir.explain.report import write_text
        from refir.running.inputs import writable_file

        path = writable_file(Path(path), "save")
        write_text(path, self.html if path.suffix.lower() in (".html", ".htm") else self.svg, "save")
        return path

    def show(self, console: Console | None = None) -> None:
        """Print the text picture (colour on a terminal; rich's own output in a notebook)."""
        console = console or Console(highlight=False, markup=False, soft_wrap=False)
        for item in self.items:
            console.print(item)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"<refir picture: {self.title}>"


class _Null:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def visualize(program: Program | str | Path, value: str, bind: dict[str, int] | None = None,
              world: int | None = None, device: int | None = None, func: str | None = None,
              show: bool = True) -> Picture:
    """What `explain PROG --value VALUE` draws: how the value lies over its mesh
    (and, for a value a communication makes, why it was chosen and what moves).
    `program` is a Program, a path or program text; `bind` gives symbols (else
    the program's `# bind:` line, else refir's defaults); `device` narrows it
    to one device; `show=False` prints nothing."""
    ex = explained(program, bind, world, func)
    if device is not None and not 0 <= device < ex.world:
        raise InputError(f"device {device} is not a rank of the world of {ex.world} (0..{ex.world - 1})")

    def idle(p: Placement) -> list[int]:
        return [d for d in range(ex.world) if d not in p.type.mesh]

    items: list[RenderableType] = [value_picture(p, device, idle(p)) for p in ex.inputs if wanted(p.name, value)]
    items += [step_picture(s, device, idle(s.placement)) for s in ex.steps if wanted(s.step.out, value)]
    if not items:
        names = ", ".join(p.name for p in ex.values())
        raise InputError(f"visualize: no value {value!r} in {ex.lowered.checked.func.name} (values: {names})")
    picture = Picture(f"{ex.lowered.checked.program.file}: {value}", tuple(items))
    if show:
        picture.show()
    return picture


def explained(program: Program | str | Path, bind: dict[str, int] | None, world: int | None,
              func: str | None) -> Explained:
    from refir.checks.verifier import verify
    from refir.lowering.lower import lower
    from refir.running.bindings import check_world, devices_needed
    from refir.running.inputs import bindings_for, default_bindings
    from refir.text.load import load

    checked = verify(program if isinstance(program, Program) else load(program), func)
    size = devices_needed(checked) if world is None else world
    check_world(checked, size)
    bindings = default_bindings(checked, dict(bind)) if bind else bindings_for(checked, None)
    return explain(lower(checked), bindings, size)


def visualize_placement(shape: Sequence[int], mesh: str | int | Mesh | Sequence, placements: str | Sequence,
                        dtype: str = "f32", device: int | None = None, name: str = "x",
                        show: bool = True) -> Picture:
    """A DTensor-style description drawn as explain draws a value: `shape` the
    global shape, `mesh` "2x2" (devices 0..3 row-major, as torch's
    init_device_mesh), a device count, a refir Mesh or nested device ids,
    `placements` "S0,R" or refir.frontends.dtensor's Shard/Replicate/Partial, one per mesh
    dimension, outermost first."""
    from refir.frontends.dtensor import parse_mesh, parse_placements, to_refir

    if isinstance(mesh, Mesh):
        m = mesh
    elif isinstance(mesh, (str, int)):
        m = parse_mesh(str(mesh))
    else:
        m = _nested_mesh(mesh)
    ps = parse_placements(placements if isinstance(placements, str) else ",".join(map(str, placements)))
    try:
        extents = tuple(int(n) for n in shape)
    except (TypeError, ValueError):
        raise InputError(f"bad shape {shape!r}: give the global extents, e.g. (8, 6)") from None
    if any(n < 0 for n in extents):
        raise InputError(f"bad shape {shape!r}: extents are not negative")
    t = to_refir(extents, m, ps, dtype)
    p: Placement = placement(name, t, {})
    if device is not None and device not in m:
        raise InputError(f"device {device} is not in the mesh {list(m.devices)}")
    picture = Picture(f"{name}: {t}", (value_picture(p, device),))
    if show:
        picture.show()
    return picture


def _nested_mesh(ids: Sequence) -> Mesh:
    import numpy as np

    try:
        a = np.array(ids, dtype=np.int64)
    except (TypeError, ValueError):
        raise InputError(f"bad mesh {ids!r}: nested lists of device ids of one shape, e.g. [[0, 1], [2, 3]]") from None
    if not 1 <= a.ndim <= 3 or a.size == 0 or a.min() < 0 or len(set(a.ravel().tolist())) != a.size:
        raise InputError(f"bad mesh {ids!r}: 1 to 3 dimensions of distinct non-negative device ids")
    return Mesh("m", tuple(a.shape), tuple(a.ravel().tolist()))
