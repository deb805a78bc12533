"""The command line: `python -m refir COMMAND ...`.

  run             run a program on global inputs (drawn from a seed, or an .npz)
  check           verify a program and print every inferred type
  lower           print segments, communications, local shapes and strides
  explain         pictures of who holds what and who sends what (--json, --svg, --html)
  trace           run on spmd (or gpu) and show every device's buffers, step by step
  import-nvfuser  nvFuser's printed fusion IR -> a refir program
  redistribute    DTensor placements: build, run and explain a resharding
  peer            the suite against torch DTensor or JAX, rank by rank (docs/peers.md)
  conform         the differential conformance suite (--mutants, --coverage)

With no subcommand, refir runs `conform`: the bundled conformance corpus (and the
shared examples, where they are checked out beside it) and generated programs on
every backend this machine has, with a summary table. conform's options are
accepted here too: `python -m refir --cases 5 --backend spmd`."""

from __future__ import annotations

import argparse
import difflib
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

from refir import env
from refir.checks.expect_lines import check_expects
from refir.checks.limits import DEVICES
from refir.checks.verifier import Checked, verify, verify_all
from refir.errors import InputError, ParseError, RefirError, RunError, VerifyError, printable
from refir.ir.program import Func, Program
from refir.ir.types import TensorType, resolved
from refir.running.inputs import as_bf16, bindings_for, draw_inputs, read_inputs, writable_file
from refir.running.runner import run
from refir.text.load import load
from refir.world.ranks import mpi_world, say


def _program_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("program", help="a .rir file, or - for standard input")
    p.add_argument("--func", help="the function to use (default: main, or the only one)")


def _out_path(out: str | None) -> Path | None:
    """--out, checked before anything runs; it is written exactly there."""
    return None if out is None else writable_file(out, "--out")


def _prepare(args: argparse.Namespace, root: bool) -> tuple[Program, Checked, dict[str, np.ndarray],
                                                            Path | None]:
    """The program, and where `root` the global inputs and the checked --out
    path (under MPI, rank 0 alone reads or draws the inputs, and writes --out;
    the others receive their blocks)."""
    out = _out_path(args.out) if root else None
    saved = writable_file(Path(args.save_inputs), "--save-inputs") if root and args.save_inputs else None
    if args.seed is not None and args.seed < 0:
        raise InputError(f"--seed {args.seed}: a seed is a non-negative integer")
    if args.world is not None:
        if args.world < 1:
            raise InputError(f"--world {args.world}: a world has at least one rank")
        DEVICES.check(args.world, "--world asks for")
    program = load(Path(args.program))
    checked = verify(program, args.func)
    if args.inputs and (args.bind or args.seed is not None):
        raise RunError("--inputs fixes every extent and value: leave out --bind and --seed")
    if not root:
        return program, checked, {}, out
    if args.inputs:
        inputs = as_bf16(checked, read_inputs(args.inputs))
    else:
        inputs = draw_inputs(checked, bindings_for(checked, args.bind), args.seed or 0, args.backend)
    if saved is not None:  # before the run, so that a run that fails leaves its inputs behind
        _write_npz(saved, inputs, "--save-inputs")
    return program, checked, inputs, out


def _write_npz(path: Path, arrays: dict[str, np.ndarray], option: str) -> None:
    try:
        with path.open("wb") as f:  # exactly this path: np.savez(name) would append .npz
            np.savez(f, **arrays)
    except OSError as exc:
        raise InputError(f"cannot write {option} {path}: {exc.strerror or exc}") from exc
    say(f"wrote {path}")


def cmd_run(args: argparse.Namespace) -> int:
    world = mpi_world()
    if world is None:
        program, checked, inputs, out = _prepare(args, True)
    else:
        from refir.world.mpi_job import COMMS, agreed

        (program, checked, inputs, out), _ = agreed(COMMS.world(), "every rank to read the program",
                                                    lambda: _prepare(args, world.is_root))
    result = run(program, inputs, backend=args.backend, world=args.world, func=args.func)
    if world is not None and not world.is_root:
        return 0  # rank 0 has the results, and says what they are
    lines = [f"{args.program}: {checked.func.name} on {args.backend}"
             + (f" ({', '.join(f'{k}={v}' for k, v in sorted(result.bindings.items()))})" if result.bindings else "")]
    for name, value in result.outputs.items():
        lines.append(f"{name}: {checked.types[name]} = shape {value.shape}\n  "
                     + np.array2string(value, threshold=64, edgeitems=3, prefix="  "))
    # Expect lines speak of the program's main function.
    main_func = len(program.funcs) == 1 or checked.func.name == "main"
    failures = check_expects(program, inputs, result.outputs, symbols=result.bindings) if main_func else []
    for f in failures:
        lines.append(f"FAILED {f}")
    if main_func and program.expects and not failures:
        lines.append(f"all {len(program.expects)} expect lines hold")
    say("\n".join(lines))
    if out is not None:  # rank 0 (the others returned above)
        _write_npz(out, result.outputs, "--out")
    return 1 if failures else 0


def cmd_check(args: argparse.Namespace) -> int:
    from refir.text.printer import format_func, format_mesh

    if args.json:
        from refir.explain.report import json_check

        return json_check(args)

    program = load(Path(args.program))
    every = [verify(program, args.func)] if args.func else verify_all(program)
    texts = [format_mesh(m) for m in program.meshes] + [""]
    bound = ""
    for checked in every:
        if args.bind:  # every extent its bound value
            bindings = bindings_for(checked, args.bind)
            bound = " with " + ", ".join(f"{k}={v}" for k, v in sorted(bindings.items()))
            texts.append(format_func(*_resolved(checked, bindings)))
        else:
            texts.append(format_func(checked.func, checked.types))
    say("\n".join(texts) + f"\n{program.file}: ok{bound}")
    return 0


def _resolved(checked: Checked, bindings: dict[str, int]) -> tuple[Func, dict[str, TensorType]]:
    """The function and its types with every symbol replaced by its binding."""
    types = {n: resolved(t, bindings) for n, t in checked.types.items()}
    func = replace(checked.func, params=tuple(replace(p, type=types[p.name]) for p in checked.func.params),
                   eqns=tuple(replace(e, type=None) for e in checked.func.eqns))
    return func, types


def cmd_lower(args: argparse.Namespace) -> int:
    from refir.explain.lowered_listing import format_lowered
    from refir.lowering.lower import lower

    if args.json:
        from refir.explain.report import json_lower

        return json_lower(args)
    checked = verify(load(Path(args.program)), args.func)
    say(format_lowered(lower(checked), bindings_for(checked, args.bind) if args.bind else None))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from refir.explain.report import cmd_explain as explain

    return explain(args)


def cmd_trace(args: argparse.Namespace) -> int:
    from refir.explain.trace import cmd_trace as trace

    return trace(args)


def cmd_conform(args: argparse.Namespace) -> int:
    from conformance.cli import conform

    return conform(args)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("refir")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    from conformance.cli import add_arguments

    parser = argparse.ArgumentParser(prog="refir", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="`refir COMMAND --help` describes each command; the options of "
                                     "conform (refir conform --help) apply with no command too.")
    parser.add_argument("--version", action="version", version=f"refir {version()}")
    sub = parser.add_subparsers(dest="command")
    run_cmd = sub.add_parser("run", help="run a program on global inputs")
    _program_args(run_cmd)
    src = run_cmd.add_mutually_exclusive_group()
    src.add_argument("--inputs", help=".npz of global input arrays, named by parameter")
    src.add_argument("--seed", type=int, help="draw inputs from this seed (default 0)")
    run_cmd.add_argument("--bind", nargs="*", default=[], metavar="SYM=N",
                     help="symbol values for drawn inputs, each over the # bind: line's")
    run_cmd.add_argument("--out", help="write the global results to this .npz")
    run_cmd.add_argument("--save-inputs", metavar="FILE.npz", help="write the global inputs (drawn or read) to this "
                     ".npz, before the run; --inputs FILE.npz runs them again")
    run_cmd.add_argument("--backend", default="spmd", help="global, spmd, gpu, or module:callable")
    run_cmd.add_argument("--world", type=int, help="number of ranks (default: what the meshes need)")
    run_cmd.set_defaults(handler=cmd_run)
    check = sub.add_parser("check", help="verify and print every inferred type")
    _program_args(check)
    check.set_defaults(handler=cmd_check)
    low = sub.add_parser("lower", help="print segments, communications, shapes and strides")
    _program_args(low)
    low.set_defaults(handler=cmd_lower)
    from refir.explain.report import add_view_args
    from refir.explain.trace import add_trace_args

    add_view_args(check)
    add_view_args(low)
    explain = sub.add_parser("explain", help="pictures of every value's placement and every communication")
    _program_args(explain)
    add_view_args(explain, pictures=True)
    explain.set_defaults(handler=cmd_explain)
    trace = sub.add_parser("trace", help="run on spmd (or gpu) and show every device's buffers, step by step")
    _program_args(trace)
    add_trace_args(trace)
    trace.set_defaults(handler=cmd_trace)
    from refir.frontends.cli import add_subcommands

    add_subcommands(sub, then=main)
    from conformance.peers.cli import add_arguments as peer_arguments
    from conformance.peers.cli import peer_command

    peer = sub.add_parser("peer", help="the suite against torch DTensor or JAX, rank by rank (docs/peers.md)")
    peer_arguments(peer)
    peer.set_defaults(handler=peer_command)
    conform = sub.add_parser("conform", help="the differential conformance suite")
    add_arguments(conform)
    conform.set_defaults(handler=cmd_conform)
    return parser


def with_command(argv: list[str], commands: list[str]) -> list[str]:
    """`argv` with its command; none given is conform, whose options are accepted
    here (--help and --version stay the top level's). A first word that is no
    command, no existing path and no option is a mistyped command."""
    first = argv[0] if argv and not argv[0].startswith("-") else None
    if first in commands or {"-h", "--help", "--version"} & set(argv):
        return argv
    if first is not None and not Path(first).exists():
        close = difflib.get_close_matches(first, commands, n=1)
        if close:
            raise InputError(f"unknown command {first!r}, did you mean {close[0]}")
        if "/" not in first and "." not in first:
            raise InputError(f"unknown command {first!r} (commands: {', '.join(commands)}; "
                             "a .rir file or folder runs conform on it)")
    return ["conform", *argv]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = list(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)
    try:
        env.check_all()  # a bad REFIR_* value: one line, before anything runs
        args = parser.parse_args(with_command(argv, commands))
        # Integers wrap and floats overflow to inf by the spec: numpy's warnings about it are
        # noise, from this thread (errstate) or from the CUDA simulator's threads (the filter).
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.filterwarnings("ignore", r"(overflow|invalid value|divide by zero|underflow) encountered",
                                    RuntimeWarning)
            return args.handler(args)
    except RefirError as exc:
        message = printable(str(exc))  # never a garbage file's raw bytes on the terminal
        world = mpi_world()
        if world is None:
            sys.stderr.write(f"error: {message}\n")
            return 2
        # An error every rank agreed on (refir.world.mpi_job.agreed), or a bad program or input,
        # which every rank meets alike outside `run`: rank 0 reports, all exit.
        if getattr(exc, "agreed", False) or isinstance(exc, (ParseError, VerifyError, InputError)):
            if world.is_root:
                sys.stderr.write(f"error: {message}\n")
            return 2
        # Another rank failed in this run and told this one (refir.world.rank_failures): that
        # rank prints why and ends the job; this one stays quiet, ending it too should that not come.
        if getattr(exc, "heard", False):
            time.sleep(5)
            world.comm.Abort(2)
            return 2
        # Anything else may have struck this rank alone: end the others too.
        text = message.removeprefix(f"rank {world.rank}: ")
        sys.stderr.write(f"rank {world.rank}: error: {text}\n")
        sys.stderr.flush()
        time.sleep(0.5)  # let the launcher forward this rank's stderr before the job is torn down
        world.comm.Abort(2)
        return 2


def console_main() -> None:
    """The `refir` console script."""
    from refir.world.ranks import abort_on_error

    sys.exit(abort_on_error(main))
