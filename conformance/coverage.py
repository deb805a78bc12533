"""`conform --coverage`: what the default run exercises, measured from the
lowered programs it runs (never from a list kept by hand).

Eight tables, each cell reached (✓), allowed by the spec but not reached (✗),
or not allowed (blank):

- local ops x operand dtype (a cast's row is its target dtype); whether the
  spec allows a cell is asked of the verifier, with a two-line probe program;
- communications x mesh shape and mesh axis, with "p" where the mesh's device
  ids are out of order (team position differs from mesh position);
- communications x dtype (communications move bytes: every width matters);
- every op x result layout (rank >= 2) and mesh rank;
- nests (spec §3.2): each step that adds or drops a mesh axis of an axis
  sharded over several (allgather, all_to_all, reduce_scatter, keep_block) x
  2-D and 3-D meshes, uneven blocks and device ids out of order;
- partial values (spec §3.3): each kind as an input, read by a local op, reduced to
  replicated or sharded, made from replicated, returned;
- reshardings: every `set` that moves a value, counted by (from form, to form) of
  replicated, sharded, nested, partial and interleaved, on a 1-, 2- or 3-D mesh or
  to another mesh, from each partial kind to each form, and from or to an
  interleaved axis by how it cuts (conformance/coverage_forms.py);
- data classes: for each op with known error classes (conformance/classes.py),
  the dtypes on which some case's values exposed each class, that is, where a
  backend with that class's wrong implementation fails the run. A local cell
  the run reaches only with values that expose none of some class is marked
  "·", not "✓": reaching an op is not testing it.

Every allowed cell not reached is listed with the reason the run missed it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache

from rich import box
from rich.table import Table

from conformance import coverage_forms, reshape_coverage
from conformance.cases import Case
from conformance.classes import CLASSES, classes_of, exposed
from conformance.generate import DTYPES_DRAWN, MESH_SHAPES
from conformance.report import plain
from refir.checks.verifier import verify
from refir.errors import RefirError
from refir.ir import ops
from refir.ir.program import Var
from refir.ir.types import DIDS, DTYPES, PARTIAL_KINDS, Mesh, TensorType, axis_length, parts_of
from refir.lowering.lower import Step, lower
from refir.text.parser import parse

DTYPE_NAMES = tuple(DTYPES)
AXIS_COMMS = (ops.Allgather, ops.AllToAll, ops.Allreduce, ops.ReduceScatter)
ROOTED_COMMS = (ops.Gather, ops.Reduce, ops.Scatter, ops.Broadcast, ops.SendRecv)
ONE_D_SOURCE = (ops.Gather, ops.Reduce, ops.SendRecv)  # lowered only from a 1-D mesh (spec §7)
MESH_COLUMNS = tuple((n, d) for n in (1, 2, 3) for d in DIDS[:n])  # (mesh rank, mesh axis)
LAYOUT_COLUMNS = ("row-major", "other layout", "1-D mesh", "2-D mesh", "3-D mesh")
NEST_ROWS = ("allgather", "all_to_all", "reduce_scatter", "keep_block")  # the steps that add or drop a nest's axis
NEST_COLUMNS = ("2-D mesh", "3-D mesh", "uneven", "ids out of order")
INTERLEAVE_ROWS = ("allgather", "keep_block")  # the steps that drop or cut an interleaved axis's mesh axis (§3.4)
INTERLEAVE_COLUMNS = ("1-D mesh", "in a nest", "uneven", "symbolic")
PARTIAL_COLUMNS = ("input", "local op", "-> replicated", "-> sharded", "<- replicated", "result")


def _local_rows() -> list[str]:
    rows = [*ops.UNARY, *ops.BINARY, *ops.COMPARISONS, "where", "iota", *ops.REDUCTIONS, "matmul", "permute",
            "unsqueeze", "expand", "reshape", "slice", "select", "pad", "cat"]
    return rows + [f"cast to {d}" for d in DTYPE_NAMES] + ["copy", "keep_block"]


def local_label(op: object) -> str:
    return f"cast to {op.dtype}" if isinstance(op, ops.Cast) else ops.op_name(op)


_PROBES = {
    **{u: "{u}(x)" for u in ops.UNARY}, **{b: "{b}(x, x)" for b in ops.BINARY},
    **{r: "{r}(x, dims=[0])" for r in ops.REDUCTIONS}, "matmul": "matmul(x, x)",
    "permute": "permute(x, [1, 0])", "unsqueeze": "unsqueeze(x, dims=[0])",
    "slice": "slice(x, starts=[1], stops=[2])", "select": "select(x, axis=0, index=1)",
    "pad": "pad(x, low=[1, 0], high=[0, 0])", "cat": "cat(x, x, axis=0)",
    "expand": "expand(x, 2, 2)",
    **{c: "{b}(x, x)" for c in ops.COMPARISONS}, "where": "where(k, x, x)", "iota": "iota(axis=0)",
    "reshape": "reshape(x, [4])",
}


@cache
def allowed_local(row: str, dtype: str) -> bool:
    """Whether the verifier accepts the op on an operand of `dtype`."""
    if row in ("copy", "keep_block"):
        return True
    call = f"cast(x, dtype={row.split()[-1]})" if row.startswith("cast to") else _PROBES[row]
    call = call.format(u=row, b=row, r=row)
    declared = f": {dtype}[2, 2]" if row == "iota" else ""  # where's row is its values' dtype
    text = f"mesh m = [0]\nfunc main(x: {dtype}[2, 2], k: bool[2, 2]) {{\n  y{declared} = {call}\n  return y\n}}\n"
    try:
        verify(parse(text))
    except RefirError:
        return False
    return True


def allowed_mesh(op: type, column: tuple[int, str] | int) -> bool:
    if op in AXIS_COMMS:
        return isinstance(column, tuple)
    return isinstance(column, int) and (column == 1 or op not in ONE_D_SOURCE)


def _permuted(mesh: Mesh) -> bool:
    return list(mesh.devices) != sorted(mesh.devices)


@dataclass
class Coverage:
    local: set[tuple[str, str]] = field(default_factory=set)  # (row, operand dtype)
    mesh: dict[tuple[type, object], bool] = field(default_factory=dict)  # (comm, column) -> ids out of order
    comm_dtype: set[tuple[type, str]] = field(default_factory=set)
    layout: set[tuple[str, str]] = field(default_factory=set)  # (op, column)
    classes: set[tuple[str, str, str]] = field(default_factory=set)  # (row, operand dtype, class) exposed
    nests: set[tuple[str, str]] = field(default_factory=set)  # (NEST_ROWS, NEST_COLUMNS)
    interleaved: set[tuple[str, str]] = field(default_factory=set)  # (INTERLEAVE_ROWS, INTERLEAVE_COLUMNS)
    partial: set[tuple[str, str]] = field(default_factory=set)  # (kind, column) of a program's partial values
    pairs: Counter = field(default_factory=Counter)  # (from form, to form, mesh column) -> sets
    kinds: Counter = field(default_factory=Counter)  # (partial kind, to form) -> sets
    reshapes: set[tuple[str, str]] = field(default_factory=set)  # reshape_coverage's (row, column)
    programs: int = 0

    def add_partials(self, case: Case, steps: Iterable[Step], types: dict[str, TensorType]) -> None:
        """Where the program's own partial values (its types, not lowering's) are met."""
        declared = case.checked.types
        func = case.checked.func
        self.partial |= {(p.type.partial_kind, "input") for p in func.params if p.type.partial}
        self.partial |= {(declared[r].partial_kind, "result") for r in func.results if declared[r].partial}
        for step in steps:
            read = [declared[a] for a in step.tensor_args() if a in declared and declared[a].partial]
            source = step.eqn.args[0] if isinstance(step.eqn.op, ops.Set) and step.eqn.args else None
            if step.is_communication and isinstance(source, Var) and declared[source.name].partial:
                read = [declared[source.name]]  # the set's own operand (an avg's is divided first)
            if isinstance(step.op, ops.Partition):
                self.partial.add((step.op.kind, "<- replicated"))
            elif read and isinstance(step.op, (ops.Allreduce, ops.Reduce)):
                self.partial.add((read[0].partial_kind, "-> replicated"))
            elif read and isinstance(step.op, ops.ReduceScatter):
                self.partial.add((read[0].partial_kind, "-> sharded"))
            elif read and not step.is_communication and not isinstance(step.op, (ops.Copy, ops.KeepBlock)):
                self.partial.add((read[0].partial_kind, "local op"))

    def add(self, step: Step, types: dict[str, TensorType]) -> None:
        args = [types[a] for a in step.tensor_args()]
        src = args[1] if isinstance(step.op, ops.Where) and len(args) > 1 else args[0] if args else step.type
        label = ops.op_name(step.op) if step.is_communication else local_label(step.op)
        if step.is_communication:
            kind = type(step.op)
            axes = step.op.mesh_axes if isinstance(step.op, ops.Allreduce) else (
                (step.op.mesh_axis,) if kind in AXIS_COMMS else ())
            columns = [(src.mesh.ndim, k) for k in axes] or [src.mesh.ndim]
            for c in columns:
                self.mesh[(kind, c)] = self.mesh.get((kind, c), False) or _permuted(src.mesh)
            self.comm_dtype.add((kind, src.dtype))
        else:
            self.local.add((label, src.dtype))
        if step.type.rank >= 2:
            self.layout.add((label, "row-major" if step.type.order == tuple(range(step.type.rank))
                             else "other layout"))
        self.layout.add((label, f"{step.type.mesh.ndim}-D mesh"))
        nested = [a for t in (src, step.type) for a in t.axes if a.nested]
        if nested and label in NEST_ROWS:
            uneven = any(not isinstance(a.extent, int) or a.extent % parts_of(step.type.mesh, a) for a in nested)
            self.nests |= {(label, c) for c, on in ((f"{step.type.mesh.ndim}-D mesh", True), ("uneven", uneven),
                                                    ("ids out of order", _permuted(step.type.mesh))) if on}
        strided = [a for a in (src if label == "allgather" else step.type).axes if a.split]
        if strided and label in INTERLEAVE_ROWS:
            mesh = step.type.mesh if label == "keep_block" else src.mesh
            self.interleaved |= {(label, c) for c, on in (
                ("1-D mesh", mesh.ndim == 1), ("in a nest", any(a.nested for a in strided)),
                ("uneven", any(isinstance(a.extent, int) and len({axis_length(mesh, a, a.extent, d)
                                                                   for d in mesh.devices}) > 1 for a in strided)),
                ("symbolic", any(isinstance(a.extent, str) for a in strided))) if on}

    def measure(self, cases: Iterable[Case]) -> Coverage:
        seen: set[int] = set()
        for case in cases:
            self.classes |= exposed(case)  # every case: its data, not only its program, decides
            if id(case.program) in seen:
                continue  # one program, several bindings or data kinds: the same lowered steps
            seen.add(id(case.program))
            self.programs += 1
            lowered = lower(case.checked)
            for step in lowered.steps:
                self.add(step, lowered.types)
            self.add_partials(case, lowered.steps, lowered.types)
            self.pairs += coverage_forms.pairs_of(case)
            self.kinds += coverage_forms.kinds_of(case)
            self.reshapes |= reshape_coverage.cells_of(case)
        return self


def _mark(reached: bool, allowed: bool, text: str = "✓") -> str:
    return "" if not allowed else text if reached else "✗"


def missing_classes(cov: Coverage, row: str, dtype: str) -> list[str]:
    """The error classes of an op on a dtype that no case's data exposed."""
    return [c.name for c in classes_of(row, dtype) if (row, dtype, c.name) not in cov.classes]


def _local_mark(cov: Coverage, row: str, dtype: str) -> str:
    text = "·" if missing_classes(cov, row, dtype) else "✓"
    return _mark((row, dtype) in cov.local, allowed_local(row, dtype), text)


def class_table(cov: Coverage) -> Table:
    """Per op and error class: the dtypes whose data exposed it, and those it did not."""
    t = Table(title="data classes: where some case's values expose an op's known wrong implementation",
              box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left")
    for name in ("op", "class", "exposed on", "not on", "the wrong implementation"):
        t.add_column(name)
    for row in _local_rows():
        for c in CLASSES:
            dtypes = [d for d in DTYPE_NAMES if allowed_local(row, d) and c.applies(row, d)]
            if dtypes:
                on = [d for d in dtypes if (row, d, c.name) in cov.classes]
                t.add_row(row, c.name, " ".join(on) or "-", " ".join(d for d in dtypes if d not in on) or "-",
                          c.wrong)
    return t


def _table(title: str, columns: Iterable[str]) -> Table:
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left")
    t.add_column("")
    for c in columns:
        t.add_column(c, justify="center")
    return t


def _column_name(c: tuple[int, str] | int) -> str:
    return f"{c[0]}-D {c[1]}" if isinstance(c, tuple) else f"{c}-D root"


COMM_COLUMNS: tuple[tuple[int, str] | int, ...] = (*MESH_COLUMNS, 1, 2, 3)
COMM_ROWS = (*AXIS_COMMS, *ROOTED_COMMS)


def _why(cov: Coverage, cases: int, seed: int, dtype: str = "", mesh_rank: int = 0) -> str:
    """Why the run misses a cell: the generator cannot draw it, or did not."""
    corpus = "no corpus or example program has it"
    if dtype and dtype not in DTYPES_DRAWN:
        return f"the generator never draws {dtype}; {corpus}"
    if mesh_rank > max(len(s) for s in MESH_SHAPES):
        return f"the generator draws no {mesh_rank}-D mesh; {corpus}"
    return f"{cases} generated programs (seed {seed}) did not draw it; {corpus}"


def not_reached(cov: Coverage, cases: int, seed: int) -> list[str]:
    """Every allowed cell no lowered program of the run reaches, with why."""
    out = []
    for row in _local_rows():
        for d in DTYPE_NAMES:
            if allowed_local(row, d) and (row, d) not in cov.local:
                out.append(f"{row} on {d}: {_why(cov, cases, seed, dtype=d)}")
            elif allowed_local(row, d) and missing_classes(cov, row, d):
                out.append(f"{row} on {d}: reached, but no case's data exposed "
                           f"{', '.join(missing_classes(cov, row, d))}")
    for kind in COMM_ROWS:
        name = _comm_name(kind)
        for c in COMM_COLUMNS:
            n = c[0] if isinstance(c, tuple) else c
            if allowed_mesh(kind, c) and (kind, c) not in cov.mesh:
                out.append(f"{name} on {_column_name(c)}: {_why(cov, cases, seed, mesh_rank=n)}")
            elif allowed_mesh(kind, c) and n > 1 and not cov.mesh[(kind, c)]:
                out.append(f"{name} on {_column_name(c)} with device ids out of order: "
                           f"{_why(cov, cases, seed, mesh_rank=n)}")
        for d in DTYPE_NAMES:
            if (kind, d) not in cov.comm_dtype:
                out.append(f"{name} of {d}: {_why(cov, cases, seed, dtype=d)}")
    for kind in PARTIAL_KINDS:
        for c in PARTIAL_COLUMNS:
            if _partial_allowed(kind, c) and (kind, c) not in cov.partial:
                out.append(f"a {kind}-partial, {c}: {_why(cov, cases, seed)}")
    for row in [*_local_rows(), *(_comm_name(k) for k in COMM_ROWS)]:
        for c in LAYOUT_COLUMNS:
            if (row, c) not in cov.layout and _layout_allowed(row, c):
                dtype = row.split()[-1] if row.startswith("cast to") else ""
                rank = int(c[0]) if c[0].isdigit() else 0
                out.append(f"{row} with {c}: {_why(cov, cases, seed, dtype=dtype, mesh_rank=rank)}")
    for row in NEST_ROWS:
        for c in NEST_COLUMNS:
            if (row, c) not in cov.nests:
                out.append(f"{row} of a nest on {c}: {_why(cov, cases, seed)}")
    for row in INTERLEAVE_ROWS:
        for c in INTERLEAVE_COLUMNS:
            if (row, c) not in cov.interleaved:
                out.append(f"{row} of an interleaved axis, {c}: {_why(cov, cases, seed)}")
    return (out + coverage_forms.missing(cov.pairs, cov.kinds, _why(cov, cases, seed))
            + reshape_coverage.missing(cov.reshapes, _why(cov, cases, seed)))


def _partial_allowed(kind: str, column: str) -> bool:
    return (kind, column) != ("avg", "<- replicated")  # partial_c5: no exact avg terms of a replicated value


def _layout_allowed(row: str, column: str) -> bool:
    if row.startswith("cast to") or row in _PROBES:
        return any(allowed_local(row, d) for d in DTYPE_NAMES)
    return True


def _comm_name(kind: type) -> str:
    return {ops.AllToAll: "all_to_all", ops.SendRecv: "send_recv",
            ops.ReduceScatter: "reduce_scatter"}.get(kind, kind.__name__.lower())


def render(cov: Coverage, cases: int, seed: int) -> str:
    local = _table("local ops x operand dtype (·: reached, but some error class of the op never exposed)",
                   DTYPE_NAMES)
    for row in _local_rows():
        local.add_row(row, *(_local_mark(cov, row, d) for d in DTYPE_NAMES))
    mesh = _table("communications x mesh axis (p: device ids out of order)", map(_column_name, COMM_COLUMNS))
    for kind in COMM_ROWS:
        mesh.add_row(_comm_name(kind), *(_mark((kind, c) in cov.mesh, allowed_mesh(kind, c),
                                               "✓p" if cov.mesh.get((kind, c)) else "✓") for c in COMM_COLUMNS))
    dtypes = _table("communications x dtype", DTYPE_NAMES)
    for kind in COMM_ROWS:
        dtypes.add_row(_comm_name(kind), *(_mark((kind, d) in cov.comm_dtype, True) for d in DTYPE_NAMES))
    layout = _table("ops x result layout (rank >= 2) and mesh rank", LAYOUT_COLUMNS)
    for row in [*_local_rows(), *(_comm_name(k) for k in COMM_ROWS)]:
        layout.add_row(row, *(_mark((row, c) in cov.layout, _layout_allowed(row, c)) for c in LAYOUT_COLUMNS))
    nests = _table("nests x mesh (an axis over several mesh axes: the steps that add or drop one of them)",
                   NEST_COLUMNS)
    for row in NEST_ROWS:
        nests.add_row(row, *(_mark((row, c) in cov.nests, True) for c in NEST_COLUMNS))
    interleaved = _table("interleaved axes (spec §3.4): the steps that drop or cut a mesh axis with a split factor",
                         INTERLEAVE_COLUMNS)
    for row in INTERLEAVE_ROWS:
        interleaved.add_row(row, *(_mark((row, c) in cov.interleaved, True) for c in INTERLEAVE_COLUMNS))
    partial = _table("partial values (spec §3.3): kind x where the run meets one", PARTIAL_COLUMNS)
    for kind in PARTIAL_KINDS:
        partial.add_row(kind, *(_mark((kind, c) in cov.partial, _partial_allowed(kind, c)) for c in PARTIAL_COLUMNS))
    missing = not_reached(cov, cases, seed)
    forms = coverage_forms.tables(cov.pairs, cov.kinds, _table)
    shapes = reshape_coverage.table(cov.reshapes, _table)
    parts = [plain(t) for t in (local, mesh, dtypes, layout, nests, interleaved, partial, *forms, shapes,
                                class_table(cov))]
    head = f"refir conform --coverage: {cov.programs} lowered programs of the default run"
    tail = (f"{len(missing)} allowed cells not reached:\n" + "\n".join(f"  {m}" for m in missing)
            if missing else "every cell the spec allows is reached")
    return "\n\n".join([head, *parts, tail])

