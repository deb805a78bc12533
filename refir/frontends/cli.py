"""Command-line entry points of the frontends: `import-nvfuser` and `redistribute`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from refir.errors import InputError
from refir.world.ranks import say


def _links(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        dst, eq, src = item.partition("=")
        if not eq or not dst.strip() or not src.strip():
            raise InputError(f"bad --link {item!r}: write INPUT=OUTPUT, e.g. --link T5=T4")
        if dst.strip() in out:
            raise InputError(f"--link {item}: {dst.strip()} is linked twice")
        out[dst.strip()] = src.strip()
    return out


def cmd_import_nvfuser(args: argparse.Namespace) -> int:
    from refir.frontends.nvfuser import import_nvfuser
    from refir.running.inputs import writable_file
    from refir.text.load import read_source

    if args.explain and args.output is None:
        raise InputError("--explain explains the written program: give -o PROG.rir")
    output = writable_file(args.output, "-o") if args.output is not None else None  # before any work
    # A regular UTF-8 file within refir's size limit, as program text is (- is standard input).
    text = read_source(Path(args.dump))
    imported = import_nvfuser(text, "<stdin>" if args.dump == "-" else args.dump, _links(args.link), args.bullet,
                              option="--link", lost=args.lost)
    for note in imported.notes:
        sys.stderr.write(f"note: {note}\n")
    if output is not None:
        try:
            output.write_text(imported.text)
        except OSError as exc:
            raise InputError(f"cannot write -o {output}: {exc.strerror or exc}") from exc
        say(f"wrote {args.output}")
    if args.explain:
        return args.then(["explain", args.output])
    if args.lower:
        from refir.checks.verifier import verify
        from refir.explain.lowered_listing import format_lowered
        from refir.lowering.lower import lower

        say(format_lowered(lower(verify(imported.program))))
    elif output is None:
        say(imported.text.rstrip("\n"))
    return 0


def cmd_redistribute(args: argparse.Namespace) -> int:
    from refir.frontends.dtensor_explain import redistribute_report

    say(redistribute_report(args.mesh, args.shape, args.src, args.dst, args.dtype, run=not args.no_run,
                            seed=args.seed))
    return 0


def add_subcommands(sub: argparse._SubParsersAction, then: Callable[[list[str]], int]) -> None:
    """The frontends' commands; `then` runs a further refir command (import-nvfuser --explain)."""
    imp = sub.add_parser("import-nvfuser", help="nvFuser's printed fusion IR -> a refir program")
    imp.add_argument("dump", help="a text file holding the dump (logs or a bug report), or - for stdin")
    imp.add_argument("-o", "--output", help="write the .rir here (default: print it)")
    imp.add_argument("--link", action="append", default=[], metavar="IN=OUT",
                     help="join segments: the later segment's input IN is the earlier one's output OUT")
    imp.add_argument("--bullet", default="+", choices=["+", "-", "*"],
                     help="the infix operator a markdown bullet replaced (default +)")
    imp.add_argument("--lost", choices=["+", "-", "*", "/"],
                     help="the infix operator a paste lost between two operands (`T3 = T1 T2;`; default: refused)")
    how = imp.add_mutually_exclusive_group()
    how.add_argument("--lower", action="store_true",
                     help="print the lowered program (segments, collectives, strides) instead of the .rir")
    how.add_argument("--explain", action="store_true", help="then run `refir explain` on the written program (-o)")
    imp.set_defaults(handler=cmd_import_nvfuser, then=then)
    red = sub.add_parser("redistribute", help="DTensor placements: build, run and explain a resharding")
    red.add_argument("--mesh", required=True, help="the device mesh shape, e.g. 4 or 2x2")
    red.add_argument("--shape", required=True, help="the global shape, e.g. 8,6")
    red.add_argument("--from", dest="src", required=True, help="placements per mesh dim, e.g. S0,P")
    red.add_argument("--to", dest="dst", required=True, help="placements per mesh dim, e.g. R,S1")
    red.add_argument("--dtype", default="f32", help="refir dtype (default f32)")
    red.add_argument("--seed", type=int, default=0, help="seed of the random contributions")
    red.add_argument("--no-run", action="store_true", help="only explain; do not run on the backends")
    red.set_defaults(handler=cmd_redistribute)
