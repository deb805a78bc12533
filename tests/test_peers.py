"""The peer layer: DTensor and JAX against refir's spmd, rank by rank (docs/peers.md).

The peers' tests skip, saying why, where torch or jax is not installed."""

import importlib.util
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from conformance.generate import Chooser
from conformance.peers import PeerMissing, load_peer, refir_side
from conformance.peers.spec import Block, PeerCase, draw_case, expected
from conformance.peers.sweep import check, differences, drawn
from conformance.shrink import RandomDraw
from refir.cli import main
from refir.frontends.dtensor import Partial, Replicate, Shard

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_JAX = importlib.util.find_spec("jax") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed: pip install 'refir[peers]'")
needs_jax = pytest.mark.skipif(not HAS_JAX, reason="jax is not installed: pip install 'refir[peers]'")


def case(**kw) -> PeerCase:
    base = dict(kind="reshard", root=(2, 2), view="root", dims=(0, 1), dtype="f32", shape=(5, 3),
                src=(Shard(0), Replicate()), dst=(Replicate(), Shard(1)), seed=3)
    base.update(kw)
    return PeerCase(**base)


def test_groups_of_a_submesh_and_a_flattened_mesh():
    c = case(root=(2, 2, 2), view="slice", dims=(0, 2))
    assert c.groups() == [(0, 1, 4, 5), (2, 3, 6, 7)] and c.view_shape == (2, 2)
    f = replace(c, view="flatten", dims=(1, 2))
    assert f.groups() == [(0, 1, 2, 3), (4, 5, 6, 7)] and f.view_shape == (4,)


def test_refir_side_gives_each_rank_its_uneven_block():
    c = case()
    got = refir_side.run(c)
    want = expected(c)
    assert differences(got, want, "refir", "meaning") == []
    assert got[1].offset == (0, 2) and got[1].values.shape == (5, 1)  # 3 columns over 2: blocks of 2 and 1


def test_differences_names_offset_shape_and_values():
    a = {0: Block((0,), np.arange(3.0))}
    assert differences(a, {0: Block((1,), np.arange(3.0))}, "p", "q") == ["rank 0: offset p [0], q [1]"]
    assert "block shape" in differences(a, {0: Block((0,), np.arange(2.0))}, "p", "q")[0]
    assert "values" in differences(a, {0: Block((0,), np.arange(3.0) + 1)}, "p", "q")[0]
    assert "no block" in differences(a, {}, "p", "q")[0]


def test_unknown_and_missing_peers_are_one_line(monkeypatch, capsys):
    assert main(["peer", "nope"]) == 2
    assert "unknown peer 'nope'" in capsys.readouterr().err
    import conformance.peers.jax_peer as jp

    monkeypatch.setattr(jp, "available", lambda: "jax is not importable (No module named 'jax')")
    with pytest.raises(PeerMissing, match=r"pip install 'refir\[peers\]'"):
        load_peer("jax")
    assert main(["peer", "jax", "--cases", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'refir[peers]'" in err


@needs_torch
@pytest.mark.parametrize("c", [
    case(),
    case(src=(Partial("sum"), Shard(1)), dst=(Shard(0), Replicate())),
    case(src=(Partial("max"), Partial("max")), dst=(Replicate(), Replicate()), shape=(3,)),
    case(root=(2, 2, 2), view="slice", dims=(0, 2), src=(Shard(1), Shard(0)), dst=(Shard(0), Shard(1))),
    case(root=(2, 3), view="flatten", dims=(0, 1), src=(Shard(0),), dst=(Shard(1),), shape=(7, 5)),
    case(kind="op", op="matmul", shape=(3, 5), src=(Replicate(), Shard(1)), other=(Replicate(), Shard(0)),
         dst=(Shard(0), Replicate()), inner=5, dtype="bf16"),
    case(kind="op", op="sum", shape=(4,), src=(Shard(1), Replicate()), dst=(Replicate(), Shard(0)), inner=3,
         axis=1, root=(2, 4)),
    # shape ops (conformance/peers/shape_ops.py): whole rows split locally; a merge of a sharded inner axis
    # (DTensor: _StridedShard, refir: set first); windows along a sharded axis; where of a comparison
    case(kind="op", op="reshape", root=(2,), dims=(0,), shape=(2, 2, 3), params=(4, 3), src=(Shard(0),),
         dst=(Shard(0),)),
    case(kind="op", op="reshape", root=(2,), dims=(0,), shape=(6, 7), params=(3, 2, 7), src=(Shard(1),),
         dst=(Replicate(),)),
    case(kind="op", op="slice", shape=(3, 3), params=(0, 1, 6, 2, 7), src=(Shard(0), Replicate()),
         dst=(Shard(0), Shard(1)), dtype="i32"),
    case(kind="op", op="cat", shape=(5, 4), params=(0, 3), src=(Replicate(), Shard(1)),
         other=(Shard(0), Replicate()), dst=(Shard(0), Replicate()), dtype="bf16"),
    case(kind="op", op="where_lt", shape=(5, 3), src=(Shard(0), Replicate()), other=(Replicate(), Shard(1)),
         dst=(Replicate(), Shard(1))),
    # one tensor dim on several mesh dims (refir's nests, spec §3.2), uneven: 5 rows over 2x2 nest into 2, 1, 1, 1
    case(src=(Shard(0), Shard(0)), dst=(Replicate(), Replicate())),
    case(src=(Shard(0), Shard(0)), dst=(Shard(0), Replicate())),
    case(src=(Shard(0), Shard(0)), dst=(Replicate(), Shard(0))),
    case(src=(Replicate(), Replicate()), dst=(Shard(0), Shard(0))),
    case(src=(Shard(1), Shard(0)), dst=(Shard(0), Shard(0))),
    case(src=(Shard(0), Shard(0)), dst=(Shard(1), Shard(1))),
    case(src=(Partial("sum"), Partial("sum")), dst=(Shard(0), Shard(0))),
    case(root=(2, 3), src=(Shard(0), Shard(0)), dst=(Replicate(), Shard(0)), shape=(7, 2)),
    case(root=(2, 2, 2), dims=(0, 1, 2), src=(Shard(0), Replicate(), Shard(0)), dst=(Shard(0), Shard(0), Shard(0)),
         shape=(7, 3)),
    case(root=(2, 2, 2), dims=(0, 1, 2), src=(Shard(0), Shard(0), Shard(0)), dst=(Replicate(), Shard(1), Replicate()),
         shape=(7, 3)),
    case(root=(2, 2, 2), view="slice", dims=(0, 2), src=(Shard(0), Shard(0)), dst=(Replicate(), Replicate())),
    case(kind="op", op="sum", shape=(4,), src=(Shard(1), Shard(1)), dst=(Replicate(), Replicate()), inner=7,
         axis=1),
], ids=lambda c: c.label())
def test_dtensor_agrees_with_refir(c):
    peer = load_peer("dtensor")
    o = check(peer, c)
    assert o.status == "agree", o.problems


@needs_torch
def test_dtensor_disagreement_is_seen_and_its_reproducer_fails_alone(tmp_path, monkeypatch):
    """A planted refir bug (every rank's block shifted by one) is caught and triaged as refir's."""
    peer = load_peer("dtensor")
    c = case()
    real = refir_side.run

    def shifted(case):
        return {r: Block(b.offset, b.values + 1) for r, b in real(case).items()}

    monkeypatch.setattr(refir_side, "run", shifted)
    o = check(peer, c)
    assert o.status == "differ" and o.triage == "refir" and "values" in o.problems[0]
    # A reproducer expecting other values fails on its own; the true one passes.
    from conformance.peers.scripts import dtensor_script
    from conformance.peers.spec import group_inputs

    inputs = [group_inputs(c, g) for g in range(len(c.groups()))]
    wrong = {r: Block(b.offset, b.values + 1) for r, b in expected(c).items()}
    for want, rc in ((expected(c), 0), (wrong, 1)):
        path = tmp_path / f"repro{rc}.py"
        path.write_text(dtensor_script(c, inputs, want))
        assert subprocess.run([sys.executable, str(path)], capture_output=True).returncode == rc


@needs_torch
def test_a_peer_reshape_in_column_major_order_is_caught(monkeypatch):
    """A planted peer bug in a shape op (reshape in Fortran order) differs from refir and the
    meaning: triaged as the peer's."""
    from conformance.peers import shape_ops

    real = shape_ops.torch_op

    def fortran(op, params, shape, args):
        if op != "reshape":
            return real(op, params, shape, args)
        x = args[0]
        return x.permute(*reversed(range(x.ndim))).reshape(list(reversed(shape))).permute(
            *reversed(range(len(shape))))

    monkeypatch.setattr(shape_ops, "torch_op", fortran)
    c = case(kind="op", op="reshape", root=(2,), dims=(0,), shape=(2, 2, 3), params=(4, 3), src=(Shard(0),),
             dst=(Replicate(),))
    o = check(load_peer("dtensor"), c)
    assert o.status == "differ" and o.triage == "peer", o.problems


@needs_torch
def test_the_dtensor_sweep_draws_nests_and_they_agree():
    """Case 42 of seed 0 puts dim 0 on all three mesh dims of a 2x1x2 mesh (7 rows: uneven)."""
    peer = load_peer("dtensor")
    c = drawn(peer, 0, 42)
    assert (c.src, c.dst, c.shape) == ((Replicate(), Replicate(), Shard(0)), (Shard(0),) * 3, (7,))
    o = check(peer, c)
    assert o.status == "agree", o.problems
    jax = load_peer("jax") if HAS_JAX else None
    if jax is not None:  # the JAX peer draws no nests: its cases are what they were
        assert all(len({p for p in ps if isinstance(p, Shard)}) == sum(isinstance(p, Shard) for p in ps)
                   for i in range(30) for ps in (drawn(jax, 0, i).src, drawn(jax, 0, i).dst))


@needs_torch
def test_known_dtensor_bug_is_triaged_and_the_sweep_passes(tmp_path, capsys):
    """DTensor's amax on an empty shard (docs/peers.md): the shrinker's minimal case."""
    peer = load_peer("dtensor")
    o = check(peer, case(kind="op", op="max", root=(3,), dims=(0,), shape=(), src=(Shard(0),),
                         dst=(Replicate(),), inner=1, axis=0))
    assert o.triage == "peer-bug:dtensor-amax-empty-shard", o.problems
    assert main(["peer", "dtensor", "--cases", "4", "--save", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "refir peer dtensor: 4 cases" in out and "cases/s" in out and "agree" in out


@needs_jax
@pytest.mark.parametrize("c", [
    case(shape=(4, 2)),
    case(kind="collective", src=(Shard(0), Replicate()), dst=(Shard(1), Replicate()), shape=(4, 2)),
    case(kind="collective", src=(Partial("sum"), Replicate()), dst=(Shard(0), Replicate()), shape=(4, 2)),
    case(kind="collective", src=(Replicate(), Partial("min")), dst=(Replicate(), Replicate()), shape=(2,)),
    case(kind="collective", root=(2, 2, 2), view="root", dims=(0, 1, 2), src=(Shard(0), Replicate(), Shard(1)),
         dst=(Replicate(), Replicate(), Shard(1)), shape=(2, 4), dtype="bf16"),
], ids=lambda c: c.label())
def test_jax_agrees_with_refir(c):
    o = check(load_peer("jax"), c)
    assert o.status == "agree", o.problems


@needs_jax
def test_jax_cases_divide_and_the_sweep_runs(capsys, tmp_path):
    peer = load_peer("jax")
    for i in range(30):
        c = draw_case(Chooser(RandomDraw(5, i)), peer)
        assert c.view == "root" and c.dtype in peer.DTYPES
        for d, n in enumerate(c.shape):
            for i_, p in enumerate(c.src + c.dst):
                if p == Shard(d):
                    assert n % c.view_shape[i_ % len(c.view_shape)] == 0
    assert main(["peer", "jax", "--cases", "3", "--save", str(tmp_path)]) == 0
    assert "refir and jax agree" in capsys.readouterr().out


@needs_torch
def test_the_dtensor_sweep_draws_strided_shards_and_a_wrong_split_factor_is_caught(monkeypatch, tmp_path):
    """The first drawn _StridedShard cases of seed 0 (refir's interleaved axes, spec §3.4) agree or are
    DTensor's known strided entries; refir planted with split factor + 1 on its target is caught as
    refir's, never as a known bug."""
    from refir.frontends.dtensor import StridedShard

    peer = load_peer("dtensor")
    drawn_ = (drawn(peer, 0, i) for i in range(200))
    picks = [c for c in drawn_ if any(isinstance(p, StridedShard) for p in c.src + c.dst)][:3]
    assert len(picks) == 3 and all(c.kind == "reshard" for c in picks)
    for c in picks:
        o = check(peer, c)
        assert o.status == "agree" or o.triage.startswith("peer-bug:dtensor-strided"), (c.label(), o.problems)
    fsdp_tp = case(src=(StridedShard(0, 2), Shard(0)), dst=(Replicate(), Replicate()), shape=(7, 3))
    assert check(peer, fsdp_tp).status == "agree"
    wrong = case(src=(StridedShard(0, 2), Replicate()), dst=(Replicate(), Shard(0)), shape=(12, 2))
    refused = case(src=(StridedShard(0, 2), Shard(0)), dst=(Shard(0), StridedShard(0, 2)), shape=(12, 2))
    assert check(peer, wrong).triage == "peer-bug:dtensor-strided-redistribute-wrong-blocks"
    assert check(peer, refused).triage == "peer-bug:dtensor-strided-redistribute-raises"
    from conformance.peers.sweep import write_reproducer

    assert write_reproducer(peer, wrong, tmp_path, "wrong")[1] == "fails"  # the script writes _S(d,sf) too
    assert write_reproducer(peer, fsdp_tp, tmp_path, "fsdp_tp")[1].startswith("passes")

    planted = case(root=(4,), dims=(0,), src=(Replicate(),), dst=(StridedShard(0, 2),), shape=(7, 3))
    assert check(peer, planted).status == "agree"
    real = refir_side.redistribute_program

    def off_by_one(mesh, shape, src, dst, *args, **kw):
        dst = tuple(StridedShard(p.dim, p.split_factor + 1) if isinstance(p, StridedShard) else p for p in dst)
        return real(mesh, shape, src, dst, *args, **kw)

    monkeypatch.setattr(refir_side, "redistribute_program", off_by_one)
    o = check(peer, planted)
    assert o.status == "differ" and o.triage == "refir" and "refir" in o.problems[0], o.problems
    assert check(peer, refused).triage == "both"  # refir wrong too: not DTensor's known bug
