"""Inputs for a run: drawn from a seed, or read from an .npz file; `# bind:` lines."""

from __future__ import annotations

import os
import re
import zipfile
from math import lcm, prod
from pathlib import Path

import numpy as np

from refir.checks.limits import INPUT_BYTES, check_shape
from refir.checks.rules_reshape import check_bound, check_quotients
from refir.checks.rules_window import check_select_bounds
from refir.checks.verifier import Checked
from refir.errors import InputError
from refir.ir import ops
from refir.ir.program import Program
from refir.ir.types import ExtentExpr, extent_value, global_shape, parts_of

_BIND = re.compile(r"^#\s*bind:\s*(.*)$", re.M)


def parse_bind(text: str, where: str = "--bind") -> dict[str, int]:
    """`N=8 D=4` (also `N=8, D=4`) -> {"N": 8, "D": 4}; `where` (the option, or
    `file:line: the # bind: line`) begins every error, and a symbol bound twice is one."""
    out: dict[str, int] = {}
    for item in re.split(r"[,\s]+", text.strip()):
        if not item:
            continue
        name, eq, value = item.partition("=")
        if not eq or not name.isidentifier() or not re.fullmatch(r"[0-9]{1,18}", value, re.ASCII):
            raise InputError(f"{where}: bad binding {item!r}: write NAME=N, N a non-negative integer")
        if name in out:
            raise InputError(f"{where}: {name} is bound twice ({name}={out[name]} and {item}): bind it once")
        out[name] = int(value)
    return out


def bind_lines(text: str, file: str = "<text>", symbols: set[str] | None = None) -> list[dict[str, int]]:
    """The bindings a program lists in its `# bind:` comment lines; with `symbols`
    (those of every function), a line that names another symbol is refused at its line."""
    out = []
    text = text.removeprefix("\ufeff")
    for m in _BIND.finditer(text):
        where = f"{file}:{text.count(chr(10), 0, m.start()) + 1}: the # bind: line"
        bound = parse_bind(m.group(1), where)
        unknown = sorted(set(bound) - symbols) if symbols is not None else []
        if unknown:
            raise InputError(f"{where} names {unknown[0]!r}, which is a symbol of no function "
                             f"(symbols: {', '.join(sorted(symbols or ())) or 'none'})")
        out.append(bound)
    return out


def program_symbols(program: Program) -> set[str]:
    return {s for f in program.funcs for p in f.params for s in p.type.symbols()}


def bindings_for(checked: Checked, bind: list[str] | None) -> dict[str, int]:
    """A command's bindings: the program's first `# bind:` line (its symbols of this
    function), each symbol --bind names set to the value given there, the rest
    refir's defaults."""
    listed = bind_lines(source_text(checked.program), checked.program.file, program_symbols(checked.program))
    given = {k: v for k, v in (listed[0] if listed else {}).items() if k in checked.symbols}
    asked = parse_bind(" ".join(bind)) if bind else {}
    unknown = sorted(set(asked) - set(checked.symbols))
    if unknown:
        known = f" (its symbols: {', '.join(sorted(checked.symbols))})" if checked.symbols else ""
        raise InputError(f"--bind names {unknown[0]!r}, which is not a symbol of {checked.func.name}{known}")
    return default_bindings(checked, {**given, **asked})


def default_bindings(checked: Checked, given: dict[str, int] | None = None) -> dict[str, int]:
    """A value for every symbol: the given one, else the smallest multiple of every
    mesh-axis size that shards it and of every integer divisor an expression
    divides it by (`E/3`: E a multiple of 3) that is at least 4. Checked as a run checks them
    before anything runs (every shape within the limits, select_c3, reshape_c2 and
    reshape_c4), so that `check`, `lower` and `explain` refuse what `run` refuses."""
    out = dict(given or {})
    unknown = sorted(set(out) - set(checked.symbols))
    if unknown:
        raise InputError(f"--bind names {unknown[0]!r}, which is not a symbol of {checked.func.name}")
    for s in sorted(checked.symbols - set(out)):
        step = lcm(*[parts_of(t.mesh, a) for t in checked.types.values() for a in t.axes
                     if a.extent == s and a.shard] or [1], *_divisors_of(checked, s))
        out[s] = step * -(-4 // step)
    check_quotients(checked, out)  # type_c9, naming the equation, before a shape is worked out
    for name, t in checked.types.items():
        check_shape(global_shape(t, out), f"with {', '.join(f'{k}={v}' for k, v in sorted(out.items()))}, {name}: {t}")
    check_select_bounds(checked.func, checked.types, out)  # select_c3
    check_bound(checked, out)  # reshape_c2, reshape_c4
    return out


def _divisors_of(checked: Checked, symbol: str) -> list[int]:
    """What `symbol` must be a multiple of for every expression over it to divide
    exactly: `E/3` asks 3, `2*E/4` (that is E/2) asks 2."""
    exprs = [a.extent for t in checked.types.values() for a in t.axes]
    exprs += [e for eqn in checked.func.eqns if isinstance(eqn.op, ops.Reshape) for e in eqn.op.shape]
    return [e.den for e in exprs if isinstance(e, ExtentExpr) and isinstance(e.den, int) and symbol in e.syms]


def draw_inputs(checked: Checked, bindings: dict[str, int], seed: int, backend: str | None = None,
                keep: bool = False) -> dict[str, np.ndarray]:
    """Random inputs; floats are small integers so that every order of summation
    gives the same bits. The run's memory on `backend` (None: any) is checked
    first (memory_c1): a refused run draws nothing."""
    from refir.checks.footprint import RunKind
    from refir.running.prepare import check_memory

    if seed < 0:  # numpy's own complaint would be a traceback
        raise InputError(f"--seed {seed}: a seed is a non-negative integer")
    check_memory(checked, bindings, RunKind(backend if backend in ("global", "spmd", "gpu") else None, keep))
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


def writable_file(name: Path | str, option: str) -> Path:
    """A file an option (--out, --junit, --svg, -o) will write, checked before
    anything runs: a file name, not a folder, in a folder that exists and may be written."""
    if str(name) in ("", "-"):
        raise InputError(f"{option} {str(name)!r}: give the name of a file to write")
    path = Path(name)
    if path.is_dir():
        raise InputError(f"{option} {path} is a folder, not a file to write")
    parent = path.parent
    if not parent.is_dir():
        raise InputError(f"{option} {path}: the folder {parent} does not exist")
    if not os.access(path if path.exists() else parent, os.W_OK):
        raise InputError(f"{option} {path}: {'the file' if path.exists() else f'the folder {parent}'} is not writable")
    return path


def read_inputs(path: str) -> dict[str, np.ndarray]:
    return read_npz(Path(path))


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive, refused up front (InputError) when it is not a
    regular file holding a zip of plain .npy members, or when a member's header claims
    more elements, or the archive more bytes, than refir's limits allow. Nothing is
    unpickled; nothing is inflated before its header was checked."""
    if not path.is_file():
        why = "No such file or directory" if not path.exists() else "not a regular file"
        raise InputError(f"cannot read inputs from {path}: {why}")
    if not zipfile.is_zipfile(path):
        hint = " (a single .npy array? save inputs with np.savez(path, name=array))" if path.suffix == ".npy" else ""
        raise InputError(f"cannot read inputs from {path}: not an .npz archive{hint}")
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            INPUT_BYTES.check(sum(m.file_size for m in members), f"{path}: its members uncompress to")
            out = {}
            for m in members:
                out[m.filename.removesuffix(".npy")] = _read_member(archive, m, path)
            return out
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError) as exc:
        raise InputError(f"cannot read inputs from {path}: {type(exc).__name__}: {exc}") from exc


def _read_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo, path: Path) -> np.ndarray:
    where = f"{path}: member {member.filename!r}"
    if not member.filename.endswith(".npy"):
        raise InputError(f"{where} is not an .npy array")
    with archive.open(member) as f:
        version = np.lib.format.read_magic(f)
        if version not in ((1, 0), (2, 0)):
            raise InputError(f"{where}: unsupported .npy format version {version}")
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(f)  # the header alone: nothing is inflated yet
        if dtype.hasobject:
            raise InputError(f"{where} holds Python objects; refir reads only plain numeric arrays")
        check_shape(shape, where)
        if member.file_size < prod(shape) * dtype.itemsize:
            raise InputError(f"{where} is shorter than its header's shape {shape} needs")
        data = f.read(prod(shape) * dtype.itemsize)
        if len(data) != prod(shape) * dtype.itemsize:
            raise InputError(f"{where} is shorter than its header's shape {shape} needs")
    flat = np.frombuffer(data, dtype).copy()
    return flat.reshape(shape, order="F" if fortran else "C")


def source_text(program: Program) -> str:
    try:
        return Path(program.file).read_text(errors="replace") if Path(program.file).is_file() else ""
    except OSError:
        return ""


def as_bf16(checked: Checked, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """numpy has no bfloat16: np.savez stores one as raw 2-byte records (|V2), so
    a bf16 parameter takes such an array back as bf16, bit for bit (`refir run
    --inputs`, and conform's check that such a replay shows a failure)."""
    for p in checked.func.params:
        x = inputs.get(p.name)
        if p.type.dtype == "bf16" and x is not None and x.dtype.kind == "V" and x.dtype.itemsize == 2:
            inputs[p.name] = x.view(p.type.np_dtype)
    return inputs
