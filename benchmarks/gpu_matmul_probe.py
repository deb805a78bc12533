"""Where the host time of a matmul through cupy goes, at the seed-2 run's shapes.

    python -m benchmarks.gpu_matmul_probe      (one GPU)

Rank 0 of a seed-2 run multiplies x's column block (rows with gaps: the block
keeps the global row stride) by w's row block. cupy hands cuBLAS only C- or
F-contiguous matrices and copies anything else first, so the probe times,
per call (host µs, calls back to back): matmul_into on the gapped block and on
a dense copy of it, our own copy to a dense block followed by matmul_into, and
cupy.matmul alone on views made once; and checks that the result bits of the
gapped path and of the copy-first path are the same.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from benchmarks.gpu_runs import per_call
from gpu_backend import functions
from gpu_backend.buffer import DeviceBuffer, download, upload
from gpu_backend.device import SIMULATED
from gpu_backend.kernels import elementwise, laid_out
from gpu_backend.matmul import _as_cupy, _core_matmul, _cupy, matmul_into

SHAPES = [(256, 512, 256), (512, 512, 512)]


def main() -> int:
    cupy = _cupy()
    if SIMULATED or cupy is None:
        sys.stderr.write("gpu_matmul_probe needs a GPU and cupy\n")
        return 1
    if "--gemm" in sys.argv:
        return direct_gemm(cupy)
    if "--threads" in sys.argv:  # only the uploads on another thread (a second, shorter run)
        for m, k, n in SHAPES:
            rng = np.random.default_rng(2)
            x, w = rng.random((m, k), np.float32) - 0.5, rng.random((k, n), np.float32) - 0.5
            print(f"{m}, {k}, {n}: host µs (median of 50): " + ", ".join(
                f"{name} {t:.1f}" for name, t in uploads_elsewhere(x, w).items()), flush=True)
        return 0
    for m, k, n in SHAPES:
        rng = np.random.default_rng(2)
        x = rng.random((m, k), np.float32) - 0.5
        w = rng.random((k, n), np.float32) - 0.5
        half = k // 2
        gapped = upload(x[:, :half])  # strides (k, 1), as the run's block
        dense = upload(np.ascontiguousarray(x[:, :half]))
        b = upload(w[:half])
        out = DeviceBuffer.empty((m, n), np.dtype(np.float32))
        transposed = upload(np.ascontiguousarray(x[:, :half].T)).transpose((1, 0))  # column-major a
        views = [_as_cupy(cupy, v) for v in (gapped, b, out, transposed)]
        dense_views = [_as_cupy(cupy, dense)]
        core = _core_matmul(cupy)
        bits: dict[str, np.ndarray] = {}
        core_same: dict[str, bool] = {}
        costs = {
            "matmul_into, gapped a": per_call(lambda: matmul_into(out, gapped, b)),  # noqa: B023
            "matmul_into, dense a": per_call(lambda: matmul_into(out, dense, b)),  # noqa: B023
            "laid_out(a) then matmul_into": per_call(
                lambda: matmul_into(out, laid_out(gapped, (0, 1)), b)),  # noqa: B023
            "cupy.matmul on views made once, gapped a": per_call(
                lambda: cupy.matmul(views[0], views[1], out=views[2])),  # noqa: B023
            "_as_cupy of the three buffers": per_call(
                lambda: [_as_cupy(cupy, v) for v in (gapped, b, out)]),  # noqa: B023
            "laid_out(a) alone": per_call(lambda: laid_out(gapped, (0, 1))),  # noqa: B023
            "cupy.matmul, dense a, views made once": per_call(
                lambda: cupy.matmul(dense_views[0], views[1], out=views[2])),  # noqa: B023
            "its core function (matmul_into's call), same": per_call(
                lambda: core(dense_views[0], views[1], out=views[2])),  # noqa: B023
        }
        for name, a in (("gapped", views[0]), ("dense", dense_views[0]), ("transposed", views[3])):
            for kind in ("front", "core"):
                (cupy.matmul if kind == "front" else core)(a, views[1], out=views[2])
                bits[kind] = cupy.asnumpy(views[2]).view(np.uint32).copy()
            core_same[name] = bool(np.array_equal(bits["front"], bits["core"]))
        matmul_into(out, gapped, b)
        through_cupy = download(out).copy()
        matmul_into(out, laid_out(gapped, (0, 1)), b)
        copied_first = download(out)
        same = through_cupy.view(np.uint32).tobytes() == copied_first.view(np.uint32).tobytes()
        print(f"{m}, {k}, {n} (a: {m} x {half}), host µs per call: "
              + ", ".join(f"{name} {t:.1f}" for name, t in costs.items())
              + f"; bits of the gapped and copy-first results equal: {same}; cupy.matmul and its core "
              f"function give the same bits (a gapped, dense, transposed): {core_same}; core is the front: "
              f"{core is cupy.matmul}", flush=True)
        print(f"  as in a run (after uploading x and w, µs, median of 50): {as_in_a_run(x, w, cupy):.1f}", flush=True)
        print("  after the uploads, host µs (median of 50): " + ", ".join(
            f"{name} {t:.1f}" for name, t in after_uploads(x, w).items()), flush=True)
    return 0


GEMM_SHAPES = [(256, 512, 256), (512, 512, 512), (1, 512, 256), (256, 512, 1), (7, 13, 5), (64, 1, 64),
               (1000, 300, 70), (4096, 4096, 4096)]


def direct_gemm(cupy: object) -> int:
    """gemm.py's direct cuBLAS call against cupy's matmul on the same views:
    the same bits for every shape and layout (a and b row- or column-major,
    a gapped; what cupy would copy first falls back to cupy), and host µs
    per call, back to back."""
    from gpu_backend import gemm
    from gpu_backend.matmul import _operand

    bad = 0
    for m, k, n in GEMM_SHAPES:
        rng = np.random.default_rng(3)
        x, w = rng.random((m, 2 * k), np.float32) - 0.5, rng.random((k, n), np.float32) - 0.5
        layouts = {"a row-major": upload(np.ascontiguousarray(x[:, :k])),
                   "a column-major": upload(np.ascontiguousarray(x[:, :k].T)).transpose((1, 0)),
                   "a gapped": upload(x).take(1, 0, k)}
        bs = {"b row-major": upload(w), "b column-major": upload(np.ascontiguousarray(w.T)).transpose((1, 0))}
        out = DeviceBuffer.empty((m, n), np.dtype(np.float32))
        line = []
        for an, a in layouts.items():
            for bn, b in bs.items():
                gemm.ENABLED = False
                matmul_into(out, a, b)
                want = download(out).copy()
                gemm.ENABLED = True
                blas = gemm.cublas_of(cupy)
                direct = gemm.gemm_call(blas, _operand(out), _operand(a), _operand(b), "f") is not None
                out_fill = upload(np.full((m, n), np.nan, np.float32))
                matmul_into(out_fill, a, b)
                got = download(out_fill)
                same = want.view(np.uint32).tobytes() == got.view(np.uint32).tobytes()
                bad += not same
                cost = ""
                if (an, bn) == ("a row-major", "b row-major"):
                    gemm.ENABLED = False
                    through_cupy = per_call(lambda: matmul_into(out, a, b), 100)  # noqa: B023
                    gemm.ENABLED = True
                    direct_cost = per_call(lambda: matmul_into(out, a, b), 100)  # noqa: B023
                    cost = f" (µs a call: cupy {through_cupy:.1f}, direct {direct_cost:.1f})"
                line.append(f"{an}, {bn}: {'direct' if direct else 'cupy'}, same bits {same}{cost}")
        print(f"{m}, {k}, {n}: " + "; ".join(line), flush=True)
    print(f"direct cuBLAS against cupy's matmul: {'all the same bits' if not bad else f'{bad} DIFFER'}")
    return 1 if bad else 0


def uploads_elsewhere(x: np.ndarray, w: np.ndarray) -> dict[str, float]:
    """Whether the uploads cool the caches of the core that then calls cuBLAS:
    the two uploads and matmul_into on this thread, against the uploads made
    by a worker thread (another core's caches; this thread waits for it, so
    the stream order is the same) and then matmul_into here; each the call's
    host time and the whole (uploads, matmul, a synchronize)."""
    import threading

    from gpu_backend.device import cuda

    sync = cuda.synchronize
    got: list[DeviceBuffer] = []
    start_uploads, done = threading.Event(), threading.Event()

    def worker() -> None:
        cuda.current_context()  # the same device's primary context, current on this thread too
        while True:
            start_uploads.wait()
            start_uploads.clear()
            if not got:
                return
            got[:] = [upload(x), upload(w)]
            done.set()

    def here() -> tuple[DeviceBuffer, DeviceBuffer]:
        return upload(x), upload(w)

    def there() -> tuple[DeviceBuffer, DeviceBuffer]:
        got[:] = [None]  # type: ignore[list-item]
        start_uploads.set()
        done.wait()
        done.clear()
        return got[0], got[1]

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    costs = {}
    for name, uploads in (("here", here), ("on a worker thread", there), ("here, again", here)):
        calls, wholes = [], []
        for _ in range(50):
            sync()
            t0 = time.perf_counter()
            a, b = uploads()
            out = DeviceBuffer.empty((x.shape[0], w.shape[1]), np.dtype(np.float32))
            t1 = time.perf_counter()
            matmul_into(out, a, b)
            t2 = time.perf_counter()
            sync()
            calls.append(t2 - t1)
            wholes.append(time.perf_counter() - t0)
        costs[f"uploads {name}: matmul_into"] = float(np.median(calls)) * 1e6
        costs[f"uploads {name}: whole"] = float(np.median(wholes)) * 1e6
    got.clear()
    start_uploads.set()
    thread.join()
    return costs


def after_uploads(x: np.ndarray, w: np.ndarray) -> dict[str, float]:
    """Why a matmul right after the uploads costs more than back to back: the
    same call with the uploads' DMA waited for first (a synchronize), with
    the host's caches stirred instead (a numpy copy of x's size), a plain
    launch in its place, the wait for the uploads alone, and torch's own
    matmul after torch's uploads (the peer's figure for the same moment)."""
    from gpu_backend.device import cuda

    sync = cuda.synchronize
    one = upload(np.zeros(1, np.float32))
    tiny = DeviceBuffer.empty((1,), np.dtype(np.float32))
    relu = functions.unary("relu", np.dtype(np.float32))
    scratch = np.empty_like(x)

    def timed(before: object, call: object) -> float:
        times = []
        for _ in range(50):
            a, b = upload(x), upload(w)
            out = DeviceBuffer.empty((x.shape[0], w.shape[1]), np.dtype(np.float32))
            before(a, b)  # type: ignore[operator]
            start = time.perf_counter()
            call(out, a, b)  # type: ignore[operator]
            times.append(time.perf_counter() - start)
            sync()
        return float(np.median(times)) * 1e6

    nothing = lambda a, b: None  # noqa: E731
    costs = {
        "matmul_into": timed(nothing, matmul_into),
        "synchronize, then matmul_into": timed(lambda a, b: sync(), matmul_into),
        "synchronize, stir 1 array of x's size, then matmul_into": timed(
            lambda a, b: (sync(), np.copyto(scratch, x)), matmul_into),
        "a one-element kernel launch instead": timed(nothing, lambda out, a, b: elementwise(relu, tiny, one)),
        "the synchronize alone (the uploads' DMA still running)": timed(nothing, lambda out, a, b: sync()),
        "matmul_into, then a synchronize (call and GEMM)": timed(nothing, lambda out, a, b: (matmul_into(out, a, b),
                                                                                             sync())),
        "upload of x (host)": timed(nothing, lambda out, a, b: upload(x)),
    }
    try:
        import torch
    except ImportError:
        return costs
    times = []
    for _ in range(50):
        ta, tb = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
        start = time.perf_counter()
        ta @ tb
        times.append(time.perf_counter() - start)
        torch.cuda.synchronize()
    costs["torch: a @ b after its uploads"] = float(np.median(times)) * 1e6
    return costs


def as_in_a_run(x: np.ndarray, w: np.ndarray, cupy: object) -> float:
    """matmul_into's host time right after the two uploads a run makes (the
    host's caches then hold the copies' bytes, not the call's code), not back to back."""
    from gpu_backend.device import cuda

    times = []
    for _ in range(50):
        a, b = upload(x), upload(w)
        out = DeviceBuffer.empty((x.shape[0], w.shape[1]), np.dtype(np.float32))
        start = time.perf_counter()
        matmul_into(out, a, b)
        times.append(time.perf_counter() - start)
        cuda.synchronize()
    return float(np.median(times)) * 1e6


if __name__ == "__main__":
    sys.exit(main())
