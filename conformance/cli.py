"""`python -m refir conform` (and plain `python -m refir`): the differential suite.

It runs the corpus, the shared examples and generated programs on every
backend, compares each with the global reference, shrinks and saves what
fails, and exits non-zero on any disagreement. `--mutants` instead runs the
deliberately broken spmd backends and shows which check kills each.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from conformance.cases import Case, bundled_cases, cases_of, files_in
from conformance.check import Outcome, check_case, quiet, reference_of
from conformance.explore import drawn, minimize
from conformance.failures import conform_command, save
from conformance.mpi_batch import RANKS, SUITE, SuiteBatch, from_batch, to_batch, why_not
from conformance.report import Progress, not_tested, summary, write_junit
from refir.world.ranks import World, launched_by_mpi, mpi_world, say


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("programs", nargs="*", type=Path,
                   help=".rir files or directories to run instead of the bundled corpus")
    p.add_argument("--backend", action="append",
                   help="global, spmd, gpu or module:callable (repeatable; default: every available one)")
    p.add_argument("--cases", type=int, default=20, metavar="N", help="generated programs to run (default 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated programs and the input data")
    p.add_argument("--junit", type=Path, metavar="FILE", help="write a JUnit XML report")
    p.add_argument("--save", type=Path, default=Path("conform-failures"), metavar="DIR",
                   help="where failing generated cases are written (default ./conform-failures)")
    p.add_argument("--no-corpus", action="store_true", help="run generated programs only")
    p.add_argument("--mutants", action="store_true", help="run the mutant table on the spmd backend instead")
    p.add_argument("--coverage", action="store_true",
                   help="print which ops, dtypes, layouts, meshes and communications the run reaches, and what not")
    p.add_argument("--mutant", action="append", metavar="NAME",
                   help="run the mutant table for this mutant only (repeatable; implies --mutants)")
    p.add_argument("--kills-json", type=Path, metavar="FILE",
                   help="write which checks killed each mutant (implies --mutants)")
    p.add_argument("--until-killed", action="store_true",
                   help="stop each mutant at the first case that kills it: a quicker table, whose counts cover "
                        "only the cases run (implies --mutants)")
    p.add_argument("--no-mpi", action="store_true",
                   help="leave out the default run's batch under mpiexec -n 4 (run where an mpiexec is at hand)")
    p.add_argument("--outcomes-json", type=Path, help=argparse.SUPPRESS)  # how the MPI batch reports back
    p.add_argument("-v", "--verbose", action="store_true", help="print a line per case as it finishes")


def available_backends() -> list[str]:
    out = ["global", "spmd"]
    try:
        import gpu_backend.backend  # noqa: F401
    except ImportError:
        return out
    return out + ["gpu"]


def chosen_cases(args: argparse.Namespace) -> list[Case]:
    """The programs named on the command line, else the corpus and the shared examples."""
    if args.programs:
        return [c for f in files_in(args.programs) for c in cases_of(f, "files", args.seed)]
    return bundled_cases(args.seed)


def conform(args: argparse.Namespace) -> int:
    from refir.errors import InputError
    from refir.running.inputs import writable_file

    if args.seed < 0 or args.cases < 0:
        raise InputError(f"--seed {args.seed} --cases {args.cases}: both are non-negative integers")
    check_modes(args)
    check_inputs(args)
    if args.junit is not None:
        writable_file(args.junit, "--junit")
    if args.kills_json is not None:
        writable_file(args.kills_json, "--kills-json")
    if args.save.exists() and not args.save.is_dir():
        raise InputError(f"--save {args.save} is not a folder")
    from interp import sentinel

    sentinel.arm()  # receive buffers hold the sentinel before transports write them (REFIR_SENTINEL=0: not)
    with quiet():
        return mutants(args) if args.mutants else coverage(args) if args.coverage else suite(args)


def check_modes(args: argparse.Namespace) -> None:
    """One run of three (the suite, --mutants, --coverage); --mutant and --kills-json
    imply --mutants. Options another run would drop are refused (InputError)."""
    import difflib

    from refir.errors import InputError

    if args.mutant or args.kills_json or args.until_killed:
        args.mutants = True
    if args.mutants and args.coverage:
        raise InputError("--coverage and --mutants (or --mutant, --kills-json, --until-killed) are separate runs: "
                         "give one")
    if args.junit is not None and (args.mutants or args.coverage):
        other = "--mutants" if args.mutants else "--coverage"
        raise InputError(f"--junit reports the suite's cases: leave it out with {other}")
    if not args.mutant:
        return
    from conformance.mutants import MUTANTS

    names = [m.name for m in MUTANTS]
    for name in args.mutant:
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            raise InputError(f"--mutant {name}: no such mutant" + (f", did you mean {close[0]}" if close else
                                                                    f" (mutants: {', '.join(names)})"))


def check_inputs(args: argparse.Namespace) -> None:
    """Backends and program folders, before the work: a run of no case must not
    pass over an unknown backend, nor a folder of no programs."""
    from refir.errors import InputError
    from refir.running.backends import backend_named

    for name in args.backend or []:
        if name != "global":
            backend_named(name)  # an InputError for a name it does not know or cannot load
    for path in args.programs:
        if path.is_dir() and not any(path.glob("*.rir")):
            raise InputError(f"{path} is a folder with no .rir file in it")


def suite(args: argparse.Namespace) -> int:
    world = mpi_world()
    backends = args.backend or available_backends()
    if "gpu" in backends:
        # the CUDA target is chosen on this import, before numba.cuda is first imported (once another backend
        # ran first under mpiexec, numba.cuda was in and the choice followed it: no driver, every case an error)
        import gpu_backend.device  # noqa: F401
    cases = [] if args.no_corpus and not args.programs else chosen_cases(args)
    batch = _batch(args, world, backends)  # started first: it runs while the in-process cases do
    progress = Progress(len(cases) + args.cases + (batch is not None), world, args.verbose)
    start = time.monotonic()
    try:
        outcomes = _in_process(args, cases, backends, progress)
    except BaseException:  # an error or ^C: the batch's mpiexec must not outlive the run
        if batch is not None:
            batch.abandon()
        raise
    broken = ""
    if batch is not None:
        progress.step(f"{len(SUITE)} programs under mpiexec -n {RANKS}")
        got = batch.outcomes()
        if isinstance(got, str):
            broken = got
        else:
            outcomes += from_batch(got, args.seed)
    progress.close()
    where = f"{world.size} MPI ranks" if world else "ranks simulated in one process"
    if batch is not None and not broken:
        where += f" (the mpi row: {RANKS} MPI ranks, one per process)"
    say(summary(outcomes, backends, where, time.monotonic() - start, broken))
    if not args.programs:
        say("\n" + not_tested(backends, world, _batch_state(args, world, batch, broken)))
    if args.outcomes_json and (world is None or world.is_root):
        args.outcomes_json.write_text(json.dumps(to_batch(outcomes)))
    if args.junit and (world is None or world.is_root):
        write_junit(args.junit, outcomes, time.monotonic() - start)
    return 1 if broken or any(o.status == "fail" for o in outcomes) else 0


def _in_process(args: argparse.Namespace, cases: list[Case], backends: list[str], progress: Progress) -> list[Outcome]:
    """The cases this process runs: the chosen ones, then the generated ones (shrunk and saved where they fail)."""
    outcomes: list[Outcome] = []
    for case in cases:
        progress.step(case.name)
        outcomes += [replace(o, replay=conform_command(case.path, o.backend)) if o.status == "fail" and case.path
                     else o for o in check_case(case, backends)]
    for index in range(args.cases):
        progress.step(f"generated {index}")
        ran = [o for case in drawn(args.seed, index) for o in check_case(case, backends)]
        replays: dict[str, str] = {}
        for o in ran:  # one shrink per program and backend, however many bindings fail
            if o.status == "fail" and o.backend not in replays:
                replays[o.backend] = _saved(o, args.save)
        outcomes += [replace(o, replay=replays[o.backend]) if o.status == "fail" else o for o in ran]
    return outcomes


def _batch(args: argparse.Namespace, world: World | None, backends: list[str]) -> SuiteBatch | None:
    """The default run's MPI batch, started, where it is due and can run."""
    if world is not None or launched_by_mpi() or args.no_mpi or args.programs or args.no_corpus or why_not():
        return None  # under a launcher already (a world of one too): no mpiexec inside mpiexec
    # every backend asked for; by default those that reach a transport (global has none)
    chosen = args.backend or [b for b in backends if b != "global"]
    short = gpus_short() if "gpu" in chosen else ""
    if short:  # one rank a GPU: four ranks on fewer GPUs would be refused by NCCL (InvalidUsage)
        say(f"the mpi row leaves out the gpu backend: {short}")
        chosen = [b for b in chosen if b != "gpu"]
    return SuiteBatch(chosen, args.seed) if chosen else None


def gpus_short() -> str:
    """Why the gpu backend cannot take the batch's RANKS ranks here, or '': on real
    GPUs each rank needs a GPU of its own (the simulator has no such bound)."""
    from gpu_backend.device import SIMULATED

    if SIMULATED:
        return ""
    from numba import cuda

    found = len(cuda.gpus)
    return "" if found >= RANKS else (f"{found} GPU{'s' if found != 1 else ''} here, and its {RANKS} ranks need one "
                                      f"each (run `mpiexec -n {found} python -m refir conform --backend gpu`)")


def _batch_state(args: argparse.Namespace, world: World | None, batch: SuiteBatch | None, broken: str) -> str:
    """What became of the MPI batch, for the closing hints ('' under MPI)."""
    if world is not None or launched_by_mpi():
        return ""
    if batch is not None:
        return f"failed: {broken}" if broken else "ran"
    if args.no_mpi:
        return "--no-mpi left it out"
    if why_not():
        return why_not()
    if args.no_corpus or args.programs:
        return "--no-corpus left it out" if args.no_corpus else "programs named on the command line left it out"
    return f"no backend left for it: the gpu backend's {gpus_short()}"


def _saved(outcome: Outcome, directory: Path) -> str:
    """Shrink a failing generated case, write it down, print it, and return
    the command that replays it."""
    small = minimize(outcome)
    size = f"shrunk from {len(outcome.case.checked.func.eqns)} to {len(small.case.checked.func.eqns)} equations"
    try:
        ref = reference_of(small.case)
    except Exception:
        ref = None  # the reference itself fails: the file has no expect lines
    case, command = save(small, ref, directory, size)
    say(f"\n{outcome.backend} fails generated case {outcome.case.name} ({size}):\n"
        f"{case.path.read_text() if case.path else ''}replay: {command}\n")
    return command


def coverage(args: argparse.Namespace) -> int:
    from conformance.coverage import Coverage, render

    cases = [] if args.no_corpus and not args.programs else chosen_cases(args)
    generated = [c for index in range(args.cases) for c in drawn(args.seed, index)]
    say(render(Coverage().measure(cases + generated), args.cases, args.seed))
    return 0


def mutants(args: argparse.Namespace) -> int:
    import json

    from conformance.mutants import MUTANTS
    from conformance.teeth import as_json, hunt, table

    chosen = [m for m in MUTANTS if not args.mutant or m.name in args.mutant]
    cases = chosen_cases(args)
    kills = hunt(cases + [c for index in range(args.cases) for c in drawn(args.seed, index)], mutants=chosen,
                 backends=tuple(available_backends()), until_killed=args.until_killed)
    world = mpi_world()
    if args.kills_json and (world is None or world.is_root):
        args.kills_json.write_text(json.dumps(as_json(kills)))
    say(table(kills))
    return 0 if all(k.killed or k.not_run for k in kills) else 1
