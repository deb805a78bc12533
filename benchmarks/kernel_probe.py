"""Kernel variants side by side on one GPU, to choose launch geometry (issue 10).

    python -m benchmarks.kernel_probe [host] [permutes] [reductions] [elementwise] [copies] [layer]
                                  (one GPU; GPU_BENCH_MIB: the size, default 1024; no section named: the first three
                                  after host)

For the permutes, reductions, elementwise ops and casts of benchmarks/gpu_ops.py
it prints, per variant of the knobs in gpu_backend/kernels/elementwise.py, transpose.py and reduce.py,
the time of one call (then a synchronize) and of ten back to back ("piped"),
as % of a device-to-device copy of the same bytes, and the compiled kernels'
registers per thread. First it splits one call into its host part (until
the function returns) and the wait for the GPU, to find the per-call overhead.
`layer`: issue 27's rows below 90% of the copy under their kernels' variants
(benchmarks/probe_layer_ops.py).
"""

from __future__ import annotations

import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from benchmarks.gpu_ops import ElementwiseCase, _buffer, _torch_in, copy_ceiling, sides
from benchmarks.gpu_timing import MIB, NONE, median_time, pipelined_time, say
from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.device import SIMULATED, cuda
from gpu_backend.kernels import elementwise as kernels
from gpu_backend.kernels import elementwise_kernels, forget_plans, reduce, reduce_kernels, transpose
from gpu_backend.kernels.elementwise import copy_into
from gpu_backend.kernels.functions import accumulator, binary, cast, narrow
from gpu_backend.kernels.reduce import reduce_into


@contextmanager
def knobs(module: Any, **values: Any) -> Iterator[None]:
    old = {k: getattr(module, k) for k in values}
    for k, v in values.items():
        setattr(module, k, v)
    forget_plans()  # launches worked out under the old knobs
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(module, k, v)
        forget_plans()


def split(fn: Callable[[], object], repeats: int = 10) -> tuple[float, float]:
    """Median µs of one call's host part and of the wait for the GPU after it."""
    fn()
    cuda.synchronize()
    host, wait = [], []
    for _ in range(repeats):
        cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        cuda.synchronize()
        t2 = time.perf_counter()
        host.append(t1 - t0)
        wait.append(t2 - t1)
    return 1e6 * statistics.median(host), 1e6 * statistics.median(wait)


def micro(fn: Callable[[], object], repeats: int = 200) -> float:
    """Median µs of a host-only call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(times)


def regs(kernel: Any) -> str:
    try:
        return ",".join(str(r) for r in kernel.get_regs_per_thread().values())
    except Exception as e:  # noqa: BLE001  (a probe: say what went wrong and go on)
        return f"? ({type(e).__name__})"


def row(name: str, nbytes: int, ceiling: float, fn: Callable[[], object], extra: str = "") -> tuple[float, float]:
    one = median_time(fn, cuda.synchronize, NONE)
    piped = pipelined_time(fn, cuda.synchronize, NONE)
    roof = nbytes / ceiling
    say(f"  {name:<44} call {100 * nbytes / one / roof:5.1f}%  piped {100 * nbytes / piped / roof:5.1f}%  "
        f"({1e3 * one:.3f} / {1e3 * piped:.3f} ms) {extra}")
    return one, piped


def main() -> int:
    if SIMULATED:
        say("kernel_probe needs a real GPU")
        return 1
    import torch

    n = MIB * (1 << 20) // 4
    f32 = np.dtype(np.float32)
    ceil = {b: copy_ceiling(torch, b, NONE) for b in (8 * n, 4 * n, 12 * n, 6 * n)}
    say(f"{MIB} MiB f32; copy ceiling {8 * n / ceil[8 * n] / 1e9:.0f} GB/s at {8 * n >> 20} MiB moved")

    if "host" in sys.argv[1:]:  # where one call's time goes, and a bare numba sum
        with guarded("host"):
            _host(torch, n, f32, ceil)
            _bare(n, _buffer(torch, torch.rand(n, device="cuda"), (n,)), ceil[4 * n])
    picked = set(sys.argv[1:]) or {"permutes", "reductions", "elementwise"}
    for name, section in [("permutes", _permutes), ("reductions", _reductions), ("elementwise", _elementwise),
                          ("copies", _copies), ("layer", _layer)]:
        if name in picked:
            with guarded(name):
                section(torch, n, f32, ceil)
    return 0


@contextmanager
def guarded(name: str) -> Iterator[None]:
    """A failing section is reported and the next one runs."""
    try:
        yield
    except Exception:  # noqa: BLE001
        say(f"section {name} failed:\n{traceback.format_exc()}")


def _host(torch: Any, n: int, f32: np.dtype, ceil: dict[int, float]) -> None:
    """Where one call's time goes."""
    shape = sides(n, 3)
    tx = torch.rand(shape, device="cuda")
    x = _buffer(torch, tx, shape)
    out = DeviceBuffer.empty(shape, f32)
    costs = [micro(lambda: x.data.view(np.uint32)), micro(lambda: kernels.as_words(x.data, np.dtype(np.uint32))),
             micro(lambda: x.data[:n]), micro(torch.cuda.synchronize), micro(cuda.synchronize)]
    say("host costs (µs): numba view {:.1f}, cached as_words {:.1f}, slice {:.1f}, torch sync idle {:.1f}, "
        "numba sync idle {:.1f}".format(*costs))
    uncached = lambda data, word: data if data.dtype == word else data.view(word)  # noqa: E731
    e = ElementwiseCase.make(torch, n)
    small = DeviceBuffer.empty((shape[0], shape[1]), f32)
    cases = [("copy (0,1,2) row", lambda: copy_into(out, x)),
             ("permute (2,0,1)", lambda: copy_into(DeviceBuffer.dense(out.data, (shape[2], shape[0], shape[1])),
                                                   x.transpose((2, 0, 1)))),
             ("add", e.add), ("cast", e.cast),
             ("sum inner", lambda: reduce_into(small, x, (2,), "sum")),
             ("torch copy_", lambda: e.tc.copy_(e.ta))]
    for name, fn in cases:
        hw = split(fn)
        say(f"  {name:<20} host {hw[0]:7.1f} µs, then GPU wait {hw[1]:7.1f} µs")
    with knobs(kernels, as_words=uncached):
        hw = split(cases[0][1])
        say(f"  {'copy, views uncached':<20} host {hw[0]:7.1f} µs, then GPU wait {hw[1]:7.1f} µs")
        row("copy (0,1,2) views uncached", 8 * n, ceil[8 * n], cases[0][1])
    row("copy (0,1,2) views cached", 8 * n, ceil[8 * n], cases[0][1])
    row("torch copy_", 8 * n, ceil[8 * n], cases[-1][1])



# Transpose variants: (side, rows, walk, blocks x max_blocks); the first is the default.
TRANSPOSES = [(64, 2, 1, 2), (64, 2, 0, 1), (64, 2, 0, 2), (64, 2, 2, 2), (32, 4, 1, 2), (64, 4, 1, 2)]
# Permutes timed: 3-D orders (perm, reversed result) and the 4-D one.
PERMUTES = [((0, 1, 2), False), ((0, 2, 1), False), ((2, 1, 0), False), ((1, 2, 0), True), ((2, 1, 0), True),
            ((2, 0, 3, 1), False)]


def _permutes(torch: Any, n: int, f32: np.dtype, ceil: dict[int, float]) -> None:
    say("permutes (tiled transpose variants: side, rows, walk, blocks x max_blocks; row copies: DENSE1_BLOCKS)")
    inputs = {rank: torch.rand(sides(n, rank), device="cuda") for rank in (3, 4)}
    for perm, reverse in PERMUTES:
        rank = len(perm)
        tx = inputs[rank]
        shp = tuple(tx.shape)
        x = _buffer(torch, tx, shp)
        layout = tuple(reversed(range(rank))) if reverse else tuple(range(rank))
        out_shape = tuple(shp[p] for p in perm)
        store, tout = _torch_in(torch, out_shape, layout)
        o = DeviceBuffer.empty(out_shape, f32, layout)
        view = x.transpose(perm)
        torch_t = median_time(lambda: tout.copy_(tx.permute(perm)), torch.cuda.synchronize, NONE)  # noqa: B023
        say(f" {perm} {'rev' if reverse else 'row'}: torch {100 * ceil[8 * n] / torch_t:.0f}%")
        if tiled(o, view):
            for side, rows, walk, blocks in TRANSPOSES:
                with knobs(transpose, TRANSPOSE_SIDE=side, TRANSPOSE_ROWS=rows, TRANSPOSE_WALK=walk,
                           TRANSPOSE_BLOCKS=blocks):
                    row(f"side {side} rows {rows} walk {walk} blocks {blocks}", 8 * n, ceil[8 * n],
                        lambda: copy_into(o, view))  # noqa: B023
                    assert torch.equal(torch.as_tensor(o.data, device="cuda"), store.reshape(-1)), "differs"
        else:
            for blocks in (1, 4, 8, 16, 1 << 20):
                with knobs(kernels, DENSE1_BLOCKS=blocks):
                    row(f"row copy, dense blocks {blocks}", 8 * n, ceil[8 * n],
                        lambda: copy_into(o, view))  # noqa: B023
                    assert torch.equal(torch.as_tensor(o.data, device="cuda"), store.reshape(-1)), "differs"
            hw = split(lambda: copy_into(o, view))  # noqa: B023
            say(f"  host {hw[0]:7.1f} µs, then GPU wait {hw[1]:7.1f} µs")
    for side, rows, walk, _ in TRANSPOSES:
        say(f"  regs transpose side {side} rows {rows} walk {walk}: {regs(transpose._transpose(4, side, rows, walk))}")


# Reduction variants per case: knobs of gpu_backend/kernels/reduce.py (its kernels: reduce_kernels.py); the first is the
# default.
NO_WARPS = 1 << 62  # WARP_ROWS_FROM that no plane reaches
# No VECTOR_BYTES: an element a load, the kernels before vector loads (main at 78df4e1).
SCALAR = {"VECTOR_BYTES": {}}
BYTES8 = {"VECTOR_BYTES": {"sum": 8, "max": 8}}
BYTES16 = {"VECTOR_BYTES": {"sum": 16, "max": 16}}
REDUCTIONS: dict[str, list[dict[str, Any]]] = {
    "inner": [{}],
    "outer": [{}, SCALAR, BYTES8, BYTES16, SCALAR, BYTES8, BYTES16, {**BYTES16, "VECTOR_LOADS": 8}],
    "all": [{}, SCALAR, BYTES8, SCALAR, {}],
}


def _reductions(torch: Any, n: int, f32: np.dtype, ceil: dict[int, float]) -> None:
    say("reductions (knobs of gpu_backend/kernels/reduce.py; none: the defaults)")
    shape = sides(n, 3)
    tx = torch.rand(shape, device="cuda") - 0.5
    x = _buffer(torch, tx, shape)
    for kind, fn in [("sum", torch.sum), ("max", torch.amax)]:
        for dims, label in [((2,), "inner"), ((0,), "outer"), ((0, 1, 2), "all")]:
            o = DeviceBuffer.empty(tuple(m for d, m in enumerate(shape) if d not in dims), f32)
            torch_t = median_time(lambda: fn(tx, dim=dims), torch.cuda.synchronize, NONE)  # noqa: B023
            say(f" {kind} {label}: torch {100 * ceil[4 * n] / torch_t:.0f}%")
            want = fn(tx.double(), dim=dims).float()
            first = None
            for values in REDUCTIONS[label]:
                with knobs(reduce, **values), guarded(f"{kind} {label} {values}"):
                    row(f"{values or 'defaults'}", 4 * n, ceil[4 * n], lambda: reduce_into(o, x, dims, kind))  # noqa: B023
                    got = torch.as_tensor(o.data, device="cuda")[:o.size].reshape(want.shape).clone()
                    assert torch.allclose(got, want, rtol=1e-5, atol=1e-3), f"{kind} {label} differs"
                    first = got if first is None else first
                    say(f"    bits as the first variant: {torch.equal(got, first)}")
            torch_t = median_time(lambda: fn(tx, dim=dims), torch.cuda.synchronize, NONE)  # noqa: B023
            say(f"  torch again {100 * ceil[4 * n] / torch_t:.0f}% ({1e3 * torch_t:.3f} ms)")
            hw = split(lambda: reduce_into(o, x, dims, kind))  # noqa: B023
            say(f"  host {hw[0]:7.1f} µs, then GPU wait {hw[1]:7.1f} µs (torch: host {micro(lambda: fn(tx, dim=dims), 50):.1f} µs)")  # noqa: B023,E501
    acc_dtype, to_acc = accumulator(f32)
    store = narrow(f32)
    for kind in ("sum", "max"):
        for loads, pairs in [(16, kind in reduce.PAIRED)]:
            say(f"  regs {kind} loads {loads} pairs {pairs}: "
                f"plane {regs(reduce_kernels.plane_kernel(kind, to_acc, store, acc_dtype.type, loads, pairs))}, "
                f"columns {regs(reduce_kernels.columns_kernel(kind, to_acc, store, loads, pairs))}, "
                f"columns at most 32 {regs(reduce_kernels.columns_kernel(kind, to_acc, store, loads, pairs, 32))}, "
                f"total {regs(reduce_kernels.total_kernel(kind, to_acc, store, acc_dtype.type, loads, pairs))}, "
                f"a warp a row {regs(reduce_kernels.warp_rows_kernel(kind, to_acc, store, loads, pairs))}")
        for lanes, loads in [(4, 16), (2, 16)]:
            wide = reduce_kernels.wide_columns_kernel(kind, to_acc, store, lanes, loads, kind in reduce.PAIRED)
            say(f"  regs {kind} vectors of {lanes}, {loads} loads: columns {regs(wide)}"
                + (f", total {regs(reduce_kernels.total_kernel(kind, to_acc, store, acc_dtype.type, 16, True, lanes))}"
                   if kind == "max" else ""))


def _copies(torch: Any, n: int, f32: np.dtype, ceil: dict[int, float]) -> None:
    """Layout-preserving copies: the driver's memcpy against the dense row kernel; and the host part of a
    4-D permute (the tiled transpose's launch, prepared)."""
    say("copies (DENSE_COPY) and the 4-D permute's host part")
    tx = torch.rand(n, device="cuda")
    tout = torch.empty(n, device="cuda")
    x, o = _buffer(torch, tx, (n,)), _buffer(torch, tout, (n,))
    torch_t = median_time(lambda: tout.copy_(tx), torch.cuda.synchronize, NONE)
    host = micro(lambda: tout.copy_(tx), 50)
    say(f" identity copy: torch copy_ {100 * ceil[8 * n] / torch_t:.0f}%, host {host:.1f} µs")
    for how in ("memcpy", "kernel"):
        with knobs(kernels, DENSE_COPY=how):
            row(f"DENSE_COPY {how}", 8 * n, ceil[8 * n], lambda: copy_into(o, x))
            assert torch.equal(tout, tx), "copy differs"
            hw = split(lambda: copy_into(o, x))
            say(f"  host {hw[0]:7.1f} µs, then GPU wait {hw[1]:7.1f} µs")
    shape = sides(n, 4)
    t4 = torch.rand(shape, device="cuda")
    x4 = _buffer(torch, t4, shape)
    perm = (2, 0, 3, 1)
    store, tperm = _torch_in(torch, tuple(shape[p] for p in perm), (0, 1, 2, 3))
    o4 = DeviceBuffer.empty(tuple(shape[p] for p in perm), f32)
    view = x4.transpose(perm)
    torch_t = median_time(lambda: tperm.copy_(t4.permute(perm)), torch.cuda.synchronize, NONE)
    say(f" permute {perm}: torch {100 * ceil[8 * n] / torch_t:.0f}%, host "
        f"{micro(lambda: tperm.copy_(t4.permute(perm)), 50):.1f} µs")
    for fit in (True, False):
        with knobs(transpose, TRANSPOSE_FIT=fit):
            row(f"TRANSPOSE_FIT {fit}", 8 * n, ceil[8 * n], lambda: copy_into(o4, view))
            assert torch.equal(torch.as_tensor(o4.data, device="cuda"), store.reshape(-1)), "permute differs"
            hw = split(lambda: copy_into(o4, view))
            say(f"  host {hw[0]:7.1f} µs, then GPU wait {hw[1]:7.1f} µs")
    shape = sides(n, 3)
    x3 = _buffer(torch, t4.reshape(shape), shape)
    o3 = DeviceBuffer.empty((shape[1], shape[0], shape[2]), f32)
    row("permute (1, 0, 2): rows", 8 * n, ceil[8 * n], lambda: copy_into(o3, x3.transpose((1, 0, 2))))
    hw = split(lambda: copy_into(o3, x3.transpose((1, 0, 2))))
    say(f"  host {hw[0]:7.1f} µs, then GPU wait {hw[1]:7.1f} µs")


def _elementwise(torch: Any, n: int, f32: np.dtype, ceil: dict[int, float]) -> None:
    e = ElementwiseCase.make(torch, n)
    ta, tb, tc, th = e.ta, e.tb, e.tc, e.th
    say("elementwise (DENSE2_BLOCKS, DENSE1_BLOCKS)")
    for blocks in (1, 4, 8, 16, 1 << 20):
        with knobs(kernels, DENSE2_BLOCKS=blocks, DENSE1_BLOCKS=blocks):
            row(f"add blocks {blocks}", 12 * n, ceil[12 * n], e.add)
            row(f"cast blocks {blocks}", 6 * n, ceil[6 * n], e.cast)
    assert torch.equal(tc, ta + tb) and torch.equal(th, ta.half())
    t_add = median_time(lambda: torch.add(ta, tb, out=tc), torch.cuda.synchronize, NONE)
    t_cast = median_time(lambda: th.copy_(ta), torch.cuda.synchronize, NONE)
    say(f"  torch add {100 * ceil[12 * n] / t_add:.0f}%, torch cast {100 * ceil[6 * n] / t_cast:.0f}%")
    half = elementwise_kernels.dense1_kernel(elementwise_kernels.ignoring_scalar(cast(f32, np.dtype(np.float16))))
    say(f"  regs dense add {regs(elementwise_kernels.dense2_kernel(binary('add', f32)))}, cast {regs(half)}")


def _layer(torch: Any, n: int, f32: np.dtype, ceil: dict[int, float]) -> None:
    from benchmarks.probe_layer_ops import layer_section

    layer_section(torch, n, knobs, row, regs)


def tiled(dst: DeviceBuffer, src: DeviceBuffer) -> bool:
    """Whether copy_into takes the tiled transpose (its own test)."""
    shape, (_, ss) = kernels.coalesce(dst.shape, [dst.strides, src.strides], dst.strides)
    fast = min(range(len(shape)), key=lambda a: (abs(ss[a]), -a))
    return not (fast == len(shape) - 1 or ss[fast] == 0)


def _bare(n: int, x: DeviceBuffer, ceiling: float) -> None:
    """A bare float32 sum with a float64 accumulator, atomics at the end: what numba can reach."""
    @cuda.jit
    def bare(a: Any, total: Any) -> None:
        acc = 0.0
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        while i + 3 * step < a.size:
            v0, v1, v2, v3 = a[i], a[i + step], a[i + 2 * step], a[i + 3 * step]
            acc += v0
            acc += v1
            acc += v2
            acc += v3
            i += 4 * step
        while i < a.size:
            acc += a[i]
            i += step
        cuda.atomic.add(total, 0, acc)

    total = cuda.device_array(1, np.float64)
    flat = x.data
    for blocks in (2112, 8448):
        row(f"bare sum, {blocks} blocks of 256", 4 * n, ceiling, lambda: bare[blocks, 256](flat, total),  # noqa: B023
            f"regs {regs(bare)}")


if __name__ == "__main__":
    sys.exit(main())
