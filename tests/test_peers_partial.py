"""Partial targets and Partial(avg) sources in the DTensor sweep (docs/peers.md, "Partial
targets"): drawn on 1-D to 3-D meshes, folded and compared term by term, and the known
DTensor entries of issue 29 (an integer Partial(sum) partition, two reshape refusals),
each matched narrowly."""

import importlib.util
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from conformance.peers import dtensor_peer, refir_side
from conformance.peers.known import PEER_BUGS
from conformance.peers.partial_compare import partial_target, same_terms, uses_terms
from conformance.peers.spec import Block, PeerCase
from conformance.peers.sweep import check, drawn, write_reproducer
from refir.frontends.dtensor import Partial, Replicate, Shard, StridedShard, parse_placements

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed: pip install 'refir[peers]'")


def reshard(root, dtype, shape, src, dst, seed=3) -> PeerCase:
    return PeerCase("reshard", root, "root", tuple(range(len(root))), dtype, shape, parse_placements(src),
                    parse_placements(dst), seed=seed)


def test_the_sweep_draws_partial_targets_by_dtensors_rules():
    """Seed 0's first 600 cases: Partial targets of sum, max and min on 1-D, 2-D and 3-D meshes,
    kept ones and made ones, with _StridedShard and nests, and Partial(avg) sources; every target
    Partial is made from Replicate or kept from the same Partial (DTensor's rules)."""
    cases = [drawn(dtensor_peer, 0, i) for i in range(600)]
    targets = [c for c in cases if partial_target(c)]
    for c in targets:
        for s, d in zip(c.src, c.dst):
            assert not isinstance(d, Partial) or s in (Replicate(), d), c.label()
    kinds = {p.op for c in targets for p in c.dst if isinstance(p, Partial)}
    assert {"sum", "max", "min", "avg"} <= kinds, kinds
    assert {len(c.view_shape) for c in targets} == {1, 2, 3}
    assert any(same_terms(c) for c in targets) and any(not same_terms(c) for c in targets)
    assert any(isinstance(p, StridedShard) for c in targets for p in c.src + c.dst)
    assert any(len({p for p in c.src + c.dst if isinstance(p, Shard)}) < sum(isinstance(p, Shard) for p in c.dst)
               or len(set(c.dst)) < len(c.dst) for c in targets if len(c.dst) > 1)
    avg = [c for c in cases if c.kind == "reshard" and Partial("avg") in c.src]
    assert avg and all(c.dtype in ("f32", "f64", "f16", "bf16") for c in avg)
    assert any(not partial_target(c) for c in avg) and any(partial_target(c) for c in avg)


AGREE = [
    ((4,), "f32", (5, 3), "R", "P"),
    ((3,), "f32", (5, 3), "R", "P"),  # DTensor's x / 3 folds back to x here
    ((3,), "i32", (4,), "P(max)", "P(max)"),
    ((2, 2), "f32", (5, 3), "R,S0", "P(max),S0"),
    ((2, 2), "i32", (5, 3), "P,S0", "P,R"),
    ((2, 2), "i64", (5, 3), "P(min),R", "P(min),P(min)"),
    ((2, 2), "f32", (6, 4), "P(avg),S0", "P(avg),R"),
    ((2, 2), "f16", (6, 4), "P(avg),S1", "R,S0"),
    ((2, 2), "f64", (6, 4), "P(avg),P(avg)", "R,S1"),
    ((2, 2, 2), "f64", (6, 4), "_S(0,2),S0,R", "R,R,P(min)"),
    ((2, 2, 2), "f32", (7, 4), "R,S0,S0", "P(max),S0,S0"),
    ((2, 1, 2), "bf16", (6, 5), "P,_S(0,2),S0", "P,R,S1"),
]


@needs_torch
@pytest.mark.parametrize("root, dtype, shape, src, dst", AGREE)
def test_partial_reshardings_agree_with_dtensor(root, dtype, shape, src, dst):
    c = reshard(root, dtype, shape, src, dst)
    o = check(dtensor_peer, c)
    assert o.status == "agree", o.problems


@needs_torch
def test_a_wrong_term_a_wrong_fold_and_swapped_terms_are_caught(monkeypatch):
    """Planted on refir's side: one rank's term off by one (its fold is off: refir's); swapped
    between the two ranks of a team where both sides hold the same terms (the folds agree, the
    terms do not); the same swap where DTensor's terms are its own (no fault: folds compared)."""
    run = refir_side.run

    def planted(how):
        def fake(case):
            out = run(case)
            if how == "off":
                b = out[0]
                out[0] = Block(b.offset, (b.values + 1).astype(b.values.dtype))
            else:
                out[0], out[1] = Block(out[0].offset, out[1].values), Block(out[1].offset, out[0].values)
            return out
        return fake

    kept = reshard((2,), "i32", (4, 3), "P", "P")
    made = reshard((2,), "i32", (4, 3), "R", "P(max)")
    monkeypatch.setattr(refir_side, "run", planted("off"))
    o = check(dtensor_peer, made)
    assert o.triage == "refir" and any(p.startswith("folded: rank 0: values refir") for p in o.problems), o.problems
    monkeypatch.setattr(refir_side, "run", planted("swap"))
    o = check(dtensor_peer, kept)
    assert same_terms(kept) and o.status == "differ" and o.problems[0].startswith("terms: rank 0"), o.problems
    assert check(dtensor_peer, made).status == "agree"  # both terms the value: a swap is no fault


@needs_torch
def test_an_integer_sum_partition_is_dtensors_known_bug_and_narrow(monkeypatch):
    """DTensor's x / n of an i32 is truncated: matched; the same case with refir planted wrong,
    a max partition with DTensor planted wrong, and an f32 case are not."""
    c = reshard((4,), "i32", (5, 3), "R", "P")
    o = check(dtensor_peer, c)
    assert o.triage == "peer-bug:dtensor-partition-int-sum", o.problems
    assert uses_terms(c) is False and check(dtensor_peer, replace(c, dtype="f64")).status == "agree"
    reduced_first = reshard((2, 2, 2), "i64", (8, 1, 2), "R,P,S2", "P,S2,S0")  # seed 0's case 409, shrunk
    assert check(dtensor_peer, reduced_first).triage == "peer-bug:dtensor-partition-int-sum"
    kept_too = reshard((2, 2), "i32", (5, 3), "P,R", "P,P")  # DTensor divides refir's terms: not this entry's class
    o = check(dtensor_peer, kept_too)
    assert o.triage == "peer" and o.problems[0].startswith("folded: rank 0: values dtensor"), o.problems
    run = refir_side.run

    def off(case):
        out = run(case)
        out[2] = Block(out[2].offset, out[2].values * 0 + 7)
        return out

    monkeypatch.setattr(refir_side, "run", off)
    assert check(dtensor_peer, c).triage == "both"
    monkeypatch.setattr(refir_side, "run", run)
    peer_run = dtensor_peer.run

    def shifted(case):
        got = peer_run(case)
        return replace(got, blocks={r: Block(b.offset, b.values - 1) for r, b in got.blocks.items()})

    monkeypatch.setattr(dtensor_peer, "run", shifted)
    assert check(dtensor_peer, reshard((4,), "i32", (5, 3), "R", "P(max)")).triage == "peer"


def op_case(root, shape, params, src, dtype="f32", view="root", dims=None):
    return PeerCase("op", root, view, dims if dims is not None else tuple(range(len(root))), dtype, shape,
                    parse_placements(src), tuple(Replicate() for _ in (dims or root)), "reshape", params=params)


def matcher(name):
    return dict(PEER_BUGS)[name]


@needs_torch
def test_reshape_refusals_are_known_and_refir_is_right():
    """Seed 0's two reshape refusals (cases 912 and 1037, shrunk): matched by their entries, refir
    gives the meaning; a problem that merely reads alike is not matched."""
    from conformance.peers.block_compare import differences
    from conformance.peers.spec import expected

    drawn_912 = drawn(dtensor_peer, 0, 912)
    drawn_1037 = drawn(dtensor_peer, 0, 1037)
    uneven = replace(drawn_912, src=(Shard(0), Replicate()), dst=(Replicate(), Replicate()))
    unit = replace(drawn_1037, dst=(Replicate(),))
    for c, name in ((uneven, "dtensor-reshape-uneven-refused"), (unit, "dtensor-reshape-sharded-unit-dim")):
        o = check(dtensor_peer, c)
        assert o.triage == f"peer-bug:{name}", (c.label(), o.problems)
        assert differences(refir_side.run(c), expected(c), "refir", "meaning") == []
    said = "dtensor raises RuntimeError: This operation would remove or reshape sharded dimension 1, which"
    assert matcher("dtensor-reshape-sharded-unit-dim")(unit, [said.replace("dimension 1", "dimension 0")])
    assert not matcher("dtensor-reshape-sharded-unit-dim")(unit, [said])  # x's dim 1 has extent 4
    assert not matcher("dtensor-reshape-sharded-unit-dim")(unit, [said, "refir raises x"])
    even = ("dtensor raises RuntimeError: Cannot unflatten unevenly sharded tensor: output dimension 0 (size 6) is "
            "not evenly divisible by mesh dimension 0 (size 3).")
    assert not matcher("dtensor-reshape-uneven-refused")(uneven, [even])
    assert matcher("dtensor-reshape-uneven-refused")(uneven, [even.replace("size 6", "size 2")])


@needs_torch
def test_a_partial_target_reproducer_folds_and_fails_alone_only_when_dtensor_is_off(tmp_path):
    bad = reshard((4,), "i32", (5, 3), "R", "P")
    good = reshard((2, 2), "i32", (5, 3), "P,S0", "P,R")
    assert write_reproducer(dtensor_peer, bad, tmp_path, "bad")[1] == "fails"
    path, alone = write_reproducer(dtensor_peer, good, tmp_path, "good")
    assert alone.startswith("passes"), alone
    text = open(path).read().replace('"fold":"sum"', '"fold":"max"')  # a wrong fold: the script must see it
    open(path, "w").write(text)
    assert subprocess.run([sys.executable, path], capture_output=True).returncode == 1
    assert np.array_equal(dtensor_peer.run(good).blocks[0].values, refir_side.run(good)[0].values)
