"""The memory a run holds, summed over every device, worked out from the
lowered program's types and the bindings before anything is allocated
(docs/spec.md §12.3, memory_c1).

Each value's local blocks are counted on every device of its mesh (a
replicated value once per device, uneven blocks at their exact extents), as
per-device byte vectors. The walk follows interp.spmd.execute's liveness plan
(interp/liveness.py): a value counts from the step that makes it to the step
after its last reader. Each device's peak is taken over the run, and the
peaks are summed (ranks of an MPI job peak at different moments). A step also
counts its scratch (copies into the result's layout or dtype, float64
accumulators; a communication's pack and receive buffers), and a
communication of a size MPI's transport keeps windows and buffers for counts
those from its step to the run's end. The global reference holds every value
whole to the end. Scratch is per backend (spmd's numpy float64 copies, the
gpu's fresh result buffers and partials); a run of one backend is bounded by
what that backend holds, a run of every backend (conform, or a backend of a
user's) by the largest.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import prod

import numpy as np

from interp.liveness import drops
from refir.checks.limits import MEMORY_C1, RUN_BYTES
from refir.checks.verifier import Checked
from refir.errors import InputError
from refir.ir import ops
from refir.ir.program import Var
from refir.ir.types import Bindings, Mesh, TensorType, entries_of, global_shape, local_shape
from refir.lowering.lower import Lowered, Step
from refir.text.printer import format_eqn

Vec = np.ndarray  # int64, one entry per device id

HUGE = 1 << 62  # past this a total is over any limit (and int64 sums could wrap)


@dataclass(frozen=True)
class RunKind:
    """What a run holds depends on: its backend (None: every backend, or one
    not refir's), keep="all" and everywhere=True."""

    backend: str | None = None
    keep: bool = False
    everywhere: bool = False


EVERY = RunKind()


@dataclass(frozen=True)
class Part:
    """One contributor to the peak: a value (or a step's scratch) and its bytes over all devices."""

    what: str
    nbytes: int
    value: bool = True  # a value's blocks, not scratch or the transport's


@dataclass(frozen=True)
class Footprint:
    total: int  # the bound: devices (spmd, gpu), whole (global), the larger (every backend)
    devices: int  # the sum over devices of each device's peak
    whole: int  # the global reference: every value whole, held to the end
    when: str  # the moment the devices together hold the most
    parts: tuple[Part, ...]  # what is held then, largest first
    values: dict[str, int]  # each value's bytes summed over the devices of its mesh (exact)
    scratch: dict[str, int]  # each lowered step's scratch (a communication's buffers), summed over devices
    kept: int  # what the transport keeps past its steps, by the run's end


def nbytes_text(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} B"


@lru_cache(maxsize=256)
def _coords(mesh: Mesh) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """The mesh's device ids and, per mesh axis, each device's coordinate."""
    index = np.arange(len(mesh.devices))
    return np.array(mesh.devices, np.int64), tuple(np.unravel_index(index, mesh.shape))


def _block_length(length: np.ndarray, parts: int, k: np.ndarray) -> np.ndarray:
    """blocks.block's length, on every device at once."""
    size = -(-length // parts)
    start = np.minimum(k * size, length)
    return np.minimum(start + size, length) - start


def elements(t: TensorType, bindings: Bindings, width: int) -> Vec:
    """Each device's block of `t`, in elements (0 off its mesh): §3.1's blocks exactly."""
    ids, coords = _coords(t.mesh)
    count = np.ones(len(ids), np.int64)
    for a, n in zip(t.axes, global_shape(t, bindings)):
        if a.shard:  # blocks.nested_block, on every device at once: each mesh axis of the nest cuts the last cut
            length = np.full(len(ids), n, np.int64)
            for did, sf in entries_of(a):
                k = t.mesh.axis_of(did)
                # an interleaved cut (§3.4): the device's block of each of sf pieces (sf 1: one block)
                kept = np.zeros(len(ids), np.int64)
                for j in range(sf):
                    piece = _block_length(length, sf, np.full(len(ids), j, np.int64))
                    kept += _block_length(piece, t.mesh.shape[k], coords[k])
                length = kept
            count *= length
        else:
            count *= n
    out = np.zeros(width, np.int64)
    out[ids] = count
    return out


def replication(t: TensorType) -> int:
    """How many devices hold each block of `t`."""
    return len(t.mesh.devices) // prod(t.mesh.size(d) for a in t.axes for d in a.dids)


def describe(name: str, t: TensorType, bindings: Bindings, nbytes: int, made: Step | None = None) -> str:
    """`y = set(x) (f.rir:4:3): f32[64] on m (replicated over 64 devices: 64 x 256 B) = 16 KiB`."""
    n, copies = len(t.mesh.devices), replication(t)
    block = prod(local_shape(t, bindings)) * t.np_dtype.itemsize
    if copies == n:
        how = f"replicated over {n} devices: {n} x {nbytes_text(block)}"
    elif copies > 1:
        how = f"blocks of up to {nbytes_text(block)} on {n} devices, each in {copies} copies"
    else:
        how = f"blocks of up to {nbytes_text(block)} on {n} devices"
    if made is None:
        head = f"input {name}: {t}"
    else:
        head = _at(made) if made.out == name and made.eqn.out == name else f"{name}: {t}, lowered from {_at(made)}"
    return f"{head} ({how}) = {nbytes_text(nbytes)}"


class _Walk:
    """The per-device vectors of every value, and the peak as the run goes."""

    def __init__(self, lowered: Lowered, bindings: Bindings, mpi: bool, gpu: bool = False) -> None:
        self.lowered, self.bindings, self.mpi, self.gpu = lowered, bindings, mpi, gpu
        meshes = [t.mesh for t in lowered.types.values()]
        self.width = 1 + max(max(m.devices) for m in meshes)
        self.bytes: dict[str, Vec] = {}
        for name, t in lowered.types.items():
            first = prod(local_shape(t, bindings)) * t.np_dtype.itemsize
            if first * len(t.mesh.devices) >= HUGE:
                raise OverflowError(name)
            self.bytes[name] = elements(t, bindings, self.width) * t.np_dtype.itemsize
        if 64 * sum(int(v.sum()) for v in self.bytes.values()) >= HUGE:  # sums with scratch stay within int64
            raise OverflowError(max(self.bytes, key=lambda n: int(self.bytes[n].sum())))
        self.peak = np.zeros(self.width, np.int64)
        self.kept = np.zeros(self.width, np.int64)  # the transport's, from a step to the end
        self.most = -1
        self.scratched: dict[str, int] = {}
        self.when = ""
        self.parts: tuple[tuple[str, int], ...] = ()

    def elems(self, name: str) -> Vec:
        return self.bytes[name] // self.lowered.types[name].np_dtype.itemsize

    def moment(self, when: str, live: set[str], extra: list[tuple[str, Vec]]) -> None:
        held = [(n, self.bytes[n]) for n in sorted(live)] + extra
        if self.kept.any():
            held.append(("the transport's kept windows and buffers", self.kept.copy()))
        now = np.zeros(self.width, np.int64)
        for _, v in held:
            now += v
        np.maximum(self.peak, now, out=self.peak)
        total = int(now.sum())
        if total > self.most:
            self.most, self.when = total, when
            self.parts = tuple((n, int(v.sum())) for n, v in held)

    def scratch(self, step: Step) -> Vec:
        """What a step holds besides its operands and result, on each device."""
        b = self.bytes
        args = step.tensor_args()
        if step.is_communication:
            (src,) = args
            return b[src] + self._received(step, src)
        ins = sum((self.elems(a) for a in args), np.zeros(self.width, np.int64))
        if self.gpu:
            cublas = len(step.type.axes) == 2 and tuple(step.type.order) == (0, 1)
            return gpu_scratch(step.op, ins, sum((b[a] for a in args), np.zeros(self.width, np.int64)), b[step.out],
                               cublas)
        narrow = any(self.lowered.types[n].dtype in NARROW for n in (*args, step.out))
        return local_scratch(step.op, ins, self.elems(step.out), b[step.out], narrow)

    def _received(self, step: Step, src: str) -> Vec:
        """Receive buffers: every partial of a reduction's team (folded in team
        order), else the result's block (a gathered whole, before it is laid out)."""
        t, b = self.lowered.types[src], self.bytes
        match step.op:
            case ops.Allreduce(mesh_axes=ks):
                return prod(t.mesh.size(k) for k in ks) * b[src]
            case ops.ReduceScatter(mesh_axis=k):
                return t.mesh.size(k) * b[src]
            case ops.Reduce():
                out = np.zeros(self.width, np.int64)
                out[list(step.type.mesh.devices)] = len(t.mesh.devices) * int(b[src].max())
                return out
        return b[step.out].copy()

    def keep(self, step: Step) -> None:
        """What MPI's transport keeps past a communication of these sizes, from
        its step to the run's end (it may outlive the run, for the next one):
        a shared-memory window of two halves of a power of two of at least the
        largest contribution (interp/mpi/shared_windows.py), result slots of two powers
        of two of at least the result, a kept pack buffer and a kept result
        (interp/mpi/pools.py's scratch and result pool)."""
        (src,) = step.tensor_args()
        s, d = self.bytes[src], self.bytes[step.out]
        ranks = np.zeros(self.width, bool)
        ranks[list(self.lowered.types[src].mesh.devices)] = True
        ranks[list(step.type.mesh.devices)] = True
        largest = int(s.max())
        window = 4 * largest if 1 << 14 <= largest <= 1 << 26 else 0
        self.kept += np.where(ranks, window, 0)
        self.kept += np.where((d >= 1 << 16) & (d <= 1 << 26), 4 * d, 0)  # result slots
        self.kept += np.where((s >= 1 << 16) & (s <= 1 << 26), s, 0)  # the kept pack buffer
        self.kept += np.where((d >= 1 << 16) & (d <= 1 << 28), d, 0)  # the kept result


NARROW = ("f16", "bf16")  # computed in float32


def local_scratch(op: object, ins: Vec | int, out: Vec | int, out_bytes: Vec | int, narrow: bool) -> Vec | int:
    """What a local op holds besides its operands and result (interp/impls.py),
    from its operands' and result's elements: a cast to an integer its float64
    copies and masks; a matmul its operands and product in float64; any other
    op a copy into the result's layout or dtype, a reduction its float64
    accumulator and (on the gpu) a float64 partial per chunk of its operand,
    f16 and bf16 their float32 copies."""
    if isinstance(op, ops.Cast):
        return 40 * ins
    if isinstance(op, ops.Matmul):
        return 8 * (ins + out) + out_bytes
    more = out_bytes + (8 * (ins + out) if isinstance(op, ops.Reduction) else 0)
    return more + 4 * (ins + out) if narrow else more


def gpu_scratch(op: object, ins: Vec, in_bytes: Vec, out_bytes: Vec, cublas: bool) -> Vec:
    """What a local op holds on the gpu backend besides its operands and result
    (gpu_backend/impls.py): its kernels write the result's own buffer, casts
    and narrow floats convert in registers. A reduction holds its float64 or
    int64 partials, at most one per 16 operand elements (gpu_backend/reduce.py's
    chunks), and a counter; a matmul that cuBLAS cannot take as it is (`cublas`:
    a 2-D row-major result) cupy's copies of its operands and result."""
    if isinstance(op, ops.Reduction):
        return 8 * (ins // 16) + 16
    if isinstance(op, ops.Matmul) and not cublas:
        return in_bytes + out_bytes
    return np.zeros_like(out_bytes)


def _at(step: Step) -> str:
    return f"{format_eqn(step.eqn)} ({step.eqn.loc})" if step.eqn.loc.line else format_eqn(step.eqn)


def device_walk(lowered: Lowered, bindings: Bindings, mpi: bool, kind: RunKind = EVERY) -> _Walk:
    """Every moment of interp.spmd.execute, as interp.liveness plans it. On the
    gpu the inputs' host blocks stay while their uploads are used; with keep,
    no value is let go (spmd keeps the very buffers; the gpu a host copy of
    each, next to its device buffers)."""
    gpu, keep = kind.backend == "gpu", kind.keep
    w, plan = _Walk(lowered, bindings, mpi, gpu), drops(lowered)
    zero = np.zeros(w.width, np.int64)
    env = {p.name for p in lowered.checked.func.params}
    hosted = sum((w.bytes[n] for n in env), zero.copy()) if gpu else zero
    copies = hosted.copy() if gpu and keep else zero.copy()  # keep's host copies so far (the inputs' first)
    held = [("the inputs' host blocks", hosted)] if gpu else []
    w.moment("the inputs' blocks", env, held + ([("kept host copies", copies.copy())] if copies.any() else []))
    for s, seg in enumerate(lowered.segments):
        env -= set() if keep else set(plan.taken[s])
        scope = set(seg.inputs) - (set() if keep else set(plan.before[s]))
        for step, dropped in zip(seg.steps, plan.after_step[s]):
            scope.add(step.out)
            scratch = w.scratch(step)
            w.scratched[step.out] = int(scratch.sum())
            if step.is_communication and w.mpi:  # made during the step, kept past it
                w.keep(step)
            if gpu and keep:
                copies += w.bytes[step.out]
            more = [("kept host copies", copies.copy())] if copies.any() else []
            w.moment(_at(step), env | scope, [(f"{step.out}'s scratch", scratch), *held, *more])
            scope -= set() if keep else set(dropped)
        env |= (scope | set(seg.outputs)) if keep else set(seg.outputs) - set(plan.unkept[s])
    if copies.any():
        held.append(("kept host copies", copies))
    if keep and mpi:  # share_kept: every rank's kept buffers on every rank, pickled and unpickled, and its own copied
        every = int(sum(w.bytes[n].sum() for n in w.bytes))
        ranks = np.zeros(w.width, bool)
        for t in lowered.types.values():
            ranks[list(t.mesh.devices)] = True
        held.append(("every rank's kept buffers, shared", np.where(ranks, 2 * every, 0) + 2 * sum(w.bytes.values())))
    # The results' host copies (or, under MPI, the blocks rank 0 receives) and
    # the whole outputs assembled on rank 0.
    # With everywhere, under MPI: every device's result blocks and the whole results on every rank.
    gather = zero.copy()
    ranks = np.zeros(w.width, bool)
    for r in lowered.results:
        ranks[list(lowered.types[lowered.source(r)].mesh.devices)] = True
    shared = mpi and kind.everywhere
    for r in lowered.results:
        t = lowered.checked.types[r]
        blocks = w.bytes[lowered.source(r)]
        whole = prod(global_shape(t, bindings)) * t.np_dtype.itemsize
        gather += np.where(ranks, int(blocks.sum()), 0) if shared else blocks
        if shared:
            gather += np.where(ranks, whole, 0)
        else:
            gather[0] += whole
    w.moment("gathering the results", env, [("the results gathered", gather), *held])
    return w


def whole_bytes(checked: Checked, bindings: Bindings) -> int:
    """The global reference (interp.global_eval): every value whole, held to
    the end, the largest equation's scratch and the results' final copies."""
    size = {n: prod(global_shape(t, bindings)) for n, t in checked.types.items()}
    held = {n: size[n] * t.np_dtype.itemsize for n, t in checked.types.items()}
    scratch = 0
    for e in checked.func.eqns:
        ins = sum(size[a.name] for a in e.args if isinstance(a, Var))
        narrow = any(checked.types[n].dtype in NARROW for n in (*(a.name for a in e.args if isinstance(a, Var)), e.out))
        scratch = max(scratch, int(local_scratch(e.op, ins, size[e.out], held[e.out], narrow)))
    results = sum(held[r] for r in checked.func.results)
    return sum(held.values()) + scratch + results


def footprint(lowered: Lowered, bindings: Bindings, mpi: bool = False, kind: RunKind = EVERY) -> Footprint:
    """The run's bound; `mpi`: one rank per process, whose transport keeps
    buffers past its steps; `kind`: the backend and what the run keeps (EVERY:
    the largest over refir's backends, for conform or a backend not refir's)."""
    checked = lowered.checked
    whole = whole_bytes(checked, bindings)
    counted = kind.backend in (None, "global")  # the global reference runs
    try:
        if kind.backend is None:  # every backend: the larger walk (gpu's input host blocks can outweigh spmd's scratch)
            w = max((device_walk(lowered, bindings, mpi, RunKind(b, kind.keep, kind.everywhere))
                     for b in ("spmd", "gpu")), key=lambda w: int(w.peak.sum()))
        else:
            w = device_walk(lowered, bindings, mpi, kind)
    except OverflowError as exc:  # a value alone is past any limit
        t = lowered.types[str(exc)]
        n = prod(local_shape(t, bindings)) * t.np_dtype.itemsize * len(t.mesh.devices)
        return Footprint(max(n, whole), n, whole, "", (Part(describe(str(exc), t, bindings, n), n),), {}, {}, 0)
    devices = int(w.peak.sum())
    values = {n: int(v.sum()) for n, v in w.bytes.items()}
    made = {step.out: step for step in lowered.steps}
    parts = [Part(describe(name, lowered.types[name], bindings, n, made.get(name)), n)
             if name in lowered.types else Part(f"{name}: {nbytes_text(n)}", n, False) for name, n in w.parts]
    parts.sort(key=lambda p: (not p.value, -p.nbytes))
    if counted and whole > devices:
        parts.insert(0, Part(f"the global reference, every value whole: {nbytes_text(whole)}", whole, False))
    total = whole if kind.backend == "global" else max(devices, whole) if counted else devices
    return Footprint(total, devices, whole, w.when, tuple(parts), values, w.scratched,
                     int(w.kept.sum()))

def check_run_memory(lowered: Lowered, bindings: Bindings, mpi: bool = False, kind: RunKind = EVERY) -> Footprint:
    """The run's footprint, or an InputError naming the limit, the bytes and
    the biggest contributors when it is over RUN_BYTES (memory_c1). A pure
    function of the program and bindings: every MPI rank decides alike."""
    limit = RUN_BYTES.value
    got = footprint(lowered, bindings, mpi, kind)
    if got.total > limit:
        shown = [p for p in got.parts if p.value][:3]
        rest = sum(p.nbytes for p in got.parts if p not in shown and p.value)
        other = sum(p.nbytes for p in got.parts if not p.value)
        more = [f"{nbytes_text(rest)} of other values"] if rest else []
        more += [f"{nbytes_text(other)} of scratch, transport and gathering buffers"] if other else []
        when = f"at its fullest ({got.when}) the devices hold " if got.when else ""
        raise InputError(f"this run needs {nbytes_text(got.total)} ({got.total} bytes) summed over every device, "
                         f"over refir's limit of {nbytes_text(limit)} ({limit} bytes) [{MEMORY_C1}]; "
                         f"{when}{'; '.join([p.what for p in shown] + more)} "
                         f"(raise the limit with {RUN_BYTES.env}=N)")
    return got
