"""The mutant table: the Mutant type, MUTANTS, and the `mutant` decorator a
family registers each of its mutants with.

A mutant is a generator function made a context manager (`inject`): it
patches one piece a backend is made of (a collective rule, a compute impl,
the team helper, the per-device loop) on entry and restores it on exit;
nothing is ever edited on disk. The suite must kill every one: the check a
mutant names must fail on some case (conformance/teeth.py runs them). Under
MPI every rank applies the same patch. The families import this module only;
the package's __init__ imports the families, in the order of the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str
    by: str  # the check meant to kill it: a mutant that merely crashes is not killed
    inject: Callable[[], AbstractContextManager]
    backend: str = "spmd"  # the backend it breaks
    transport: str = "any"  # the transport it breaks: any, in-process or mpi (shows only with a rank per process)
    needs: tuple[type, ...] = ()  # lowered ops a case must have to show it (cases without are skipped)
    reference: bool = False  # it breaks the impls the global reference runs on: its reference is made with it


MUTANTS: list[Mutant] = []


def mutant(bug: str, by: str, backend: str = "spmd", transport: str = "any", needs: tuple[type, ...] = (),
           reference: bool = False) -> Callable[[Callable[[], Iterator[None]]], Callable[[], Iterator[None]]]:
    def register(fn: Callable[[], Iterator[None]]) -> Callable[[], Iterator[None]]:
        MUTANTS.append(Mutant(fn.__name__, bug, by, contextmanager(fn), backend, transport, needs, reference))
        return fn

    return register
