"""The command line: `python -m refir [run|check|lower|conform] ...`."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import refir
from refir.errors import RefirError, RunError
from refir.expect import check_expects
from refir.inputs import bind_lines, default_bindings, draw_inputs, parse_bind, read_inputs, source_text
from refir.verify import Checked
from refir.world import mpi_world, say


def _program_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("program", help="a .rir file")
    p.add_argument("--func", help="the function to use (default: main, or the only one)")


def _bindings(args: argparse.Namespace, checked: Checked) -> dict[str, int]:
    given = parse_bind(" ".join(args.bind)) if args.bind else None
    if given is None:
        listed = bind_lines(source_text(checked.program))
        given = listed[0] if listed else None
    return default_bindings(checked, given)


def _prepare(args: argparse.Namespace, root: bool) -> tuple[refir.Program, Checked, dict[str, np.ndarray]]:
    """The program, and the global inputs where `root` (under MPI, rank 0 alone
    reads or draws them; the others receive their blocks)."""
    program = refir.load(args.program)
    checked = refir.verify(program, args.func)
    if args.inputs and (args.bind or args.seed is not None):
        raise RunError("--inputs fixes every extent and value: leave out --bind and --seed")
    if not root:
        return program, checked, {}
    if args.inputs:
        return program, checked, read_inputs(args.inputs)
    return program, checked, draw_inputs(checked, _bindings(args, checked), args.seed or 0)


def cmd_run(args: argparse.Namespace) -> int:
    world = mpi_world()
    if world is None:
        program, checked, inputs = _prepare(args, True)
    else:
        from refir.mpi import COMMS, agreed

        (program, checked, inputs), _ = agreed(COMMS.world(), "every rank to read the program",
                                               lambda: _prepare(args, world.is_root))
    result = refir.run(program, inputs, backend=args.backend, world=args.world, func=args.func)
    if world is not None and not world.is_root:
        return 0  # rank 0 has the results, and says what they are
    lines = [f"{args.program}: {checked.func.name} on {args.backend}"
             + (f" ({', '.join(f'{k}={v}' for k, v in sorted(result.bindings.items()))})" if result.bindings else "")]
    for name, value in result.outputs.items():
        lines.append(f"{name}: {checked.types[name]} = shape {value.shape}\n  "
                     + np.array2string(value, threshold=64, edgeitems=3, prefix="  "))
    # Expect lines speak of the program's main function.
    main_func = len(program.funcs) == 1 or checked.func.name == "main"
    failures = check_expects(program, inputs, result.outputs) if main_func else []
    for f in failures:
        lines.append(f"FAILED {f}")
    if main_func and program.expects and not failures:
        lines.append(f"all {len(program.expects)} expect lines hold")
    say("\n".join(lines))
    if args.out:
        np.savez(args.out, **result.outputs)
        say(f"wrote {args.out}")
    return 1 if failures else 0


def cmd_check(args: argparse.Namespace) -> int:
    from refir.printer import format_func, format_mesh

    if args.json:
        from refir.explain import json_check

        return json_check(args)

    program = refir.load(args.program)
    names = [args.func] if args.func else [f.name for f in program.funcs]
    texts = [format_mesh(m) for m in program.meshes] + [""]
    for name in names:
        checked = refir.verify(program, name)
        texts.append(format_func(checked.func, checked.types))
    say("\n".join(texts) + f"\n{args.program}: ok")
    return 0


def cmd_lower(args: argparse.Namespace) -> int:
    from refir.listing import format_lowered
    from refir.lower import lower

    if args.json:
        from refir.explain import json_lower

        return json_lower(args)
    checked = refir.verify(refir.load(args.program), args.func)
    say(format_lowered(lower(checked)))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from refir.explain import cmd_explain as explain

    return explain(args)


def cmd_trace(args: argparse.Namespace) -> int:
    from refir.trace import cmd_trace as trace

    return trace(args)


def cmd_conform(args: argparse.Namespace) -> int:
    from conformance.cli import conform

    return conform(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="refir", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run a program on global inputs")
    _program_args(run)
    src = run.add_mutually_exclusive_group()
    src.add_argument("--inputs", help=".npz of global input arrays, named by parameter")
    src.add_argument("--seed", type=int, help="draw inputs from this seed (default 0)")
    run.add_argument("--bind", nargs="*", default=[], metavar="SYM=N", help="symbol values for drawn inputs")
    run.add_argument("--out", help="write the global results to this .npz")
    run.add_argument("--backend", default="spmd", help="global, spmd, gpu, or module:callable")
    run.add_argument("--world", type=int, help="number of ranks (default: what the meshes need)")
    run.set_defaults(handler=cmd_run)
    check = sub.add_parser("check", help="verify and print every inferred type")
    _program_args(check)
    check.set_defaults(handler=cmd_check)
    low = sub.add_parser("lower", help="print segments, communications, shapes and strides")
    _program_args(low)
    low.set_defaults(handler=cmd_lower)
    from refir.explain import add_view_args
    from refir.trace import add_trace_args

    add_view_args(check)
    add_view_args(low)
    explain = sub.add_parser("explain", help="pictures of every value's placement and every communication")
    _program_args(explain)
    add_view_args(explain, pictures=True)
    explain.set_defaults(handler=cmd_explain)
    trace = sub.add_parser("trace", help="run on spmd and show every device's buffers, step by step")
    _program_args(trace)
    add_trace_args(trace)
    trace.set_defaults(handler=cmd_trace)
    from refir.frontend_cli import add_subcommands

    add_subcommands(sub)
    from conformance.cli import add_arguments

    conform = sub.add_parser("conform", help="the differential conformance suite")
    add_arguments(conform)
    conform.set_defaults(handler=cmd_conform)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["conform", *(argv or [])])
    try:
        return args.handler(args)
    except RefirError as exc:
        world = mpi_world()
        if world is None:
            sys.stderr.write(f"error: {exc}\n")
            return 2
        # An error every rank agreed on (refir.mpi.agreed): rank 0 reports, all exit.
        if getattr(exc, "agreed", False):
            if world.is_root:
                sys.stderr.write(f"error: {exc}\n")
            return 2
        # Anything else may have struck this rank alone: end the others too.
        text = str(exc).removeprefix(f"rank {world.rank}: ")
        sys.stderr.write(f"rank {world.rank}: error: {text}\n")
        sys.stderr.flush()
        time.sleep(0.5)  # let the launcher forward this rank's stderr before the job is torn down
        world.comm.Abort(2)
        return 2


def console_main() -> None:
    """The `refir` console script."""
    from refir.world import abort_on_error

    sys.exit(abort_on_error(main))
