"""`python -m refir peer dtensor|jax`: the sweep, a progress bar, the summary
table, and each discrepancy shrunk, triaged and written as a reproducer.

Exits 0 when every case agrees or matches a known entry of
conformance/peers/known.py (docs/peers.md), 1 on anything new, 2 when the
peer is not installed (one line: how to install it)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich import box
from rich.table import Table

from conformance.peers.sweep import Outcome, Timing, is_partial
from conformance.report import Progress, plain
from refir.errors import InputError
from refir.world.ranks import say

SHOWN = 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("peer", help="dtensor (torch DTensor) or jax")
    p.add_argument("--cases", type=int, default=200, metavar="N", help="cases to draw (default 200)")
    p.add_argument("--seed", type=int, default=0, help="seed of the drawn cases (default 0)")
    p.add_argument("--json", type=Path, metavar="FILE", help="write every case's verdict as JSON")
    p.add_argument("--save", type=Path, default=Path("peer-failures"), metavar="DIR",
                   help="where the reproducers of discrepancies go (default ./peer-failures)")
    p.add_argument("--shrink", type=int, default=60, metavar="TRIES", help="shrinking attempts per discrepancy")
    p.add_argument("-v", "--verbose", action="store_true", help="a log line per case instead of the bar")


def peer_command(args: argparse.Namespace) -> int:
    from conformance.peers import load_peer
    from conformance.peers.sweep import sweep
    from refir.running.inputs import writable_file

    if args.cases < 0 or args.seed < 0 or args.shrink < 0:
        raise InputError(f"--cases {args.cases} --seed {args.seed} --shrink {args.shrink}: non-negative integers")
    if args.json is not None:
        writable_file(args.json, "--json")
    if args.save.exists() and not args.save.is_dir():
        raise InputError(f"--save {args.save} is not a folder")
    peer = load_peer(args.peer)
    start = time.monotonic()
    progress = Progress(args.cases, None, args.verbose)
    try:
        outcomes, timing = sweep(peer, args.cases, args.seed, args.save, progress, args.shrink)
    finally:
        progress.close()
    seconds = time.monotonic() - start
    say(summary(peer, outcomes, timing, seconds, args.seed))
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(peer, outcomes, timing, seconds, args.seed), indent=1))
    return 1 if any(new(o) for o in outcomes) else 0


def new(o: Outcome) -> bool:
    """A discrepancy no known entry explains, or a placement difference no convention names."""
    return (o.status == "differ" and not o.triage.startswith(("convention:", "peer-bug:"))) or "new:" in o.placement


def row_of(o: Outcome) -> str:
    c = o.case
    what = c.op_name if c.kind == "op" else c.kind + (" partial" if is_partial(c) else "")
    return f"{what}, {c.view}" if c.view != "root" else what


def summary(peer: object, outcomes: list[Outcome], timing: Timing, seconds: float, seed: int) -> str:
    n = len(outcomes)
    worlds = sorted({o.case.world for o in outcomes})
    lines = [f"refir peer {peer.NAME}: {n} cases (seed {seed}, worlds {', '.join(map(str, worlds))}) on "
             f"{peer.versions()}, {seconds:.1f} s", ""]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col in ("", "cases", "agree", "refir wrong", "peer wrong", "convention", "known peer bug", "placed apart"):
        table.add_column(col, justify="right" if col else "left")
    rows = sorted({row_of(o) for o in outcomes})
    for r in rows + ["total"]:
        mine = [o for o in outcomes if r in ("total", row_of(o))]
        count = [sum(o.status == "agree" for o in mine),
                 sum(o.triage in ("refir", "both") for o in mine),
                 sum(o.triage in ("peer", "both") for o in mine),
                 sum(o.triage.startswith("convention:") for o in mine),
                 sum(o.triage.startswith("peer-bug:") for o in mine),
                 sum(bool(o.placement) for o in mine)]
        table.add_row(r, str(len(mine)), *map(str, count), end_section=r == rows[-1] if rows else False)
    lines.append(plain(table))
    rate = (f"{n / timing.peer:.1f}" if timing.peer else "-", f"{n / timing.refir:.1f}" if timing.refir else "-")
    lines += ["", f"speed: {peer.NAME} {rate[0]} cases/s, refir spmd {rate[1]} cases/s (the same cases)"]
    differ = [o for o in outcomes if o.status == "differ"]
    if differ:
        lines += ["", f"{len(differ)} discrepanc{'ies' if len(differ) > 1 else 'y'}:"]
        for o in differ[:SHOWN]:
            lines.append(f"- {o.case.label()} [{o.triage}]")
            lines += [f"    {p}" for p in o.problems[:3]]
            if o.shrunk is not None:
                lines.append(f"    shrunk: {o.shrunk.label()}")
            if o.reproducer:
                lines.append(f"    reproducer: python {o.reproducer}  ({o.alone} alone)")
            elif o.alone:
                lines.append(f"    {o.alone}")
        if len(differ) > SHOWN:
            lines.append(f"... and {len(differ) - SHOWN} more (all of them in --json)")
    apart = [o for o in outcomes if o.placement]
    if apart:
        lines += ["", f"{len(apart)} op result{'s' if len(apart) > 1 else ''} placed apart (values compared at the "
                  "target and at DTensor's own placements; docs/peers.md, \"Placements\"):"]
        kinds: dict[str, list[Outcome]] = {}
        for o in apart:
            kinds.setdefault(o.placement.rsplit(": ", 1)[1], []).append(o)
        for kind, mine in sorted(kinds.items()):
            lines.append(f"- {kind}: {len(mine)}, e.g. {mine[0].case.label()} ({mine[0].placement.rsplit(': ', 1)[0]})")
    fresh = sum(new(o) for o in outcomes)
    lines += ["", f"FAILED: {fresh} new discrepancies (triage them: docs/peers.md)" if fresh
              else f"refir and {peer.NAME} agree" + (" (every difference known: docs/peers.md)" if differ else "")]
    return "\n".join(lines)


def as_json(peer: object, outcomes: list[Outcome], timing: Timing, seconds: float, seed: int) -> dict:
    return {"peer": peer.NAME, "versions": peer.versions(), "seed": seed, "cases": len(outcomes),
            "seconds": round(seconds, 3), "peer_seconds": round(timing.peer, 3),
            "refir_seconds": round(timing.refir, 3),
            "agree": sum(o.status == "agree" for o in outcomes),
            "results": [{"case": o.case.label(), "choices": list(o.case.choices), "status": o.status,
                         "triage": o.triage, "problems": o.problems, "placement": o.placement,
                         "shrunk": o.shrunk.label() if o.shrunk else None, "reproducer": o.reproducer,
                         "reproducer_alone": o.alone} for o in outcomes]}
