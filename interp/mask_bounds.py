"""The numerics rules of the mask ops (docs/spec.md §10, num_c7, num_x10): the
comparisons, where, iota, and the unary `tanh erf sigmoid rsqrt sin cos`, none of which
libm or CUDA rounds correctly. interp/error_bounds.py imports this module last."""

from __future__ import annotations

import numpy as np

from interp import numerics as nx
from interp.error_bounds import UNARY_BOUNDS, Operands, rule
from interp.numerics import exact_limit
from refir.ir import ops
from refir.ir.types import finfo, is_float

# How many ulps (eps |y| plus the dtype's smallest subnormal) numpy and the GPU's kernels
# may each be from the true function, in the dtype they compute in: CUDA's math functions
# promise 2 (sinf, cosf, tanhf, erff and their double forms; CUDA C Programming Guide,
# "Mathematical Functions"), numpy's SIMD loops 4 (its float64 SVML ones); sigmoid adds
# exp's 4 to the two roundings of 1 / (1 + e); rsqrt is 1 / sqrt(x), two correct roundings.
MASK_ULPS = {"tanh": 4, "erf": 4, "sin": 4, "cos": 4, "sigmoid": 6, "rsqrt": 1}
# The most |f(u) - f(w)| / |u - w| can be, for an operand's carried error (rsqrt: below).
LIPSCHITZ = {"tanh": 1.0, "erf": 2 / np.sqrt(np.pi), "sin": 1.0, "cos": 1.0, "sigmoid": 0.25}


def unary(name: str, v: Operands) -> np.ndarray:
    (x,), (b,), (rx,) = v.xs, v.bs, v.rs
    if name == "rsqrt":  # |u^-1/2 - w^-1/2| <= |u - w| / (2 low^3/2), low the least operand
        low = np.abs(x) - rx - b
        carried = np.where(b == 0, 0.0, np.where(low > 0, b / (2 * np.where(low > 0, low, 1.0) ** 1.5), np.inf))
        if not v.m.exact:  # num_c7: correctly rounded steps, every backend's bits on exact operands
            return v.rounded(carried)
        return carried + v.ulps(1, carried)
    carried = nx.scaled(np.array(LIPSCHITZ[name]), b)
    k = MASK_ULPS[name]
    if not v.m.exact:  # num_c7: two implementations each within k ulps of the truth
        return carried + v.ulps(2 * k + 1, carried)
    bound = carried + v.ulps(k, carried)
    if name == "sigmoid" and is_float(v.dtype):  # 1 / (1 + inf) = 0 where the true value is subnormal
        bound = bound + float(finfo(np.dtype(np.float64) if v.dtype == np.float64 else np.dtype(np.float32)).tiny)
    return bound


def _decided(v: Operands, a: np.ndarray, b: np.ndarray, ba: np.ndarray, bb: np.ndarray,
             ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """Where a comparison of a and b gives one answer for every value within their bounds."""
    width = ba + bb + ra + rb
    special = ~np.isfinite(a) | ~np.isfinite(b)  # non-finite values are matched exactly (num_c5)
    return (width == 0) | (np.isfinite(width) & (special | (np.abs(a - b) > width)))


@rule(ops.Compare)
def _compare(op: ops.Compare, v: Operands) -> np.ndarray:
    (a, b), (ba, bb), (ra, rb) = v.xs, v.bs, v.rs
    return np.where(_decided(v, a, b, ba, bb, ra, rb), 0.0, np.inf)


@rule(ops.Where)
def _where(op: ops.Where, v: Operands) -> np.ndarray:
    (c, x, y), (bc, bx, by) = v.xs, v.bs
    chosen = np.where(c != 0, bx, by)
    # An undecided condition picks either value: the other is |x - y| away.
    return np.where(bc == 0, chosen, np.maximum(bx, by) + np.abs(x - y))


@rule(ops.Iota)
def _iota(op: ops.Iota, v: Operands) -> np.ndarray:
    """Indices are exact; a float index beyond the dtype's exact integers is rounded once."""
    if not v.m.exact or not is_float(v.dtype):
        return np.zeros(v.r.shape)
    d = v.m.dtype(v.dtype)
    # r itself is rounded: 257 lands on 256 = 2^(nmant+1), so only values below it are surely exact
    return np.where(np.abs(v.r) < exact_limit(d), 0.0, v.rounded(np.zeros(v.r.shape)))


UNARY_BOUNDS.update(dict.fromkeys(ops.MASK_UNARY, unary))  # error_bounds' unary rule asks this table
