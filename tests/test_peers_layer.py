"""Issue 27's layer ops against torch DTensor (conformance/peers/layer_ops.py): select, pad,
expand, a causal mask (iota, ge, where), the comparisons, where, the unary ops within
num_c7's ulps, and matmul of a 3-D by a 2-D operand; each with teeth (a planted bug caught)."""

import importlib.util
import inspect
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from conformance.peers import layer_ops, load_peer, refir_side
from conformance.peers.block_compare import _same
from conformance.peers.known import placement_differences
from conformance.peers.spec import Block, PeerCase, expected, group_inputs
from conformance.peers.sweep import check, differences, drawn
from refir.frontends.dtensor import Partial, Replicate, Shard
from refir.ir.types import BF16

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed: pip install 'refir[peers]'")
R, S0, S1, S2 = Replicate(), Shard(0), Shard(1), Shard(2)


def op(name, shape, params=(), src=(R, R), other=(), third=(), dst=(R, R), **kw) -> PeerCase:
    base = dict(kind="op", root=(2, 2), view="root", dims=(0, 1), dtype="f32", shape=shape, src=src, dst=dst,
                op=name, other=other, third=third, params=params, seed=5)
    base.update(kw)
    return PeerCase(**base)


ONE_D = dict(root=(3,), dims=(0,))
CASES = [
    # select: a sharded axis (5 rows over 2: 3, 2; the result replicated there), an unsharded one of a sharded x
    op("select", (3,), (0, 4, 5), src=(S0, R), dst=(R, S0)),
    op("select", (5,), (1, 2, 3), src=(S0, S1), dst=(S0, R), dtype="i32"),
    op("select", (2, 4), (2, 0, 3), src=(R,), dst=(S1,), dtype="bf16", **ONE_D),
    # pad: widths on a sharded axis (re-cut), on an unsharded one (local), 0 to 2 each side, value 5 or -3
    op("pad", (8, 3), (1, 1, 2, 0, 0), src=(S0, S1), dst=(S0, R)),
    op("pad", (4, 7), (2, 0, 0, 2, 2), src=(S1, R), dst=(R, S1), dtype="i64"),
    op("pad", (7,), (1, 2, 0), src=(S0,), dst=(S0,), dtype="f16", **ONE_D),
    # expand a size-1 axis to 4 or 0, other axes sharded (uneven)
    op("expand", (4, 5), (0,), src=(S1, R), dst=(S0, S1)),
    op("expand", (3, 0), (1,), src=(S0,), dst=(S0,), dtype="i32", **ONE_D),
    op("expand", (2, 4, 3), (1,), src=(S2, S0), dst=(R, S1), dtype="bf16"),
    # the causal mask where(iota(-2) >= iota(-1), x, -inf): rows, columns, a batch sharded
    op("causal", (5, 5), src=(S0, S1), dst=(R, S0)),
    op("causal", (2, 7, 4), src=(S0, S1), dst=(S1, R), dtype="i32"),
    op("causal", (6, 6), src=(S1,), dst=(S0,), dtype="bf16", **ONE_D),
    # every comparison, operands placed apart (NaN and -0.0 among the floats)
    *(op("compare", (5, 3), (k,), src=(S0, R), other=(R, S1), dst=(S1, R), dtype=d)
      for k, d in zip(range(6), ("f32", "bf16", "i32", "f16", "f64", "i64"))),
    op("compare", (7,), (0,), src=(S0,), other=(R,), dst=(S0,), **ONE_D),
    # where: a bool condition and two values, three placements
    op("where", (5, 3), src=(S1, R), other=(S0, S1), third=(R, R), dst=(S0, R)),
    op("where", (4, 6), src=(S0,), other=(R,), third=(S1,), dst=(S0,), dtype="bf16", **ONE_D),
    # every unary op, in f32, bf16, f16 and f64, within PEER_ULPS
    *(op("unary", (9, 5), (k,), src=(S0, S1), dst=(R, S0), dtype=d)
      for k in range(6) for d in ("f32", "bf16", "f16", "f64")),
    # a 3-D by a 2-D operand and a 2-D by a 3-D one: K sharded alike (partial sums), M, N, the batch
    op("bmatmul", (2, 5, 3), (0, 4), src=(R, S2), other=(R, S0), dst=(S0, R)),
    op("bmatmul", (3, 5, 4), (0, 6), src=(S1, R), other=(R, S1), dst=(R, S2), dtype="bf16"),
    op("bmatmul", (4, 3, 7), (1, 5), src=(S0, R), other=(S2, S0), dst=(S2, S0), dtype="i32"),
    op("bmatmul", (5, 2, 3), (1, 3), src=(S1,), other=(S1,), dst=(S0,), **ONE_D),
]


@needs_torch
@pytest.mark.parametrize("c", CASES, ids=lambda c: c.label())
def test_dtensor_agrees_with_refir_on_layer_ops(c):
    o = check(load_peer("dtensor"), c)
    assert o.status == "agree", o.problems
    assert not o.placement or "new:" not in o.placement, o.placement


@needs_torch
def test_drawn_layer_cases_of_every_op_agree_or_are_known():
    """Seed 0's first two cases of each layer op (a draw the sweep makes)."""
    peer = load_peer("dtensor")
    seen: dict[str, int] = {}
    i = 0
    while min(seen.get(o, 0) for o in layer_ops.LAYER_OPS) < 2 and i < 2000:
        c = drawn(peer, 0, i)
        i += 1
        if c.op not in layer_ops.LAYER_OPS or seen.get(c.op, 0) >= 2:
            continue
        seen[c.op] = seen.get(c.op, 0) + 1
        o = check(peer, c)
        assert o.status == "agree" or o.triage.startswith("peer-bug:"), (c.label(), o.problems)
    assert min(seen.values()) == 2 and set(seen) == set(layer_ops.LAYER_OPS)


def test_the_torch_side_names_kinds_in_refir_order():
    """torch_op is standalone (the reproducers carry it): its tables are refir's, in order."""
    source = inspect.getsource(layer_ops.torch_op)
    def written(t):
        return repr(tuple(t)).replace("'", '"')

    assert written(layer_ops.COMPARES) in source and written(layer_ops.UNARIES) in source
    assert repr(layer_ops.PAD_VALUES) in source and str(layer_ops.INT_FILL) in source


def test_peer_ulps_follow_num_c7():
    assert layer_ops.PEER_ULPS == {"tanh": 9, "erf": 9, "sin": 9, "cos": 9, "sigmoid": 13, "rsqrt": 3}
    one = np.float32(1.0)
    eps = float(np.finfo(np.float32).eps)
    for k, inside in ((9, True), (10, False)):  # 9.5 eps apart: within 10 ulps, not within 9
        a = np.array([one, np.nan, -np.inf], np.float32)
        b = np.array([one + np.float32(9.5 * eps) * one, np.nan, -np.inf], np.float32)
        assert _same(a, b, k) is not inside
    assert not _same(np.array([np.inf], np.float32), np.array([np.finfo(np.float32).max], np.float32), 9)
    assert not _same(np.array([1.0], np.float32), np.array([1.0 + 9.5 * eps], np.float32), 0)  # exact ops
    h = np.array([1.0, 2.0], BF16)
    assert _same(h, np.array([1.0078125, 2.0], BF16), 1) and not _same(h, np.array([1.0234375, 2.0], BF16), 1)


def test_placement_differences_are_named():
    assert placement_differences((R, S0), (S0, S0)) == ["dtensor-replicates"]
    assert placement_differences((Partial("sum"), S1), (R, S0)) == ["dtensor-leaves-partial", "shards-another-dim"]
    assert placement_differences((S0,), (S0,)) == []


@needs_torch
def test_an_off_by_one_select_on_refir_side_is_caught(monkeypatch):
    real = layer_ops._apply

    def shifted(op, shape, params, args, dtype):
        if op == "select":
            axis, index, full = params
            params = (axis, (index + 1) % full, full)
        return real(op, shape, params, args, dtype)

    monkeypatch.setattr(layer_ops, "_apply", shifted)
    c = CASES[0]
    o = check(load_peer("dtensor"), c)
    assert o.status == "differ" and o.triage == "refir" and "values" in o.problems[0], o.problems
    monkeypatch.undo()
    assert check(load_peer("dtensor"), c).status == "agree"


@needs_torch
@pytest.mark.parametrize("planted, kind", [("sigmoid", 3), ("erf", 0)])
def test_a_wrong_unary_on_refir_side_is_caught_past_the_ulps(monkeypatch, planted, kind):
    """refir's tanh as erf, its rsqrt as sigmoid: farther than PEER_ULPS."""
    real = layer_ops._apply

    def other(op, shape, params, args, dtype):
        if op == "unary":
            params = (layer_ops.UNARIES.index(planted),)
        return real(op, shape, params, args, dtype)

    monkeypatch.setattr(layer_ops, "_apply", other)
    o = check(load_peer("dtensor"), op("unary", (9, 5), (kind,), src=(S0, S1), dst=(R, S0)))
    assert o.status == "differ" and o.triage == "refir", o.problems


@needs_torch
def test_a_peer_pad_in_the_wrong_axis_order_is_caught(monkeypatch):
    """torch's pad widths name the last dim first; a peer that forgets it pads the wrong axes."""
    real = layer_ops.torch_op

    def unreversed(name, params, shape, args):
        if name != "pad":
            return real(name, params, shape, args)
        import torch

        value, *widths = params
        return torch.nn.functional.pad(args[0], list(widths), value=layer_ops.PAD_VALUES[value])

    monkeypatch.setattr(layer_ops, "torch_op", unreversed)
    o = check(load_peer("dtensor"), CASES[4])
    assert o.status == "differ" and o.triage == "peer", o.problems


@needs_torch
@pytest.mark.parametrize("c, name", [
    (op("expand", (3,), (0,), src=(S0,), dst=(R,), **ONE_D), "dtensor-expand-sharded-unit-dim"),
    (op("bmatmul", (8, 1, 6), (0, 1), src=(R, S2), other=(R, R), dst=(R, R), root=(1, 4)),
     "dtensor-matmul-fold-refused"),  # K = M = 1, K sharded: the view drops the sharded 1
    (op("bmatmul", (5, 4, 2), (0, 3), src=(S0,), other=(R,), dst=(R,), **ONE_D),
     "dtensor-matmul-fold-refused"),  # 5 batches over 3: the view flattens an uneven shard
    (op("bmatmul", (1, 3, 2), (0, 2), src=(S0,), other=(R,), dst=(R,), root=(4,), dims=(0,)),
     "dtensor-matmul-fold-refused"),  # one batch over 4 ranks
], ids=lambda v: v if isinstance(v, str) else v.label())
def test_dtensor_refusals_are_known_and_refir_is_right(c, name):
    o = check(load_peer("dtensor"), c)
    assert o.triage == f"peer-bug:{name}", o.problems
    assert differences(refir_side.run(c), expected(c), "refir", "meaning") == []


@needs_torch
def test_layer_reproducers_pass_alone_and_fail_on_wrong_blocks(tmp_path):
    """The scripts carry the ulps (unary) and NaN (compare) rules: true blocks pass, shifted ones fail."""
    from conformance.peers.scripts import dtensor_script

    unary = op("unary", (9, 5), (0,), src=(S0, S1), dst=(R, S0), dtype="bf16")
    compare = CASES[12]
    for c, shift, rc in ((unary, 0, 0), (unary, 0.25, 1), (compare, 0, 0)):
        inputs = [group_inputs(c, g) for g in range(len(c.groups()))]
        want = expected(c) if not shift else {r: Block(b.offset, (b.values.astype(np.float64) + shift).astype(
            b.values.dtype)) for r, b in expected(c).items()}
        path = tmp_path / f"{c.op}{rc}.py"
        path.write_text(dtensor_script(c, inputs, want))
        done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True)
        assert done.returncode == rc, done.stdout + done.stderr


def test_compare_and_where_data_hold_nan_and_signed_zeros():
    c = replace(CASES[12], shape=(8, 8))
    x = group_inputs(c, 0)["x"]
    assert np.isnan(x).any() and (np.signbit(x) & (x == 0)).any()
    k = group_inputs(replace(CASES[19], shape=(8, 8)), 0)["k"]
    assert k.dtype == bool and k.any() and not k.all()


needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                               reason="jax is not installed: pip install 'refir[peers]'")


@needs_jax
def test_jax_layer_cases_are_even_and_agree():
    """The JAX sweep draws the exact layer ops last (even shards, extents from 1): each of
    seed 0's first ones agrees with refir, and a planted off-by-one select on JAX's side is caught."""
    from conformance.peers import jax_peer

    peer = load_peer("jax")
    seen: dict[str, PeerCase] = {}
    for i in range(300):
        c = drawn(peer, 0, i)
        if c.kind == "op" and c.op not in seen:
            seen[c.op] = c
    assert set(seen) == set(jax_peer.LAYER_OPS)
    for c in seen.values():
        for (_, shape, ps) in [*c.operands(), ("y", c.shape, c.dst)]:
            assert all(shape[p.dim] % c.view_shape[i] == 0 and shape[p.dim] > 0
                       for i, p in enumerate(ps) if isinstance(p, Shard))
        o = check(peer, c)
        assert o.status == "agree", (c.label(), o.problems)
    select = replace(seen["select"], params=(0, 0, 2), shape=(4,), src=(R, S0, R), dst=(R, R, R),
                     root=(2, 2, 2), dims=(0, 1, 2))
    assert check(peer, select).status == "agree"
    real = jax_peer.jnp_op

    def shifted(name, params, shape, args):
        return real(name, [params[0], params[1] + 1, params[2]] if name == "select" else params, shape, args)

    import unittest.mock

    with unittest.mock.patch.object(jax_peer, "jnp_op", shifted):
        o = check(peer, select)
    assert o.status == "differ" and o.triage == "peer", o.problems
