"""A peer case and its refir side.

A case is drawn from a stream of draws (conformance.generate's Chooser over a
RandomDraw or ReplayDraw), so conformance.shrink shrinks it like a generated
program. It names a root mesh of 2 to 8 ranks (1-D to 3-D, DTensor's row-major
rank order, dims named a, b, c), the view of it the case runs on (the root, a
submesh sliced by names, or named dims flattened into one), and either a
resharding (source and target placements, DTensor's vocabulary: refir.frontends.dtensor)
or an op DTensor shards by its own rules (add, mul, matmul, sum, max).

A view other than the root splits the ranks into groups, one submesh each; each
group gets data of its own, so a peer that mixes groups up shows it. On refir's
side a group is a refir mesh of those device ids, and the case's program
(refir.frontends.dtensor.redistribute_program, or the op built with refir.frontends.builder) runs on
spmd once per group.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import product
from math import prod

import numpy as np

from conformance.generate import Chooser
from conformance.peers import layer_ops, partial_draws, shape_ops
from refir.frontends.dtensor import Partial, Placement, Replicate, Shard, StridedShard, contributions_type, to_refir
from refir.ir.types import DTYPES, Mesh, TensorType, block_index, block_slices

NAMES = ("a", "b", "c")
ROOTS = {1: ((2,), (4,), (3,), (8,), (5,), (6,), (7,)),
         2: ((2, 2), (1, 2), (2, 1), (2, 3), (3, 2), (2, 4), (4, 2), (1, 4)),
         3: ((2, 2, 2), (1, 2, 2), (2, 1, 2), (2, 2, 1), (1, 2, 3), (2, 1, 3))}
OPS = ("add", "mul", "matmul", "sum", "max", *shape_ops.SHAPE_OPS)
LAYER_PERCENT = 50  # of the op cases, those that become a layer op (conformance/peers/layer_ops.py)
PARTIAL_OPS = ("sum", "max", "min")


@dataclass(frozen=True)
class Block:
    offset: tuple[int, ...]  # global index of the block's first element
    values: np.ndarray


Blocks = dict[int, Block]  # rank -> its block of the result


@dataclass(frozen=True)
class PeerResult:
    blocks: Blocks  # at the case's target placements
    own: tuple[Placement, ...] | None = None  # op: the placements the peer chose for the result
    own_blocks: Blocks | None = None  # ... and its blocks there (None when partial)


@dataclass(frozen=True)
class PeerCase:
    kind: str  # reshard, op (DTensor's own sharding rules) or collective (JAX's shard_map)
    root: tuple[int, ...]  # the root mesh's shape; dims named a, b, c
    view: str  # root, slice or flatten
    dims: tuple[int, ...]  # the root dims the view keeps (slice) or flattens (flatten)
    dtype: str
    shape: tuple[int, ...]  # global shape of the result (reshard: of the value)
    src: tuple[Placement, ...]  # reshard: the source; op: x's placements
    dst: tuple[Placement, ...]  # the result's placements (op: where the result is compared)
    op: str = ""
    other: tuple[Placement, ...] = ()  # op: the second operand's placements
    inner: int = 0  # matmul: K; sum/max: the reduced extent
    axis: int = 0  # sum/max: the reduced axis of x
    params: tuple[int, ...] = ()  # a shape or layer op's parameters (conformance/peers/shape_ops.py, layer_ops.py)
    seed: int = 0
    choices: tuple[int, ...] = ()
    third: tuple[Placement, ...] = ()  # a layer op's third operand's placements (where: k, x, w)

    @property
    def world(self) -> int:
        return prod(self.root)

    @property
    def view_shape(self) -> tuple[int, ...]:
        kept = tuple(self.root[d] for d in self.dims)
        return (prod(kept),) if self.view == "flatten" else kept

    def groups(self) -> list[tuple[int, ...]]:
        """The ranks of each submesh, in the view's row-major order."""
        if self.view == "root":
            return [tuple(range(self.world))]
        ranks = np.arange(self.world).reshape(self.root)
        rest = [d for d in range(len(self.root)) if d not in self.dims]
        moved = ranks.transpose(rest + list(self.dims)).reshape(-1, prod(self.root[d] for d in self.dims))
        return [tuple(int(r) for r in row) for row in moved]

    def mesh(self, group: tuple[int, ...]) -> Mesh:
        return Mesh("m", self.view_shape, group)

    def operands(self) -> list[tuple[str, tuple[int, ...], tuple[Placement, ...]]]:
        """The inputs: (name, global shape, placements). A partial source enters
        as its contributions (refir.frontends.dtensor.contributions_type)."""
        if self.kind != "op":
            return [("x", self.shape, self.src)]
        if self.op in shape_ops.SHAPE_OPS:
            return shape_ops.operands(self.op, self.shape, self.params, self.src, self.other)
        if self.op in layer_ops.LAYER_OPS:
            return layer_ops.operands(self.op, self.shape, self.params, [self.src, self.other, self.third])
        if self.op in ("add", "mul"):
            return [("x", self.shape, self.src), ("w", self.shape, self.other)]
        if self.op == "matmul":
            (m, n) = self.shape
            return [("x", (m, self.inner), self.src), ("w", (self.inner, n), self.other)]
        x = self.shape[:self.axis] + (self.inner,) + self.shape[self.axis:]
        return [("x", x, self.src)]

    def operand_dtype(self, name: str) -> str:
        return layer_ops.operand_dtype(self.op, name, self.dtype) if self.kind == "op" else self.dtype

    @property
    def out_dtype(self) -> str:
        """The result's dtype: the operands' but a comparison's (bool)."""
        return layer_ops.result_dtype(self.op, self.dtype) if self.kind == "op" else self.dtype

    def label(self) -> str:
        view = "" if self.view == "root" else f" {self.view}({','.join(NAMES[d] for d in self.dims)})"
        what = (f"{_pl(self.src)} -> {_pl(self.dst)}" if self.kind != "op" else
                f"{self.op_name}({', '.join(_pl(p) for _, _, p in self.operands())}) -> {_pl(self.dst)}")
        return f"{self.kind} {'x'.join(map(str, self.root))}{view} {self.dtype}{list(self.shape)} {what}"

    @property
    def ulps(self) -> int:
        """How many ulps the sides may differ by, per element (layer_ops.PEER_ULPS; 0: bit for bit)."""
        return layer_ops.tolerance(self.op, self.params) if self.op in layer_ops.LAYER_OPS else 0

    @property
    def op_name(self) -> str:
        """The op, a comparison or unary op by its kind (compare.lt, unary.tanh)."""
        kinds = {"compare": layer_ops.COMPARES, "unary": layer_ops.UNARIES}.get(self.op)
        return f"{self.op}.{kinds[self.params[0]]}" if kinds else self.op


def _pl(ps: tuple[Placement, ...]) -> str:
    return "[" + ",".join("R" if isinstance(p, Replicate) else f"S{p.dim}" if isinstance(p, Shard)
                          else f"_S({p.dim},{p.split_factor})" if isinstance(p, StridedShard)
                          else f"P({p.op})" for p in ps) + "]"


# ---- drawing ----------------------------------------------------------------------------

def draw_case(c: Chooser, peer: object) -> PeerCase:
    """A case the peer can run; draw 0 is always the simplest choice."""
    kind = peer.KINDS[c.below(len(peer.KINDS))]
    root = c.pick(ROOTS[1 + c.below(3)])
    view, dims = "root", tuple(range(len(root)))
    features = [f for f in peer.FEATURES if f == "root" or len(root) > 1]
    view = c.pick(features)
    if view != "root":
        least = 1 if view == "slice" else 2
        subsets = [s for n in range(least, len(root) + 1) for s in _subsets(len(root), n)]
        dims = c.pick(subsets)
    dtype = c.pick(peer.DTYPES)
    ndim_view = len(dims) if view == "slice" else 1 if view == "flatten" else len(root)
    sizes = tuple(root[d] for d in dims) if view == "slice" else (prod(root[d] for d in dims),) \
        if view == "flatten" else root
    seed = c.below(1000)
    if kind == "op":
        case = _draw_op(c, peer, root, view, dims, dtype, sizes, seed)
        # drawn last, so that every case it leaves is the case it was: issue 27's layer ops
        return _draw_layer(c, root, view, dims, dtype, sizes, seed) if c.maybe(LAYER_PERCENT) else case
    rank = 1 + c.below(3)
    partial = c.maybe(30)
    pop = c.pick(PARTIAL_OPS) if partial else "sum"
    if kind == "collective":
        src, dst = _one_step(c, rank, ndim_view, partial, pop)
    else:
        src = _placements(c, rank, ndim_view, partial, pop)
        dst = _placements(c, rank, ndim_view, False, pop)
    shape = _extents(c, rank, sizes, (src, dst), peer.EVEN_ONLY)
    if kind == "reshard" and getattr(peer, "NESTS", False) and ndim_view > 1 and c.maybe(30):
        src, dst = _nested(c, rank, ndim_view, src, dst)  # drawn last: the cases without a nest stay as they were
    if kind == "reshard" and getattr(peer, "STRIDED", False) and c.maybe(25):
        src, dst = _strided(c, rank, ndim_view, src, dst)  # drawn after the nest: cases without one stay too
    if kind == "reshard" and getattr(peer, "PARTIAL_TARGETS", False):  # drawn after those: partial_draws
        src, dst = partial_draws.draw(c, sizes, dtype, src, dst)
    if getattr(peer, "LAYER_OPS", ()) and c.maybe(LAYER_PERCENT // 2):  # likewise: a layer op, even (JAX)
        return _even(_draw_layer(c, root, view, dims, dtype, sizes, seed, peer.LAYER_OPS, least=1))
    return PeerCase(kind, root, view, dims, dtype, shape, src, dst, seed=seed)


def _nested(c: Chooser, rank: int, n: int, src: tuple[Placement, ...],
            dst: tuple[Placement, ...]) -> tuple[tuple[Placement, ...], tuple[Placement, ...]]:
    """The source or the target with one tensor dim on two mesh dims (a nest): Shard(d) on i and j."""
    side = c.below(2)
    ps = list((src, dst)[side])
    i = c.below(n)
    j = (i + 1 + c.below(n - 1)) % n
    ps[i] = ps[j] = Shard(c.below(rank))
    return (tuple(ps), dst) if side == 0 else (src, tuple(ps))


def _strided(c: Chooser, rank: int, n: int, src: tuple[Placement, ...],
             dst: tuple[Placement, ...]) -> tuple[tuple[Placement, ...], tuple[Placement, ...]]:
    """The source, the target or both with a `_StridedShard(d, sf)` (sf 2 or 3, §3.4) on one mesh
    dim: alone, or with Shard(d) or another _StridedShard(d) on another (FSDP2 over TP:
    `[_StridedShard(0, sf=2), Shard(0)]`); any other mesh dim that held d is freed."""
    sides = [list(src), list(dst)]
    for side in ((0,), (1,), (0, 1))[c.below(3)]:
        ps = sides[side]
        form = c.below(3) if n > 1 else 0  # alone, with Shard, with another _StridedShard
        i, d = c.below(n), c.below(rank)
        for k, p in enumerate(ps):
            if isinstance(p, (Shard, StridedShard)) and p.dim == d:
                ps[k] = Replicate()
        ps[i] = StridedShard(d, 2 + c.below(2))
        if form:
            j = (i + 1 + c.below(n - 1)) % n
            ps[j] = Shard(d) if form == 1 else StridedShard(d, 2 + c.below(2))
    return tuple(sides[0]), tuple(sides[1])


def _subsets(n: int, k: int) -> list[tuple[int, ...]]:
    return [s for s in product(range(n), repeat=k) if list(s) == sorted(set(s))]


def _placements(c: Chooser, rank: int, n: int, partial: bool, pop: str) -> tuple[Placement, ...]:
    """One per mesh dim; a tensor dim sharded on one mesh dim at most (refir's rule)."""
    out: list[Placement] = []
    for _ in range(n):
        free = [d for d in range(rank) if Shard(d) not in out]
        options: list[Placement] = [Replicate(), *(Shard(d) for d in free)] + ([Partial(pop)] if partial else [])
        out.append(c.pick(options))
    return tuple(out)


def _one_step(c: Chooser, rank: int, n: int, partial: bool,
              pop: str) -> tuple[tuple[Placement, ...], tuple[Placement, ...]]:
    """Placements that differ on one mesh dim: one collective (all_gather,
    all_to_all, psum / pmax / pmin, psum_scatter) or a local slice."""
    src = list(_placements(c, rank, n, False, pop))
    i = c.below(n)
    if partial:
        src[i] = Partial(pop)
    others = {p.dim for j, p in enumerate(src) if j != i and isinstance(p, Shard)}
    options: list[Placement] = [p for p in (Replicate(), *(Shard(d) for d in range(rank) if d not in others))
                                if p != src[i]]
    dst = list(src)
    if not options:  # src[i] is whole and every tensor dim is sharded elsewhere: gather one of those
        i = next(j for j, p in enumerate(src) if isinstance(p, Shard))
        options = [Replicate()]
    dst[i] = c.pick(options)
    return tuple(src), tuple(dst)


def _extents(c: Chooser, rank: int, sizes: tuple[int, ...], placed: tuple[tuple[Placement, ...], ...],
             even: bool, room: int = 64) -> tuple[int, ...]:
    """Extents 0 to 8 (uneven ones too), or multiples of what shards them."""
    out = []
    for d in range(rank):
        unit = np.lcm.reduce([1] + [sizes[i] for ps in placed for i, p in enumerate(ps) if p == Shard(d)])
        options = [int(unit) * k for k in (1, 2, 3) if unit * k <= 8] or [int(unit)] if even else \
            [e for e in (2, 4, 3, 1, 5, 0, 6, 7, 8) if e <= max(room, 1)]
        e = c.pick(options)
        room //= max(e, 1)
        out.append(e)
    return tuple(out)


def _draw_op(c: Chooser, peer: object, root: tuple[int, ...], view: str, dims: tuple[int, ...], dtype: str,
             sizes: tuple[int, ...], seed: int) -> PeerCase:
    op = c.pick(OPS)
    n = len(sizes)
    if op in ("sum", "max") and dtype not in ("f32", "f64", "f16", "bf16"):
        dtype = "f32"  # torch sums integers to int64: a convention (docs/peers.md), not drawn
    if op == "matmul":
        x, y, out = (_placements(c, 2, n, False, "sum") for _ in range(3))
        m, k, nn = _extents(c, 3, sizes, (), False, 48)
        return PeerCase("op", root, view, dims, dtype, (m, nn), x, out, op, y, inner=k, seed=seed)
    if op in shape_ops.SHAPE_OPS:
        shape, params = shape_ops.draw(c, op, lambda k: _extents(c, k, sizes, (), False))
        case = PeerCase("op", root, view, dims, dtype, shape, (), (), op, params=params, seed=seed)
        ranks = [len(s) for _, s, _ in case.operands()]
        x, w = (_placements(c, k, n, False, "sum") for k in (ranks[0], ranks[-1]))
        out = _placements(c, len(shape), n, False, "sum")
        return PeerCase("op", root, view, dims, dtype, shape, x, out, op, w if len(ranks) > 1 else (),
                        params=params, seed=seed)
    rank = 1 + c.below(3)
    if op in ("add", "mul"):
        x, y, out = (_placements(c, rank, n, False, "sum") for _ in range(3))
        shape = _extents(c, rank, sizes, (), False)
        return PeerCase("op", root, view, dims, dtype, shape, x, out, op, y, seed=seed)
    x = _placements(c, rank, n, False, "sum")
    axis = c.below(rank)
    out = _placements(c, rank - 1, n, False, "sum")
    full = list(_extents(c, rank, sizes, (), False))
    if op == "max":
        full[axis] = max(full[axis], 1)  # a max over nothing is an error on both sides
    full = tuple(full)
    return PeerCase("op", root, view, dims, dtype, full[:axis] + full[axis + 1:], x, out, op,
                    inner=full[axis], axis=axis, seed=seed)


def _draw_layer(c: Chooser, root: tuple[int, ...], view: str, dims: tuple[int, ...], dtype: str,
                sizes: tuple[int, ...], seed: int, among: tuple[str, ...] = layer_ops.LAYER_OPS,
                least: int = 0) -> PeerCase:
    """A layer op: each operand's placements drawn as a shape op's are, and the target's;
    extents from `least` (JAX gives every device the whole of an empty array: from 1)."""
    op = c.pick(among)
    shape, params = layer_ops.draw(c, op, lambda k: tuple(max(e, least) for e in _extents(c, k, sizes, (), False)))
    n = len(sizes)
    placed = [_placements(c, len(s), n, False, "sum") for _, s in layer_ops.operand_shapes(op, shape, params)]
    out = _placements(c, len(shape), n, False, "sum")
    src, other, third = (placed + [(), ()])[:3]
    return PeerCase("op", root, view, dims, layer_ops.dtype_for(op, dtype), shape, src, out, op, other,
                    params=params, seed=seed, third=third)


def _even(case: PeerCase) -> PeerCase:
    """The case with every shard that does not divide its extent replicated (JAX's rule)."""
    def fit(ps: tuple[Placement, ...], shape: tuple[int, ...]) -> tuple[Placement, ...]:
        return tuple(Replicate() if isinstance(p, Shard) and shape[p.dim] % case.view_shape[i] else p
                     for i, p in enumerate(ps))

    shapes = [s for _, s, _ in case.operands()] + [(), (), ()]
    return replace(case, src=fit(case.src, shapes[0]), other=fit(case.other, shapes[1]),
                   third=fit(case.third, shapes[2]), dst=fit(case.dst, case.shape))


# ---- data, meaning and refir's side ---------------------------------------------------------

def group_inputs(case: PeerCase, g: int) -> dict[str, np.ndarray]:
    """Group g's global inputs (small integers: every dtype and reduction is exact);
    a partial source as its contributions, `x_parts`."""
    rng = np.random.default_rng([case.seed, g])
    dt = DTYPES[case.dtype]
    out = {}
    for name, shape, ps in case.operands():
        if any(isinstance(p, Partial) for p in ps):
            t = to_refir(shape, case.mesh(case.groups()[g]), ps, case.dtype)
            lead = tuple(int(a.extent) for a in contributions_type(t).axes)
            out[f"{name}_parts"] = rng.integers(-4, 5, lead).astype(dt)
        elif case.op in layer_ops.LAYER_OPS:
            out[name] = layer_ops.data(case.op, name, shape, case.dtype, rng)
        else:
            out[name] = rng.integers(-4, 5, shape).astype(dt)
    return out


def meaning(case: PeerCase, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The result's global value, by numpy (in float64 where it reduces, then cast)."""
    dt = DTYPES[case.dtype]
    if case.kind != "op":
        if "x" in inputs:
            return inputs["x"]
        (_, _, ps) = case.operands()[0]
        k = sum(isinstance(p, Partial) for p in ps)
        fold = {"sum": np.sum, "max": np.max, "min": np.min, "avg": np.mean}[_partial_op(ps)]
        return fold(inputs["x_parts"].astype(np.float64), axis=tuple(range(k))).astype(dt)
    if case.op in shape_ops.SHAPE_OPS:
        return shape_ops.meaning(case.op, case.shape, case.params, inputs)
    if case.op in layer_ops.LAYER_OPS:
        return layer_ops.meaning(case.op, case.shape, case.params, inputs)
    x = inputs["x"].astype(np.float64)
    if case.op == "add":
        v = x + inputs["w"].astype(np.float64)
    elif case.op == "mul":
        v = x * inputs["w"].astype(np.float64)
    elif case.op == "matmul":
        v = x @ inputs["w"].astype(np.float64)
    else:
        v = (np.sum if case.op == "sum" else np.max)(x, axis=case.axis) if x.shape[case.axis] else \
            np.zeros(case.shape) if case.op == "sum" else np.full(case.shape, -np.inf)
    return v.astype(dt)


def _partial_op(ps: tuple[Placement, ...]) -> str:
    return next(p.op for p in ps if isinstance(p, Partial))


def result_type(case: PeerCase, mesh: Mesh) -> TensorType:
    return to_refir(case.shape, mesh, case.dst, case.out_dtype)


def expected(case: PeerCase) -> Blocks:
    """Every rank's block of the meaning: what both sides must return."""
    out: Blocks = {}
    for g, group in enumerate(case.groups()):
        value = meaning(case, group_inputs(case, g))
        t = result_type(case, case.mesh(group))
        for r in group:
            out[r] = block_of(t, value, r)
    return out


def block_of(t: TensorType, value: np.ndarray, device: int) -> Block:
    """The device's block; of an interleaved axis (§3.4) its runs joined."""
    return Block(block_offset(t, device, value.shape), value[block_index(t, device, value.shape)])


def block_offset(t: TensorType, device: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Where the device's block starts; of an interleaved axis, where its first run does."""
    if t.interleaved():
        return tuple(int(i.ravel()[0]) if i.size else 0 for i in block_index(t, device, shape))
    return tuple(s.indices(n)[0] for s, n in zip(block_slices(t, device, shape), shape))
