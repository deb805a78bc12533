"""How far numpy's and the GPU kernels' tanh erf sigmoid rsqrt sin cos are from the
true function, in the ulps interp/mask_bounds.py counts (eps |y| plus the dtype's
smallest subnormal), and from each other. Run on a GPU (or the simulator):
`python -m benchmarks.mask_ulps [N]`. f32's truth is float64 (its error is below 1e-7
of an f32 ulp); f64's is mpmath at 40 digits on a subsample. Exits 1 where numpy's or the
GPU's error exceeds its bound (MASK_ULPS: the assumption num_c7's bounds rest on)."""

from __future__ import annotations

import math
import sys

import numpy as np

from gpu_backend.buffers.buffer import download, upload
from gpu_backend.impls import compute
from interp.mask_bounds import MASK_ULPS
from interp.masks import MASK_UNARY_FNS
from refir.ir import ops


def samples(n: int, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """Uniform in [-10, 10], log-spaced magnitudes of either sign, and sin's hard cases."""
    big = np.float64(finfo_max(dtype))
    mags = np.exp(rng.uniform(np.log(1e-30), np.log(min(big, 1e30)), n // 2))
    x = np.concatenate([rng.uniform(-10, 10, n // 4), mags * rng.choice([-1, 1], n // 2),
                        np.arange(1, n // 4 + 1) * np.pi / 2 + rng.uniform(-1e-3, 1e-3, n // 4)])
    return x.astype(dtype)


def finfo_max(dtype: np.dtype) -> float:
    return float(np.finfo(dtype).max)


def truth64(name: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    fns = {"tanh": np.tanh, "sin": np.sin, "cos": np.cos, "rsqrt": lambda v: 1 / np.sqrt(v),
           "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "erf": np.frompyfunc(math.erf, 1, 1)}
    with np.errstate(all="ignore"):
        return np.asarray(fns[name](x), dtype=np.float64)


def truth_mp(name: str, x: np.ndarray) -> np.ndarray:
    import mpmath as mp

    mp.mp.dps = 40
    fns = {"tanh": mp.tanh, "sin": mp.sin, "cos": mp.cos, "erf": mp.erf,
           "rsqrt": lambda v: 1 / mp.sqrt(v) if v > 0 else mp.nan, "sigmoid": lambda v: 1 / (1 + mp.exp(-v))}
    return np.array([float(fns[name](mp.mpf(float(v)))) for v in x])


def ulps(got: np.ndarray, want: np.ndarray, dtype: np.dtype, floor: float = 0.0) -> float:
    """The worst error in ulps; `floor` is added to each ulp (sigmoid's smallest normal, num_x10)."""
    info = np.finfo(dtype)
    ok = np.isfinite(want) & np.isfinite(got.astype(np.float64))
    unit = float(info.eps) * np.abs(want[ok]) + float(info.smallest_subnormal) + floor
    err = np.abs(got.astype(np.float64)[ok] - want[ok]) / unit
    bad = int(np.sum(np.isfinite(want) != np.isfinite(got.astype(np.float64))))
    return (float(err.max()) if err.size else 0.0) + (np.inf if bad else 0.0)


def main(n: int) -> int:
    rng = np.random.default_rng(0)
    over: list[str] = []
    print(f"{'op':8} {'dtype':5} {'numpy':>8} {'gpu':>8} {'gpu-np':>8} {'bound':>6} {'bits equal':>10}")
    for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
        x = samples(n if dtype == np.float32 else n // 50, dtype, rng)
        for name in MASK_ULPS:
            xs = np.abs(x) if name == "rsqrt" else x
            ref = MASK_UNARY_FNS[name](xs)
            gpu = download(compute(ops.Unary(name), (0,), [upload(xs)]))
            try:
                want = truth64(name, xs) if dtype == np.float32 else truth_mp(name, xs)
            except ImportError:  # no mpmath: f64 against numpy's own only
                want = ref.astype(np.float64)
            same = float(np.mean((ref == gpu) | (np.isnan(ref) & np.isnan(gpu))) * 100)
            floor = float(np.finfo(dtype).tiny) if name == "sigmoid" else 0.0  # 1 / (1 + inf) where exp overflows
            errs = ulps(ref, want, dtype, floor), ulps(gpu, want, dtype, floor)
            print(f"{name:8} {dtype.name:5} {errs[0]:8.3f} {errs[1]:8.3f} "
                  f"{ulps(gpu, ref.astype(np.float64), dtype):8.3f} {MASK_ULPS[name]:6} {same:9.3f}%")
            over += [f"{name} {dtype.name} {side}" for side, e in zip(("numpy", "gpu"), errs) if e > MASK_ULPS[name]]
    print("EXCEEDS its bound: " + ", ".join(over) if over else "every error within its bound")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20))
