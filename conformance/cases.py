"""Conformance cases: a program, one binding of its symbols, and its input data.

A corpus file may carry, besides `# expect:` lines:

    # bind: N=4 M=3            one case per line (default: refir's bindings)
    # data: exact special      the kinds of input data to run (default: exact)
    # data: exact/dense        a kind with every input row-major (no gaps, no reversal)
    # data: {"kind": ...}      or one exact DataSpec, as a saved failure has

The shared examples are read from ../shared/examples (or $REFIR_SHARED/examples).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

import refir
from conformance.data import KINDS, DataSpec, make_inputs
from refir.checks.verifier import Checked
from refir.errors import InputError
from refir.ir.program import Program
from refir.running.inputs import bind_lines, default_bindings, program_symbols
from refir.text.load import read_source

CORPUS = Path(__file__).parent / "corpus"
_DATA = re.compile(r"^#\s*data:\s*(.*?)\s*$", re.M)


def shared_examples() -> Path:
    root = Path(os.environ.get("REFIR_SHARED", Path(__file__).resolve().parents[2] / "shared"))
    return root / "examples"


@dataclass(frozen=True)
class Case:
    group: str  # corpus, examples, generated, or files
    label: str
    program: Program = field(repr=False)
    bindings: dict[str, int]
    data: DataSpec
    path: Path | None = None  # the file the program came from, if any
    choices: tuple[int, ...] = field(default=(), repr=False)  # generated: the draws that built it

    @property
    def name(self) -> str:
        bind = ",".join(f"{k}={v}" for k, v in sorted(self.bindings.items()))
        kind = self.data.kind + ("/dense" if self.data.views == () else "")
        return f"{self.label}[{bind}]/{kind}" if bind else f"{self.label}/{kind}"

    @cached_property
    def checked(self) -> Checked:
        return refir.verify(self.program)

    def inputs(self) -> dict[str, np.ndarray]:
        """Fresh global inputs, the same every time and on every rank."""
        return make_inputs([(p.name, p.type) for p in self.checked.func.params], self.bindings, self.data)


def data_specs(text: str, seed: int) -> list[DataSpec]:
    specs: list[DataSpec] = []
    for line in _DATA.findall(text):
        if line.startswith("{"):
            try:
                specs.append(DataSpec.from_json(line))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise InputError(f"bad '# data:' line {line[:60]!r}: {type(exc).__name__}: {exc}") from exc
            continue
        for word in line.split():
            # `kind/dense`: no views drawn, every input row-major (conformance/data.py make_inputs),
            # for a backend path that only row-major inputs take (the gpu's word copy of long rows)
            kind, dense = (word[:-len("/dense")], True) if word.endswith("/dense") else (word, False)
            if kind not in KINDS:
                raise InputError(f"unknown data kind {word!r} (known: {', '.join(KINDS)}, each may end in /dense)")
            specs.append(DataSpec(kind, seed, () if dense else None))
    return specs or [DataSpec("exact", seed)]


def cases_of(path: Path, group: str = "files", seed: int = 0) -> list[Case]:
    """One case per `# bind:` line and data kind."""
    text = read_source(path)
    program = refir.parse(text, str(path))
    checked = refir.verify(program)
    return [Case(group, path.stem, program, default_bindings(checked, b), spec, path)
            for b in (bind_lines(text, str(path), program_symbols(program)) or [{}]) for spec in data_specs(text, seed)]


def files_in(paths: list[Path]) -> list[Path]:
    return [f for p in paths for f in (sorted(p.glob("*.rir")) if p.is_dir() else [p])]


def bundled_cases(seed: int = 0) -> list[Case]:
    """The corpus, then the shared examples (where the checkout has them)."""
    out = [c for f in files_in([CORPUS]) for c in cases_of(f, "corpus", seed)]
    if shared_examples().is_dir():
        out += [c for f in files_in([shared_examples()]) for c in cases_of(f, "examples", seed)]
    return out
