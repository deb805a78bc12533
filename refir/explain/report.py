"""`python -m refir explain`, and `--json` for `check`, `lower` and `explain`.

explain prints, for every value in program order, how its global tensor lies
over the mesh; for every communication the rule that chose it, its teams, who
sends which block to whom and the bytes each device sends and receives; for
every local step its local shape, byte strides and layout. Under MPI only
rank 0 prints (nothing runs, so no rank needs the others).
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import IO, Any

from rich.console import Console, RenderableType
from rich.rule import Rule
from rich.text import Text

from refir.checks.limits import DEVICES
from refir.checks.verifier import Checked, verify
from refir.errors import InputError
from refir.explain.json_text import write_json
from refir.explain.pictures import MOVES_LISTED, mesh_listing, value_picture
from refir.explain.placement import CommFacts, Explained, Placement, explain, placement
from refir.explain.step_pictures import pattern_lines, step_picture
from refir.explain.svg import html_of, svg_of
from refir.ir import ops
from refir.lowering.lower import Lowered, lower
from refir.running.bindings import check_world, devices_needed
from refir.running.inputs import bindings_for, writable_file
from refir.text.load import load
from refir.world.ranks import mpi_world

WIDTH = 100  # when not writing to a terminal: output that is the same everywhere


def add_view_args(p: argparse.ArgumentParser, pictures: bool = False) -> None:
    """--bind and --json (check, lower, explain); --world, --device, --svg, --html (explain)."""
    p.add_argument("--bind", nargs="*", default=[], metavar="SYM=N",
                   help="symbol values, each over the # bind: line's (default: it, or 4s)")
    p.add_argument("--json", action="store_true", help="print the facts as JSON")
    if pictures:
        p.add_argument("--world", type=int, help="number of ranks (default: what the meshes need)")
        p.add_argument("--device", type=int, help="show this device's part only")
        p.add_argument("--value", metavar="NAME", help="show only NAME (an input, or the steps that make it)")
        p.add_argument("--svg", metavar="FILE", help="also write the pictures as a drawing: SVG, self-contained")
        p.add_argument("--moves", choices=("all",), help="list every move one by one (by default past "
                       f"{MOVES_LISTED} moves a communication is summarised by its pattern)")
        p.add_argument("--html", metavar="FILE", help="also write the pictures as a drawing: HTML holding the SVG")


def world_for(checked: Checked, asked: int | None) -> int:
    if asked is not None:  # as `run` checks its --world
        if asked < 1:
            raise InputError(f"--world {asked}: a world has at least one rank")
        DEVICES.check(asked, "--world asks for")
    mpi = mpi_world()
    size = mpi.size if mpi is not None else asked if asked is not None else devices_needed(checked)
    check_world(checked, size)
    return size


def is_printer() -> bool:
    world = mpi_world()
    return world is None or world.is_root


def make_console(record: bool = False, silent: bool = False) -> Console:
    """Colour and the terminal's width on a terminal; else plain text WIDTH wide,
    without trailing spaces. `silent`: nothing printed (recorded for --svg, --html)."""
    if sys.stdout.isatty() and not silent:
        return Console(record=record, highlight=False, soft_wrap=False, markup=False)
    out: IO[str] = io.StringIO() if silent else _Stripped(sys.stdout)
    return Console(file=out, record=record, width=WIDTH, color_system=None, force_terminal=False, highlight=False,
                   markup=False, soft_wrap=False)


class _Stripped(io.TextIOBase):
    """A text stream that drops the spaces ending each line (rich pads table cells)."""

    def __init__(self, out: IO[str]) -> None:
        self.out, self.spaces = out, ""

    def write(self, text: str) -> int:
        *lines, last = (self.spaces + text).split("\n")
        kept = last.rstrip(" ")
        self.out.write("".join(line.rstrip(" ") + "\n" for line in lines) + kept)
        self.spaces = last[len(kept):]  # written only if more text follows on this line
        return len(text)

    def flush(self) -> None:
        self.out.flush()


def wanted(name: str, value: str | None) -> bool:
    """Whether `name` is the value asked for, or one of the lowered steps that make it."""
    return value is None or name == value or name.split("~")[0] == value


# ---- JSON ----------------------------------------------------------------------------


def placement_json(p: Placement) -> dict[str, Any]:
    t = p.type
    return {
        "name": p.name, "type": str(t), "dtype": t.dtype, "global_shape": list(p.shape),
        "mesh": t.mesh.name, "layout": list(t.order), "input": p.is_input,
        "any_strides": p.is_input and t.layout is None,
        "partial": {"kind": t.partial_kind, "mesh_axes": list(t.partial)} if t.partial else None,
        "devices": {
            str(b.device): {"coords": list(b.coords), "ranges": [list(r) for r in b.ranges],
                            "local_shape": list(b.local_shape), "byte_strides": list(b.byte_strides),
                            # an interleaved type (§3.4): each axis's runs, in buffer order (ranges: their hulls)
                            **({"runs": [[list(r) for r in rs] for rs in b.runs]} if b.runs is not None else {})}
            for b in p.blocks
        },
    }


def comm_json(c: CommFacts, every_move: bool = False) -> dict[str, Any]:
    """A communication's facts; its moves listed one by one up to MOVES_LISTED (or
    `every_move`), else null: the pattern, the count and each device's bytes say it
    in size linear in the devices."""
    return {
        "kind": c.kind, "rule": c.rule, "changes": list(c.changes),
        "teams": [{"devices": list(t.devices), "senders": list(t.senders), "receivers": list(t.receivers)}
                  for t in c.teams],
        "moves": c.moves,
        "pattern": pattern_lines(c),
        "transfers": [{"from": t.sender, "to": t.receiver, "ranges": [list(r) for r in t.ranges], "bytes": t.nbytes}
                      for t in c.transfers()] if every_move or c.moves <= MOVES_LISTED else None,
        "bytes": {str(d): dict(zip(("sent", "received"), c.bytes_of(d))) for d in c.devices()},
    }


def explained_json(ex: Explained, every_move: bool = False) -> dict[str, Any]:
    lowered = ex.lowered
    steps = []
    for s in ex.steps:
        steps.append({
            "out": s.step.out, "op": s.call, "from": s.step.eqn.out, "segment": s.segment,
            "kind": "communication" if s.comm else "local",
            "value": placement_json(s.placement),
            "communication": comm_json(s.comm, every_move) if s.comm else None,
            "note": s.note or None,  # what a reshape's -1 stood for, as the text says it
        })
    return {
        "program": lowered.checked.program.file, "func": lowered.checked.func.name,
        "bindings": dict(sorted(ex.bindings.items())), "world": ex.world,
        "meshes": {m.name: {"shape": list(m.shape), "devices": list(m.devices)}
                   for m in lowered.checked.program.meshes},
        "inputs": [placement_json(p) for p in ex.inputs],
        "steps": steps,
        "segments": [{"index": g.index, "kind": g.kind, "inputs": list(g.inputs), "scalars": list(g.scalars),
                      "outputs": list(g.outputs), "steps": [s.out for s in g.steps]} for g in lowered.segments],
        "results": list(lowered.results),
    }


def checked_json(checked: Checked, bindings: dict[str, int]) -> dict[str, Any]:
    params = {p.name for p in checked.func.params}
    names = [p.name for p in checked.func.params] + [e.out for e in checked.func.eqns]
    return {
        "program": checked.program.file, "func": checked.func.name, "bindings": dict(sorted(bindings.items())),
        "values": [placement_json(placement(n, checked.types[n], bindings, n in params)) for n in names],
        "results": list(checked.func.results),
    }


def print_json(doc: Any) -> None:
    if is_printer():
        write_json(doc, sys.stdout)
        sys.stdout.flush()


# ---- the commands ----------------------------------------------------------------------


def check_device(device: int | None, world: int) -> None:
    if device is not None and not 0 <= device < world:
        raise InputError(f"--device {device} is not a rank of the world of {world} (0..{world - 1})")


def explained_of(args: argparse.Namespace) -> tuple[Lowered, Explained]:
    checked = verify(load(Path(args.program)), args.func)
    lowered = lower(checked)
    world = world_for(checked, getattr(args, "world", None))
    check_device(getattr(args, "device", None), world)
    return lowered, explain(lowered, bindings_for(checked, getattr(args, "bind", None)), world)


def json_check(args: argparse.Namespace) -> int:
    program = load(Path(args.program))
    docs = []
    for name in [args.func] if args.func else [f.name for f in program.funcs]:
        checked = verify(program, name)
        docs.append(checked_json(checked, bindings_for(checked, getattr(args, "bind", None))))
    print_json(docs[0] if len(docs) == 1 else docs)
    return 0


def json_lower(args: argparse.Namespace) -> int:
    print_json(explained_json(explained_of(args)[1], getattr(args, "moves", None) == "all"))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    for option in ("svg", "html"):  # checked before anything is worked out or printed
        if getattr(args, option) is not None:
            writable_file(getattr(args, option), f"--{option}")
    lowered, ex = explained_of(args)
    names = [p.name for p in ex.values()]
    if args.value is not None and not any(wanted(n, args.value) for n in names):
        raise InputError(f"--value {args.value}: no value of that name (values: {', '.join(names)})")
    every_move = args.moves == "all"
    if args.json:
        print_json(explained_json(ex, every_move))
    if not is_printer():
        return 0
    items = pictures_of(ex, args.device, args.value, every_move)
    if not args.json:
        console = make_console()
        for item in items:
            console.print(item)
    title = f"refir explain {args.program}"
    if args.svg is not None:
        write_text(Path(args.svg), svg_of(items, title), "--svg")
    if args.html is not None:
        write_text(Path(args.html), html_of(items, title), "--html")
    return 0


def write_text(path: Path, text: str, option: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {option} {path}: {exc.strerror or exc}") from exc


def pictures_of(ex: Explained, device: int | None = None, value: str | None = None,
                every_move: bool = False) -> list[RenderableType]:
    """What explain prints, in order: a heading, then every value's and step's picture."""
    checked = ex.lowered.checked
    binds = ", ".join(f"{k}={v}" for k, v in sorted(ex.bindings.items()))
    out: list[RenderableType] = [Text(f"{checked.program.file}: {checked.func.name}, world of {ex.world}"
                                      + (f", {binds}" if binds else ""), style="bold")]
    if value is None:
        out += [mesh_listing(m) for m in checked.program.meshes]

    def idle(p: Placement) -> list[int]:
        return [d for d in range(ex.world) if d not in p.type.mesh]

    def shown(p: Placement) -> bool:
        return device is None or device in p.type.mesh

    for p in ex.inputs:
        if not wanted(p.name, value):
            continue
        out.append(Rule(f"input {p.name}", align="left"))
        out.append(value_picture(p, device, idle(p)) if shown(p) else Text(f"device {device} holds nothing"))
    for seg in ex.lowered.segments:
        if not any(wanted(s.out, value) for s in seg.steps):
            continue
        head = seg.kind if seg.kind == "compute" else ops.op_name(seg.steps[0].op)
        scalars = f" + scalars {', '.join(seg.scalars)}" if seg.scalars else ""
        scalars += f" + extents {', '.join(seg.extents)}" if seg.extents else ""
        out.append(Rule(f"segment {seg.index} ({head}): inputs {', '.join(seg.inputs) or '-'}{scalars}"
                        f" -> outputs {', '.join(seg.outputs) or '-'}", align="left"))
        for s in ex.steps:
            if s.segment == seg.index and wanted(s.step.out, value):
                if shown(s.placement) or (s.comm and device in s.comm.devices()):
                    out.append(step_picture(s, device, idle(s.placement), every_move))
                else:
                    out.append(Text(f"{s.step.out}: device {device} takes no part"))
    if value is None:
        out.append(f"return {', '.join(ex.lowered.results)}")
    return out

