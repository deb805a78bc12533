"""The ops of transformer layers (issue 27) next to torch and the copy ceiling
(`python -m benchmarks.gpu_bench layer-ops`): comparisons, where, iota, slice,
select, pad, cat, reshapes that copy, expand, tanh erf sigmoid rsqrt sin cos;
and matmuls of operands of different ranks (a linear of a 3-D input, one GEMM
over its rows; a 2-D operand broadcast over a batch, a strided batched GEMM).

Each row calls refir's op as a run's step does (gpu_backend.impls.compute or the
per-device iota, its result allocated from the pool, laid out row-major) and
torch's same op (allocating its result, `.contiguous()` where torch makes a view),
on the same values in the same process, f32 unless the row says otherwise.
Bytes counted: what the op must read and write (both operands, the result; a
broadcast operand once), but a step along the innermost axis reads every
32-byte sector of its operand, so its whole operand counts. Every row checks its
values: refir's and torch's against interp's numpy (exact rows bit for bit, the
unary ops within 1e-5, the matmuls 1e-4) at sizes up to CHECK_ELEMS, and refir's against torch's
on the device at every size.

Under the simulator (`NUMBA_ENABLE_CUDASIM=1`, tests/test_benchmarks_layer_ops.py)
the same rows run at a tiny size, torch's on the CPU where torch is installed:
the times mean nothing there, the checks everything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.gpu_ops import _memory, sides
from benchmarks.gpu_timing import median_time, pipelined_time
from gpu_backend.buffers.buffer import DeviceBuffer, download, upload
from gpu_backend.device import SIMULATED, cuda
from gpu_backend.impls import PER_DEVICE, compute
from gpu_backend.kernels.elementwise import copy_into
from interp import impls as interp
from interp.masks import iota_block
from refir.ir import ops
from refir.ir.types import Axis, Mesh, TensorType

CHECK_ELEMS = 1 << 22  # at most this many elements a row: its values checked against numpy too
UNARY = ("tanh", "erf", "sigmoid", "rsqrt", "sin", "cos")
F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class Input:
    """An operand: a fresh row-major array of `shape` (uniform in [0, 1), or bools),
    seen with its axes permuted by `perm`, then sliced by `index` (a strided view)."""

    shape: tuple[int, ...]
    kind: str = "f32"  # or "bool"
    perm: tuple[int, ...] | None = None
    index: tuple[slice, ...] | None = None


@dataclass(frozen=True)
class Case:
    name: str
    nbytes: int  # bytes counted (the module's docstring)
    op: object
    args: tuple[object, ...]  # Inputs, and the scalars (values, extents) as the step passes them
    rank: int  # the result's (laid out row-major)
    peer: Callable[..., Any] | None  # (torch, *tensors) -> torch's result; None: no such op in torch
    exact: bool = True
    note: str = ""  # what torch's column runs, where it is not plainly the same op
    rtol: float = 1e-5  # where not exact: the relative tolerance of the check


def cases(n: int) -> list[Case]:
    """Every row for n elements (a power of two, at least 256) of f32 in its largest operand."""
    r, c = sides(n, 2)
    b, s, _ = sides(n, 3)
    h, d = (16, 128) if n >= 1 << 16 else (2, 4)
    x2, a2, bool2 = Input((r, c)), Input((r, c)), Input((r, c), "bool")
    lt, where = ops.Compare("lt"), ops.Where()
    rows = [
        Case("lt f32 -> bool", 9 * n, lt, (x2, a2), 2, lambda t, x, y: t.lt(x, y)),
        Case("lt f32 scalar -> bool", 5 * n, lt, (x2, 0.5), 2, lambda t, x: t.lt(x, 0.5)),
        Case("where bool, f32, f32", 13 * n, where, (bool2, x2, a2), 2, lambda t, k, x, y: t.where(k, x, y)),
        Case(f"where mask[{s},{s}], f32[{b},..], -inf", 8 * n + n // b, where,
             (Input((1, s, s), "bool"), Input((b, s, s)), float("-inf")), 3,
             lambda t, k, x: t.where(k, x, float("-inf"))),
        Case("iota axis 0 -> i32", 4 * n, ops.Iota(0), ((r, c),), 2,
             lambda t: t.arange(r, dtype=t.int32, device=_device(t)).unsqueeze(1).expand(r, c).contiguous(),
             note="torch: arange then expand().contiguous()"),
        Case("iota axis 1 -> i32", 4 * n, ops.Iota(1), ((r, c),), 2,
             lambda t: t.arange(c, dtype=t.int32, device=_device(t)).expand(r, c).contiguous(),
             note="torch: arange then expand().contiguous()"),
        Case("slice [:, 1:-1]", 8 * r * (c - 2), ops.Slice((1,), (1,), (c - 1,), (1,)), (x2,), 2,
             lambda t, x: x[:, 1:-1].contiguous(), note="torch: the view, then contiguous()"),
        Case("slice [::2, :]", 4 * n, ops.Slice((0,), (0,), (r,), (2,)), (x2,), 2,
             lambda t, x: x[::2].contiguous(), note="torch: the view, then contiguous()"),
        Case("slice [:, ::2] (reads all)", 6 * n, ops.Slice((1,), (0,), (c,), (2,)), (x2,), 2,
             lambda t, x: x[:, ::2].contiguous(), note="torch: the view, then contiguous()"),
        Case(f"select [:, 1, :] of [{r},4,{c // 4}]", 2 * n, ops.Select(1, 1), (Input((r, 4, c // 4)),), 2,
             lambda t, x: x[:, 1].contiguous(), note="torch: the view, then contiguous()"),
        Case("pad 1 on each side", 4 * n + 4 * (r + 2) * (c + 2), ops.Pad((1, 1), (1, 1), 0), (x2,), 2,
             lambda t, x: t.nn.functional.pad(x, (1, 1, 1, 1), value=0.0)),
        Case("cat axis 0 of two", 8 * n, ops.Cat(0), (Input((r // 2, c)), Input((r // 2, c))), 2,
             lambda t, x, y: t.cat([x, y], 0)),
        Case("cat axis 1 of two", 8 * n, ops.Cat(1), (Input((r, c // 2)), Input((r, c // 2))), 2,
             lambda t, x, y: t.cat([x, y], 1)),
        Case("reshape column-major -> 1-D", 8 * n, ops.Reshape((n,)), (Input((c, r), perm=(1, 0)),), 1,
             lambda t, x: x.reshape(-1)),
        Case(f"reshape heads [S,{h},{d}] -> [S,{h * d}]", 8 * n, ops.Reshape((n // (h * d), h * d)),
             (Input((h, n // (h * d), d), perm=(1, 0, 2)),), 2, lambda t, x: x.reshape(x.shape[0], -1),
             note="heads permuted out of [H,S,D]: no view"),
        Case("reshape [:, 1:-1] -> 1-D", 8 * r * (c - 2), ops.Reshape((r * (c - 2),)),
             (Input((r, c), index=(slice(None), slice(1, c - 1))),), 1, lambda t, x: x.reshape(-1)),
        Case(f"expand [{r},1] -> [{r},{c}]", 4 * n + 4 * r, ops.Expand(), (Input((r, 1)), r, c), 2,
             lambda t, x: x.expand(r, c).contiguous()),
        Case(f"expand [1,{c}] -> [{r},{c}]", 4 * n + 4 * c, ops.Expand(), (Input((1, c)), r, c), 2,
             lambda t, x: x.expand(r, c).contiguous()),
    ]
    k = s  # a linear of [b, s, k] by [k, k] (1 GiB: [1024, 512, 512] @ [512, 512]); fp32 sums of k products
    mm = ops.Matmul()
    rows += [
        Case(f"linear [{b},{s},{k}] @ [{k},{k}]", 8 * n + 4 * k * k, mm, (Input((b, s, k)), Input((k, k))), 3,
             lambda t, x, w: t.matmul(x, w), exact=False, rtol=1e-4,
             note="compute-bound: GB/s of its operands; the torch ratio is what counts (one GEMM over b*s rows)"),
        Case(f"matmul [{s},{k}] @ [{b},{k},{k}]", 8 * n + 4 * s * k, mm, (Input((s, k)), Input((b, k, k))), 3,
             lambda t, x, w: t.matmul(x, w), exact=False, rtol=1e-4,
             note="compute-bound: a strided batched GEMM, the 2-D operand at batch stride 0"),
    ]
    for name in UNARY:  # torch has each under the same name
        rows.append(Case(f"{name} f32", 8 * n, ops.Unary(name), (Input((n,)),), 1,
                         lambda t, x, fn=name: getattr(t, fn)(x), exact=False))
    return rows


def _device(torch: Any) -> str:
    """Where torch's tensors live: the GPU, or the CPU beside the simulator."""
    return "cpu" if SIMULATED else "cuda"


class Operands:
    """The cases' operands, made by torch (on the device; on the CPU beside the
    simulator) and given to refir as they lie: on a GPU its memory shared (no copy),
    under the simulator uploaded with the same strides. Without torch (the
    simulator only), made by numpy, with no peer."""

    def __init__(self, torch: Any, seed: int = 0) -> None:
        self.torch, self.rng = torch, np.random.default_rng(seed)
        if torch is not None:
            torch.manual_seed(seed)

    def make(self, spec: Input) -> tuple[DeviceBuffer, Any, Callable[[], np.ndarray]]:
        """refir's buffer, torch's tensor (None without torch), the values on the host."""
        t = self.torch
        if t is None:
            host = self.rng.random(spec.shape, dtype=np.float32)
            view = _viewed(host < 0.5 if spec.kind == "bool" else host, spec, np.transpose)
            return upload(view), None, lambda: view
        base = t.rand(spec.shape, device=_device(t))
        base = base < 0.5 if spec.kind == "bool" else base
        view = _viewed(base, spec, lambda v, p: v.permute(p))
        buf = upload(view.numpy()) if SIMULATED else DeviceBuffer(_memory(base.reshape(-1)), *shared_layout(view))
        return buf, view, lambda: view.cpu().numpy()


def shared_layout(view: Any) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """A torch view's element offset into its (contiguous) base, shape and strides:
    refir's DeviceBuffer over the same memory."""
    return view.storage_offset(), tuple(view.shape), tuple(view.stride())


def _viewed(base: Any, spec: Input, permute: Callable[[Any, tuple[int, ...]], Any]) -> Any:
    view = permute(base, spec.perm) if spec.perm else base
    return view[spec.index] if spec.index else view


@dataclass
class Prepared:
    """A case's calls on made operands: refir's, torch's (None: no peer), and the check."""

    case: Case
    ours: Callable[[], DeviceBuffer]
    theirs: Callable[[], Any] | None
    hosts: Callable[[], list[object]]  # the args with the host's values in the operands' places


def prepare(case: Case, made: Operands) -> Prepared:
    order = tuple(range(case.rank))
    if isinstance(case.op, ops.Iota):  # no operands: the type and its extents
        (extents,) = case.args
        t = TensorType("i32", tuple(Axis(e, None) for e in extents), Mesh("m", (1,), (0,)))
        peer = case.peer
        return Prepared(case, lambda: PER_DEVICE[ops.Iota](case.op, order, t, 0, list(extents)),
                        None if peer is None or made.torch is None else lambda: peer(made.torch),
                        lambda: [t, list(extents)])
    bufs, peers, hosts = [], [], []
    for a in case.args:
        if isinstance(a, Input):
            buf, tensor, host = made.make(a)
            bufs.append(buf)
            peers.append(tensor)
            hosts.append(host)
        else:
            bufs.append(a)
            hosts.append(lambda a=a: a)
    peer, torch = case.peer, made.torch
    theirs = None if peer is None or torch is None else lambda: peer(torch, *peers)
    return Prepared(case, lambda: compute(case.op, order, bufs), theirs, lambda: [h() for h in hosts])


def want(p: Prepared) -> np.ndarray:
    """interp's numpy of the case on the host's values."""
    args = p.hosts()
    if isinstance(p.case.op, ops.Iota):
        return iota_block(p.case.op, args[0], 0, args[1])  # type: ignore[arg-type]
    return np.asarray(interp.compute(p.case.op, args, F32))


def agree(got: np.ndarray, expected: np.ndarray, exact: bool, rtol: float = 1e-5) -> bool:
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return False
    if exact:
        return bool(np.array_equal(np.ascontiguousarray(got).view(f"u{got.itemsize}"),
                                   np.ascontiguousarray(expected).view(f"u{got.itemsize}")))
    return bool(np.allclose(got, expected, rtol=rtol, atol=1e-6, equal_nan=True))


def check(p: Prepared, torch: Any, n: int) -> None:
    """refir's result (and torch's) against numpy where n <= CHECK_ELEMS, refir's against
    torch's on the device at every size; an AssertionError names the row."""
    cuda.synchronize()  # device-wide: torch's stream made the operands, refir's kernels read them
    ours, exact, name, rtol = p.ours(), p.case.exact, p.case.name, p.case.rtol
    theirs = p.theirs() if p.theirs is not None else None
    cuda.synchronize()  # and torch reads refir's result
    if n <= CHECK_ELEMS:
        expected = want(p)
        assert agree(download(ours), expected, exact, rtol), f"{name}: refir differs from numpy"
        if theirs is not None:
            assert agree(theirs.cpu().numpy(), expected, exact, rtol), f"{name}: torch differs from numpy"
    if theirs is not None and not SIMULATED:  # refir's result seen by torch (shared memory)
        mine = torch.as_tensor(ours.data, device="cuda").as_strided(ours.shape, ours.strides, ours.offset)
        same = mine.equal(theirs) if exact else mine.allclose(theirs, rtol=rtol, atol=1e-6, equal_nan=True)
        assert bool(same), f"{name}: refir differs from torch"


Row = tuple[str, int, float, "float | None", float]  # name, bytes, refir s, torch s (None: no peer), piped s


def rows(torch: Any, n: int, barrier: Callable[[], object], repeats: int | None = None,
         failed: list[str] | None = None) -> list[Row]:
    """Every case at n elements: checked, then timed (refir, torch, refir back to back).
    A row that fails its check is still timed, its name marked; one that raises is left
    out; either is said in `failed` (when given; else the first failure raises), so
    that one run on a GPU shows every row it can."""
    sync = (lambda: None) if torch is None or SIMULATED else torch.cuda.synchronize
    out: list[Row] = []
    made = Operands(torch)
    for case in cases(n):
        name = case.name
        try:
            p = prepare(case, made)
            try:
                check(p, torch, n)
            except AssertionError as e:
                if failed is None:
                    raise
                failed.append(f"{n} elements: {e}")
                name += " CHECK FAILED"
            ours = median_time(p.ours, cuda.synchronize, barrier, repeats)
            theirs = None if p.theirs is None else median_time(p.theirs, sync, barrier, repeats)
            out.append((name, case.nbytes, ours, theirs, pipelined_time(p.ours, cuda.synchronize, barrier, repeats)))
        except Exception as e:  # noqa: BLE001  (a row that cannot run: said, the others still run)
            if failed is None:
                raise
            failed.append(f"{n} elements: {case.name}: {type(e).__name__}: {e}")
    return out


def sim_ceiling(nbytes: int, repeats: int | None = None) -> float:
    """Under the simulator: refir's own dense copy of as many bytes (meaningless as a time)."""
    a = DeviceBuffer.empty((max(nbytes // 8, 1),), F32)
    b = DeviceBuffer.empty((max(nbytes // 8, 1),), F32)
    return median_time(lambda: copy_into(b, a), cuda.synchronize, lambda: None, repeats)


def notes(n: int) -> list[str]:
    """The rows whose torch column is not plainly the same op, and why."""
    return [f"  {c.name}: {c.note}" for c in cases(n) if c.note] + [
        f"  {c.name}: no torch peer" for c in cases(n) if c.peer is None]


def names(n: int) -> Sequence[str]:
    return [c.name for c in cases(n)]
