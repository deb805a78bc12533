"""Input data for a case: values of one kind, handed over as strided views.

Kinds of values:
- `exact`: small integers (in floats too), so every order of summation gives
  the same bits and float results must be bit-exact;
- `float`: arbitrary floats of mixed magnitude; integers over their whole range;
- `special`: like `float`, with NaN, infinities and signed zeros sprinkled in;
- `edge`: values at each op's known error classes (conformance/classes.py
  says which wrong implementation each exposes): every element from one of
  the pools below, the pools dealt out in turn so that even a small input
  holds some of each.

Every input reaches the backend as a view of a larger buffer (DESIGN: inputs
may have any strides): its memory order permuted, gaps between elements, axes
reversed. The gaps hold a sentinel, so a backend that reads them shows it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from math import prod

import numpy as np

from refir.ir.types import DTYPES, Bindings, TensorType, as_dtype, finfo, global_shape

KINDS = ("exact", "float", "special", "edge")
SENTINEL = 77


@dataclass(frozen=True)
class View:
    """How one input lies in memory: `order` lists logical axes outermost
    first, `step` > 1 leaves gaps, `flip` makes the stride negative."""

    order: tuple[int, ...]
    step: tuple[int, ...]
    flip: tuple[bool, ...]

    @staticmethod
    def dense(rank: int) -> View:
        return View(tuple(range(rank)), (1,) * rank, (False,) * rank)


@dataclass(frozen=True)
class DataSpec:
    """Everything that fixes a case's inputs. Without `views`, each input's
    view is drawn from the seed; with them, an input they do not name is
    row-major (`views=()`: every input, a corpus file's `# data: exact/dense`)."""

    kind: str = "exact"
    seed: int = 0
    views: tuple[tuple[str, View], ...] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> DataSpec:
        d = json.loads(text)
        views = None
        if d.get("views") is not None:
            views = tuple((name, View(tuple(v["order"]), tuple(v["step"]), tuple(v["flip"])))
                          for name, v in d["views"])
        return DataSpec(d["kind"], int(d["seed"]), views)


def draw_values(dtype: np.dtype, shape: tuple[int, ...], kind: str, rng: np.random.Generator) -> np.ndarray:
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    if dtype.kind in "iu":
        if kind == "edge":
            return edge_values(dtype, shape, rng)
        if kind == "exact":
            return rng.integers(0 if dtype.kind == "u" else -4, 9 if dtype.kind == "u" else 5, shape).astype(dtype)
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)
    if kind == "edge":
        return edge_values(dtype, shape, rng)
    if kind == "exact":
        return rng.integers(-4, 5, shape).astype(dtype)
    # Mixed magnitudes, about 1e-2 to 1e2, some integers among them.
    x = rng.uniform(-1, 1, shape) * 10.0 ** rng.uniform(-2, 2, shape)
    x = np.where(rng.random(shape) < 0.2, np.round(x), x)
    if kind == "special":
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])
        x = np.where(rng.random(shape) < 0.15, specials[rng.integers(0, len(specials), shape)], x)
    return as_dtype(x, dtype)


# ---- edge data: one pool per error class (conformance/classes.py) ----------------------


def _mixed(rng: np.random.Generator, n: int) -> np.ndarray:
    """Full-mantissa values of mixed magnitude: a*(1/b), x*rsqrt(x) and a
    truncating cast are wrong on most of them."""
    return rng.uniform(-1, 1, n) * 10.0 ** rng.uniform(-2, 2, n)


def _midpoints(to: str, rng: np.random.Generator, n: int, nudge: float = 0.0) -> np.ndarray:
    """Values halfway between two neighbours of `to` whose lower one (in
    magnitude) is even: nearest-even rounds toward zero, ties-away does not.
    `nudge` (relative, far below a float32 ulp) moves them off the tie, away
    from zero: rounded directly they go away from zero, rounded through
    float32 first (which lands on the tie) they go toward zero."""
    t = as_dtype(np.ldexp(1.0, rng.integers(-6, 7, n)) * rng.uniform(1, 2, n), DTYPES[to]).astype(np.float64)
    bits = finfo(DTYPES[to]).nmant
    _, e = np.frexp(t)
    step = np.ldexp(1.0, e - 1 - bits)  # the gap between neighbours at t
    t = np.where(np.mod(t / step, 2) == 1, t - step, t)  # even mantissa
    mid = (t + step / 2) * (1 + nudge)
    return np.where(rng.random(n) < 0.5, -mid, mid)


def _narrower(dtype: np.dtype) -> list[str]:
    bits = finfo(dtype).nmant
    return [d for d in ("f32", "f16", "bf16") if finfo(DTYPES[d]).nmant < bits]


def _float_pools(dtype: np.dtype, rng: np.random.Generator, n: int) -> list[np.ndarray]:
    info = finfo(dtype)
    ties = [_midpoints(to, rng, n) for to in _narrower(dtype)]  # a pool per narrower float
    if dtype == np.float64:  # f64 -> f16 rounded through f32 rounds twice; to bf16 it must (spec section 2)
        ties += [_midpoints(to, rng, n, nudge=2.0 ** -40) for to in ("f16", "bf16")]
    exp_arg = {5: 11.0, 11: 600.0}.get(info.nexp, 40.0)  # near the overflow of exp in f16 and f64
    signs = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    # 1 - k ulps for k from 17 on shows the cancellation beyond 4 ulps (bf16, with its 8 bits, up to 21 only).
    log_steps = rng.integers(17, 22 if info.nmant == 7 else 48, n)
    return [
        # Three pools of full-mantissa values: div, sqrt, mul and rounding casts need them paired.
        _mixed(rng, n), _mixed(rng, n), _mixed(rng, n), *ties,
        -(rng.integers(0, 100, n) + rng.choice([0.25, 0.5, 0.75, 0.375], n)),  # float -> int: toward zero
        signs * rng.choice([0.25, 0.5, 0.75], n),  # fractions: to bool is != 0, not through an integer
        signs * np.minimum(rng.choice([200.5, 4e4, 3e9, 1e19, 1e30], n), float(info.max)),  # beyond int ranges
        signs * rng.uniform(exp_arg / 4, exp_arg, n),  # exp of large arguments
        1 - log_steps * float(info.epsneg),  # log just below 1, where a range reduction cancels
        signs * float(info.tiny) * rng.uniform(0.01, 1.5, n),  # subnormals, flushed by -ftz
        np.full(n, np.nan),  # NaN, wherever it falls: a later block's too
        rng.choice([0.0, -0.0, np.inf, -np.inf], n),
    ]


def _integer_ties(bits: int, p: int, rng: np.random.Generator, n: int, nudge: bool = False) -> np.ndarray:
    """Integers of at most `bits` bits halfway between two neighbours of a float
    of `p` significant bits, or with `nudge` one past such a tie and so far from
    others that rounding through float32 (to bf16) or float64 (to f32) first
    lands on the tie. The lower neighbour's parity is drawn: an even one tells
    nearest-even from ties-away, an odd one (rounded away from zero) truncation."""
    via = {8: 24, 24: 53}.get(p, 0)
    least = via - p + 2 if nudge else 0  # the half-gap 2^s must exceed the intermediate's gap
    most = min(bits - p - 1, 5) if p == 11 else bits - p - 1  # f16 overflows past 65504
    s = rng.integers(least, most, n)
    tie = (np.int64(1) << (p + s)) + (rng.integers(0, 16, n) << (s + 1)) + (np.int64(1) << s)
    return (tie + (1 if nudge else 0)) * np.where(rng.random(n) < 0.5, -1, 1)


def _int_pools(dtype: np.dtype, rng: np.random.Generator, n: int) -> list[np.ndarray]:
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    signs = np.where(rng.random(n) < 0.5, -1, 1)
    bits = info.bits - (dtype.kind == "i")
    ties = [_integer_ties(bits, p, rng, n) for p in (11, 8, 24, 53) if p + 1 < bits]  # f16, bf16, f32, f64
    ties += [_integer_ties(bits, p, rng, n, nudge=True) for p, via in ((8, 24), (24, 53)) if bits > via + 2]
    return [
        rng.choice([lo, hi, lo + 1, hi - 1, 0, 1, hi // 2 + 1], n),  # the range's edges: wrap, not saturate
        rng.choice([128, 200, 255, 256, 300, 32768, 40000, 65536, 70000, 2 ** 31, 3 * 2 ** 31], n) * signs,
        *ties, rng.integers(-4, 5, n),
    ]


def edge_values(dtype: np.dtype, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """`edge` data: the pools dealt out in turn over the elements, in random order."""
    n = int(np.prod(shape))
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    pools = _float_pools(dtype, rng, n) if dtype.kind not in "iu" else _int_pools(dtype, rng, n)
    which = (np.arange(n) + rng.integers(len(pools))) % len(pools)
    rng.shuffle(which)
    flat = np.choose(which, [p.astype(np.float64) if dtype.kind not in "iu" else p.astype(np.int64)
                             for p in pools])
    if dtype.kind in "iu":
        return flat.astype(dtype).reshape(shape)  # wraps values beyond the dtype's range
    with np.errstate(all="ignore"):
        return as_dtype(flat, dtype).reshape(shape)


def random_view(rank: int, rng: np.random.Generator) -> View:
    """A third of the views are dense row-major; the rest anything."""
    if rank == 0 or rng.random() < 1 / 3:
        return View.dense(rank)
    return View(tuple(int(a) for a in rng.permutation(rank)), tuple(int(s) for s in rng.integers(1, 3, rank)),
                tuple(bool(f) for f in rng.integers(0, 2, rank)))


def place(x: np.ndarray, view: View) -> np.ndarray:
    """A view with `x`'s values, laid out in memory as `view` says."""
    if x.ndim == 0:
        return x.copy()
    base = np.full([x.shape[a] * view.step[a] for a in view.order], SENTINEL).astype(x.dtype)
    logical = base.transpose(np.argsort(view.order))
    index = tuple(slice(None, None, -s if f else s) for s, f in zip(view.step, view.flip))
    out = logical[index]
    out[...] = x
    return out


def make_inputs(params: list[tuple[str, TensorType]], bindings: Bindings,
                spec: DataSpec) -> dict[str, np.ndarray]:
    """Global inputs: fresh arrays, each a view as the spec says. The same
    spec and bindings give the same arrays on every rank."""
    rng = np.random.default_rng(spec.seed)
    views = dict(spec.views) if spec.views is not None else {}
    out = {}
    for name, t in params:
        values = draw_values(t.np_dtype, global_shape(t, bindings), spec.kind, rng)
        if t.partial_kind == "avg":
            values = avg_room(values, prod(t.mesh.size(d) for d in t.partial))
        view = views.get(name) if spec.views is not None else random_view(t.rank, rng)
        out[name] = place(values, view or View.dense(t.rank))
    return out


def avg_room(x: np.ndarray, n: int) -> np.ndarray:
    """An avg-partial input's terms sum to n times its value (refir/running/partial_inputs.py),
    so a finite value whose n-fold overflows (edge data's 4e4 in f16, over 4) has none: it
    is divided by n, and the input stays as near the edge as terms allow."""
    with np.errstate(all="ignore"):
        far = np.isfinite(x) & ~np.isfinite((x * x.dtype.type(n)).astype(x.dtype))
        return np.where(far, (x / x.dtype.type(n)).astype(x.dtype), x) if far.any() else x


def snapshot(inputs: dict[str, np.ndarray]) -> dict[str, bytes]:
    """The exact bits of every input, to prove later that no backend wrote to them."""
    return {k: v.tobytes() for k, v in inputs.items()}


def changed(inputs: dict[str, np.ndarray], before: dict[str, bytes]) -> list[str]:
    return [k for k, v in inputs.items() if v.tobytes() != before[k]]
