"""Inputs for a run: drawn from a seed, or read from an .npz file; `# bind:` lines."""

from __future__ import annotations

import re
from math import lcm
from pathlib import Path

import numpy as np

from refir.errors import InputError
from refir.program import Program
from refir.types import extent_value
from refir.verify import Checked

_BIND = re.compile(r"^#\s*bind:\s*(.*)$", re.M)


def parse_bind(text: str) -> dict[str, int]:
    """`N=8 D=4` (also `N=8, D=4`) -> {"N": 8, "D": 4}."""
    out = {}
    for item in re.split(r"[,\s]+", text.strip()):
        if not item:
            continue
        name, eq, value = item.partition("=")
        if not eq or not value.strip().lstrip("-").isdigit():
            raise InputError(f"bad binding {item!r}: write NAME=INTEGER")
        out[name.strip()] = int(value)
    return out


def bind_lines(text: str) -> list[dict[str, int]]:
    """The bindings a program lists in its `# bind:` comment lines."""
    return [parse_bind(m.group(1)) for m in _BIND.finditer(text)]


def default_bindings(checked: Checked, given: dict[str, int] | None = None) -> dict[str, int]:
    """A value for every symbol: the given one, else the smallest multiple of every
    mesh-axis size that shards it that is at least 4."""
    out = dict(given or {})
    unknown = sorted(set(out) - set(checked.symbols))
    if unknown:
        raise InputError(f"--bind names {unknown[0]!r}, which is not a symbol of {checked.func.name}")
    for s in sorted(checked.symbols - set(out)):
        step = lcm(*[t.mesh.size(a.shard) for t in checked.types.values() for a in t.axes
                     if a.extent == s and a.shard] or [1])
        out[s] = step * -(-4 // step)
    return out


def draw_inputs(checked: Checked, bindings: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Random inputs; floats are small integers so that every order of summation
    gives the same bits."""
    rng = np.random.default_rng(seed)
    out = {}
    for p in checked.func.params:
        shape = tuple(extent_value(a.extent, bindings) for a in p.type.axes)
        dt = p.type.np_dtype
        if dt.kind == "b":
            out[p.name] = rng.integers(0, 2, shape).astype(dt)
        elif dt.kind == "u":
            out[p.name] = rng.integers(0, 8, shape).astype(dt)
        else:
            out[p.name] = rng.integers(-4, 5, shape).astype(dt)
    return out


def read_inputs(path: str) -> dict[str, np.ndarray]:
    try:
        with np.load(Path(path)) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read inputs from {path}: {exc}") from exc


def source_text(program: Program) -> str:
    try:
        return Path(program.file).read_text()
    except OSError:
        return ""
