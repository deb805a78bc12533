"""Conformance cases: a program file, a function, one binding of its symbols."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import refir
from refir.inputs import bind_lines, default_bindings
from refir.program import Program

CORPUS = Path(__file__).parent / "corpus"


@dataclass(frozen=True)
class Case:
    path: Path
    program: Program = field(compare=False, repr=False)
    bindings: dict[str, int] = field(compare=False)
    seed: int = 0

    @property
    def name(self) -> str:
        bind = ",".join(f"{k}={v}" for k, v in sorted(self.bindings.items()))
        return f"{self.path.stem}[{bind}]" if bind else self.path.stem

    def replay(self, backend: str) -> str:
        bind = f" --bind {' '.join(f'{k}={v}' for k, v in sorted(self.bindings.items()))}" if self.bindings else ""
        return f"python -m refir run {self.path} --backend {backend} --seed {self.seed}{bind}"


def corpus_files(dirs: list[Path] | None = None) -> list[Path]:
    return sorted(p for d in (dirs or [CORPUS]) for p in Path(d).glob("*.rir"))


def cases_of(path: Path, seed: int = 0) -> list[Case]:
    """One case per `# bind:` line (or one with default bindings)."""
    program = refir.load(path)
    checked = refir.verify(program)
    listed = bind_lines(path.read_text()) or [{}]
    return [Case(path, program, default_bindings(checked, b), seed) for b in listed]
