"""Input data for a case: values of one kind, handed over as strided views.

Kinds of values:
- `exact`: small integers (in floats too), so every order of summation gives
  the same bits and float results must be bit-exact;
- `float`: arbitrary floats of mixed magnitude; integers over their whole range;
- `special`: like `float`, with NaN, infinities and signed zeros sprinkled in.

Every input reaches the backend as a view of a larger buffer (DESIGN: inputs
may have any strides): its memory order permuted, gaps between elements, axes
reversed. The gaps hold a sentinel, so a backend that reads them shows it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

from refir.types import Bindings, TensorType, as_dtype, global_shape

KINDS = ("exact", "float", "special")
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
    view is drawn from the seed."""

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
        if kind == "exact":
            return rng.integers(0 if dtype.kind == "u" else -4, 9 if dtype.kind == "u" else 5, shape).astype(dtype)
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)
    if kind == "exact":
        return rng.integers(-4, 5, shape).astype(dtype)
    # Mixed magnitudes, about 1e-2 to 1e2, some integers among them.
    x = rng.uniform(-1, 1, shape) * 10.0 ** rng.uniform(-2, 2, shape)
    x = np.where(rng.random(shape) < 0.2, np.round(x), x)
    if kind == "special":
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])
        x = np.where(rng.random(shape) < 0.15, specials[rng.integers(0, len(specials), shape)], x)
    return as_dtype(x, dtype)


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
        view = views.get(name) if spec.views is not None else random_view(t.rank, rng)
        out[name] = place(values, view or View.dense(t.rank))
    return out


def snapshot(inputs: dict[str, np.ndarray]) -> dict[str, bytes]:
    """The exact bits of every input, to prove later that no backend wrote to them."""
    return {k: v.tobytes() for k, v in inputs.items()}


def changed(inputs: dict[str, np.ndarray], before: dict[str, bytes]) -> list[str]:
    return [k for k, v in inputs.items() if v.tobytes() != before[k]]
