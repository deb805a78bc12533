"""`python -m refir trace`: run a program on the spmd backend (or, `--backend
gpu`, the gpu backend: its device buffers read back after each step, strides as
it laid them out) and show, step by step, every device's buffers before (the
operands) and after (the result), with the blocks each communication moved.
Under MPI every rank runs its own device and rank 0 prints everything.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from rich import box
from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from refir.checks.verifier import verify
from refir.errors import InputError
from refir.explain.device_sets import devices_text
from refir.explain.pictures import DEVICE_ROWS, DEVICES_LISTED, ints, run_span, spans
from refir.explain.placement import Block, Explained, Placement, StepFacts, explain, intersect
from refir.explain.report import check_device, is_printer, make_console, wanted, world_for
from refir.explain.step_pictures import comm_picture, step_line
from refir.ir.blocks import shared_moves
from refir.ir.program import Var
from refir.ir.types import dtype_name
from refir.lowering.lower import lower
from refir.running.inputs import bindings_for, draw_inputs, read_inputs
from refir.running.runner import RunResult, run
from refir.text.load import load

FULL = 48  # buffers of at most this many elements are printed in full


def add_trace_args(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--inputs", help=".npz of global input arrays, named by parameter")
    src.add_argument("--seed", type=int, help="draw inputs from this seed (default 0)")
    p.add_argument("--bind", nargs="*", default=[], metavar="SYM=N", help="symbol values for drawn inputs")
    p.add_argument("--world", type=int, help="number of ranks (default: what the meshes need)")
    p.add_argument("--backend", default="spmd", choices=("spmd", "gpu"),
                   help="spmd (numpy), or gpu (its device buffers read back after each step)")
    p.add_argument("--device", type=int, help="show this device's buffers only")
    p.add_argument("--value", metavar="NAME", help="show only the steps that make NAME (and its lowered parts)")


def buffer_text(x: np.ndarray) -> str:
    """A buffer in full when small, else its edges and a summary; always its shape and byte strides."""
    head = f"{dtype_name(x.dtype) or x.dtype}{ints(list(x.shape))}\nstrides {ints(list(x.strides))} B"
    body = np.array2string(x, threshold=FULL, edgeitems=2, separator=" ")
    if x.size > FULL and x.dtype.kind in "fiub":
        body += f"\nmin {x.min()} max {x.max()}"
    return f"{head}\n{body}"


def moved_text(s: StepFacts, src: Placement, device: int) -> str:
    """Which part of the device's new buffer came from which device."""
    assert s.comm is not None
    lines = []
    reducing = s.comm.kind in ("allreduce", "reduce", "reduce_scatter")
    runs = src.type.interleaved() or s.placement.type.interleaved()  # §3.4: say the runs, not their hull
    if device not in s.placement.type.mesh:
        mine = None
    else:
        mine = s.placement.block(device).ranges
        if device in src.type.mesh:
            own = intersect(src.block(device).ranges, mine)
            if runs:
                kept = landing(src.block(device), s.placement.block(device))
                if kept is not None:
                    lines.append(f"kept its own {'term: ' if reducing else ''}local {kept}")
            elif all(b > a for a, b in own) or not own:
                local = tuple((a - m0, b - m0) for (a, b), (m0, _) in zip(own, mine))
                lines.append(f"kept its own {'term: ' if reducing else ''}local {spans(local)}")
    got = [tr for tr in s.comm.transfers(device) if tr.receiver == device and mine is not None]
    what = "a term for " if reducing else ""
    if len(got) > RECEIPTS_LISTED:  # a team of thousands: who sent, and how much, in one line
        lines.append(f"from {len(got):,} devices {devices_text([t.sender for t in got])}: {what}"
                     f"{sum(t.nbytes for t in got):,} B in all")
    for tr in got if len(got) <= RECEIPTS_LISTED else []:
        local = tuple((a - m0, b - m0) for (a, b), (m0, _) in zip(tr.ranges, mine or ()))
        where = (landing(src.block(tr.sender), s.placement.block(device)) if runs else None) or spans(local)
        lines.append(f"from {tr.sender}: {what}local {where} ({tr.nbytes} B)")
    sent = [tr for tr in s.comm.transfers(device) if tr.sender == device]
    if sent:
        lines.append(f"sent {sum(t.nbytes for t in sent)} B to {devices_text([t.receiver for t in sent])[1:-1]}")
    return "\n".join(lines) or "nothing moved"


def landing(held: Block, mine: Block) -> str | None:
    """Where in `mine`'s buffer the elements both blocks hold lie, each axis as
    runs of local positions (`0:1+2:3`); None where they share none."""
    axes = [[(t, t + n) for _, t, n in shared_moves(a, b)] for a, b in zip(held.axis_runs, mine.axis_runs)]
    if any(not a for a in axes):
        return None
    return "[" + ", ".join(run_span(tuple(a)) for a in axes) + "]"


RECEIPTS_LISTED = 16  # past this many receipts a device's moves are one line: its senders and bytes


def shown_devices(devices: list[int], table: Table) -> list[int]:
    """Every device up to DEVICES_LISTED; past it the first 8 and last 4, the
    table's caption counting the rest (--device D shows any one whole)."""
    if len(devices) <= DEVICES_LISTED:
        return devices
    head, tail = DEVICE_ROWS
    table.caption = f"{len(devices) - head - tail:,} more devices: --device D shows one"
    return [*devices[:head], *devices[-tail:]]


def step_table(s: StepFacts, src: Placement | None, kept: dict[str, dict[int, np.ndarray]],
               devices: list[int]) -> Table:
    args = list(dict.fromkeys(a.name for a in s.step.args if isinstance(a, Var)))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, show_lines=True)
    table.add_column("device", no_wrap=True)
    table.add_column("before: " + ", ".join(args), overflow="fold")
    table.add_column(f"after: {s.step.out}", overflow="fold")
    if s.comm is not None:
        table.add_column("moved", no_wrap=True)
    for d in shown_devices(devices, table):
        before = [(f"{a}: " if len(args) > 1 else "") + buffer_text(kept[a][d]) for a in args if d in kept.get(a, {})]
        if d not in kept.get(s.step.out, {}) and not before:
            continue
        after = buffer_text(kept[s.step.out][d]) if d in kept.get(s.step.out, {}) else "nothing"
        row = [str(d), "\n".join(before) or "nothing", after]
        if s.comm is not None and src is not None:
            row.append(moved_text(s, src, d))
        table.add_row(*row)
    return table


def trace_pictures(ex: Explained, result: RunResult, device: int | None, value: str | None) -> list[RenderableType]:
    kept = result.kept
    devices = [device] if device is not None else list(range(ex.world))
    out: list[RenderableType] = []
    for p in ex.inputs:
        if wanted(p.name, value):
            out.append(Rule(f"input {p.name}: {p.type}", align="left"))
            table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, show_lines=True)
            table.add_column("device", no_wrap=True)
            table.add_column("global block", no_wrap=True)
            table.add_column("buffer", overflow="fold")
            for d in shown_devices(devices, table):
                if d in kept.get(p.name, {}):
                    table.add_row(str(d), spans(p.block(d).ranges), buffer_text(kept[p.name][d]))
            out.append(table)
    for k, s in enumerate(ex.steps):
        if not wanted(s.step.out, value):
            continue
        out.append(Rule(f"step {k} (segment {s.segment})", align="left"))
        parts: list[RenderableType] = [step_line(s)]
        if s.comm is not None:
            parts.append(comm_picture(s.comm, device))
        tensors = s.step.tensor_args()
        parts.append(step_table(s, ex.value(tensors[0]) if s.comm else None, kept, devices))
        out.append(Group(*parts))
    return out


def cmd_trace(args: argparse.Namespace) -> int:
    program = load(Path(args.program))
    checked = verify(program, args.func)
    if args.inputs:
        if args.bind or args.seed is not None:
            raise InputError("--inputs fixes every extent and value: leave out --bind and --seed")
        inputs = read_inputs(args.inputs)
    else:
        inputs = draw_inputs(checked, bindings_for(checked, args.bind), args.seed or 0, args.backend, keep=True)
    world = world_for(checked, args.world)
    check_device(args.device, world)
    names = [p.name for p in checked.func.params] + [s.out for s in lower(checked).steps]
    if args.value is not None and not any(wanted(n, args.value) for n in names):
        raise InputError(f"--value {args.value}: no value of that name (values: {', '.join(names)})")
    result = run(program, inputs, backend=args.backend, world=args.world, func=args.func, keep="all")
    assert result.lowered is not None
    ex = explain(result.lowered, result.bindings, world)
    if not is_printer():
        return 0
    console = make_console()
    binds = ", ".join(f"{k}={v}" for k, v in sorted(result.bindings.items()))
    console.print(Text(f"{args.program}: {checked.func.name} on {args.backend}" + (f", {binds}" if binds else ""),
                       style="bold"))
    for part in trace_pictures(ex, result, args.device, args.value):
        console.print(part)
    if args.value is None:
        console.print(f"return {', '.join(ex.lowered.results)}")
    return 0
