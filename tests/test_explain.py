"""explain's facts against what actually happens: every value's per-device
global ranges, local shapes and byte strides against the buffers refir.run
keeps, and every communication's bytes against what the in-process transport
moves (traced by tagging each sender's elements with its device bit)."""

from __future__ import annotations

import json
import time
from dataclasses import fields, replace

import numpy as np
import pytest
from helpers import EXAMPLES, ROOT, run_mpi

import refir
from conformance.bounds import reference
from conformance.cases import CORPUS, cases_of
from interp.transport import InProcess
from refir.cli import main
from refir.explain.placement import explain
from refir.explain.report import explained_json
from refir.ir import ops
from refir.lowering.lower import lower

FILES = sorted(CORPUS.glob("*.rir")) + EXAMPLES
SCATTER = ROOT / "docs" / "tutorial" / "scatter_after_permute.rir"


def first_case(path):
    return cases_of(path, "files")[0]


def doc_of(case):
    lowered = lower(case.checked)
    world = 1 + max(d for t in case.checked.types.values() for d in t.mesh.devices)
    return lowered, explained_json(explain(lowered, case.bindings, world))


def values_of(doc):
    return doc["inputs"] + [s["value"] for s in doc["steps"]]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_ranges_shapes_and_strides_are_those_of_the_kept_buffers(path):
    case = first_case(path)
    lowered, doc = doc_of(case)
    inputs = case.inputs()
    result = refir.run(case.program, inputs, keep="all")
    ref, bounds = reference(case.checked, inputs, case.bindings)
    for v in values_of(doc):
        kept = result.kept[v["name"]]
        assert sorted(kept) == sorted(int(d) for d in v["devices"]), v["name"]
        whole = ref[v["name"].split("~")[0]]  # a lowered part holds its value's blocks
        for d, facts in v["devices"].items():
            buf = kept[int(d)]
            assert list(buf.shape) == facts["local_shape"], (v["name"], d)
            if not v["any_strides"]:
                assert [s for s, n in zip(buf.strides, buf.shape) if n > 1] == \
                    [s for s, n in zip(facts["byte_strides"], buf.shape) if n > 1], (v["name"], d)
            if v["partial"] is None:
                where = tuple(slice(a, b) for a, b in facts["ranges"]) if "runs" not in facts else \
                    np.ix_(*(np.array([i for a, b in rs for i in range(a, b)], int) for rs in facts["runs"]))
                block, bound = whole[where], bounds[v["name"].split("~")[0]][where]
                got, want = np.asarray(buf).astype(np.float64), np.asarray(block).astype(np.float64)
                with np.errstate(all="ignore"):  # within the conformance bound (docs/spec.md section 10)
                    ok = (np.abs(got - want) <= bound) | (got == want) | (np.isnan(got) & np.isnan(want))
                assert np.all(ok), f"{v['name']} on {d}: {buf} vs {block}"


def traced_bytes(op, src, dst, local_shapes, itemsize):
    """(sent, received, pairs) per device, from the data the in-process transport hands each receiver."""
    buffers = {d: np.full(shape, 1 << d, np.int64) for d, shape in local_shapes.items()}
    if any(f.name == "kind" for f in fields(op)):
        op = replace(op, kind="bor")  # the fold then yields the set of contributing senders
    world = 1 + max(max(src.mesh.devices), max(dst.mesh.devices))
    got = InProcess(world).communicate(op, src, dst, buffers)
    pairs: dict[tuple[int, int], int] = {}
    for r, out in got.items():
        for s in range(world):
            if s != r:
                n = int(np.count_nonzero(np.asarray(out) & (1 << s)))
                if n:
                    pairs[(s, r)] = n * itemsize
    sent = {d: sum(n for (s, _), n in pairs.items() if s == d) for d in range(world)}
    received = {d: sum(n for (_, r), n in pairs.items() if r == d) for d in range(world)}
    return sent, received, pairs


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_communication_bytes_are_what_the_transport_moves(path):
    case = first_case(path)
    lowered, doc = doc_of(case)
    by_name = {v["name"]: v for v in values_of(doc)}
    for step, facts in zip(lowered.steps, doc["steps"]):
        if not step.is_communication:
            continue
        comm = facts["communication"]
        (src,) = step.tensor_args()
        shapes = {int(d): tuple(f["local_shape"]) for d, f in by_name[src]["devices"].items()}
        itemsize = step.type.np_dtype.itemsize
        sent, received, pairs = traced_bytes(step.op, lowered.types[src], step.type, shapes, itemsize)
        for d, b in comm["bytes"].items():
            assert (b["sent"], b["received"]) == (sent[int(d)], received[int(d)]), (step.out, d)
        told = {}
        for t in comm["transfers"]:
            told[(t["from"], t["to"])] = told.get((t["from"], t["to"]), 0) + t["bytes"]
        assert {k: v for k, v in told.items() if v} == pairs, step.out


def test_every_communication_kind_is_covered_by_the_files():
    kinds = set()
    for path in FILES:
        kinds |= {ops.op_name(s.op) for s in lower(first_case(path).checked).steps if s.is_communication}
    assert kinds == {ops.op_name(c(*[0] * len(fields(c)))) for c in ops.COMMUNICATIONS}


def test_a_scatter_moves_one_block_to_each_other_device(capsys):
    assert main(["explain", str(SCATTER), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (scatter,) = [s for s in doc["steps"] if s["kind"] == "communication"]
    comm = scatter["communication"]
    assert comm["kind"] == "scatter" and comm["teams"] == [
        {"devices": [0, 1, 2, 3], "senders": [0], "receivers": [0, 1, 2, 3]}]
    assert comm["changes"] == ["mesh m0 [0] -> mesh m1 [0 1 2 3]", "axis 0: whole -> sharded on DIDx"]
    assert comm["transfers"] == [{"from": 0, "to": d, "ranges": [[d, d + 1], [0, 3], [0, 3]], "bytes": 36}
                                 for d in (1, 2, 3)]
    assert comm["bytes"]["0"] == {"sent": 108, "received": 0}
    t2 = next(s["value"] for s in doc["steps"] if s["out"] == "t2")
    assert t2["devices"]["0"] == {"coords": [0], "ranges": [[0, 4], [0, 3], [0, 3]], "local_shape": [4, 3, 3],
                                  "byte_strides": [12, 48, 4]}


def test_check_and_lower_json(capsys):
    assert main(["check", str(SCATTER), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [v["name"] for v in doc["values"]] == ["x", "t1", "t2", "t3", "t4", "out"]
    t4 = doc["values"][4]
    assert t4["devices"]["2"]["ranges"] == [[0, 3], [2, 3], [0, 3]]
    assert t4["devices"]["2"]["byte_strides"] == [12, 12, 4]
    assert main(["lower", str(SCATTER), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [g["kind"] for g in doc["segments"]] == ["compute", "communication", "compute"]


def test_symbolic_extents_take_bind(capsys):
    path = ROOT / "docs" / "tutorial" / "allreduce_then_bias.rir"
    assert main(["explain", str(path), "--json", "--bind", "D=4", "K=2", "M=3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["bindings"] == {"D": 4, "K": 2, "M": 3}
    a = doc["inputs"][0]
    assert a["devices"]["1"]["ranges"] == [[2, 4], [0, 2], [0, 3]]


def test_device_view_and_exports(tmp_path, capsys):
    svg, html = tmp_path / "x.svg", tmp_path / "x.html"
    assert main(["explain", str(SCATTER), "--device", "2", "--svg", str(svg), "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "2        [2]      [2:3, 0:3, 0:3]" in out and "3        [3]" not in out
    assert svg.read_text().startswith("<svg") and "scatter" in html.read_text()


def test_explain_is_fast():
    start = time.monotonic()
    for path in EXAMPLES[:3] + [SCATTER]:
        assert main(["explain", str(path), "--json"]) == 0
    assert time.monotonic() - start < 2


def test_keep_all_keeps_every_intermediate():
    x = np.arange(180, dtype=np.float32).reshape(3, 4, 3, 5)
    result = refir.run(refir.load(SCATTER), {"x": x}, keep="all")
    assert set(result.kept) == {"x", "t1", "t2", "t3", "t4", "out"}
    assert result.kept["t2"][0].strides == (12, 48, 4)
    np.testing.assert_array_equal(result.kept["t3"][2], x.sum(3).transpose(1, 0, 2)[2:3])
    with pytest.raises(refir.InputError, match="spmd"):
        refir.run(refir.load(SCATTER), {"x": x}, backend="global", keep="all")


@pytest.mark.parametrize("command", ["explain", "trace"])
def test_under_mpiexec_one_rank_prints(command):
    done = run_mpi(4, ["-m", "refir", command, str(SCATTER)], timeout=90)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("return out") == 1
    assert "scatter" in done.stdout


def test_trace_takes_inputs_and_summarises_large_buffers(tmp_path, capsys):
    path = tmp_path / "big.rir"
    path.write_text("mesh m = [0, 1]\n\nfunc main(x: i32[8@DIDx, 16] on m) {\n"
                    "  y: i32[8, 16] on m = set(x)\n  return y\n}\n")
    x = np.arange(128, dtype=np.int32).reshape(8, 16)
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["trace", str(path), "--inputs", str(tmp_path / "in.npz"), "--device", "1"]) == 0
    out = capsys.readouterr().out
    assert "from 0: local [0:4, 0:16] (256 B)" in out and "kept its own local [4:8, 0:16]" in out
    assert "min 0 max 127" in out and "min 64 max 127" in out  # device 1's block, then the gathered whole
    assert "1        i32[4, 16]" in out and "0        i32" not in out  # device 0's buffers are left out


def test_uneven_and_empty_blocks_display_plainly(monkeypatch):
    """Ranges come from refir.ir.types.block_slices alone: cut 5 elements into
    blocks of ceil(5/4) = 2 and the last device's block is empty."""
    import io

    from rich.console import Console

    from refir.explain import placement as placement_module
    from refir.explain.pictures import value_picture
    from refir.ir.types import Axis, Mesh, TensorType

    def ceil_blocks(t, device, shape):
        out = []
        for a, n in zip(t.axes, shape):
            if a.shard:
                size = -(-n // t.mesh.size(a.shard))
                k = t.mesh.coord(device, a.shard)
                out.append(slice(min(k * size, n), min((k + 1) * size, n)))
            else:
                out.append(slice(None))
        return tuple(out)

    monkeypatch.setattr(placement_module, "block_slices", ceil_blocks)
    mesh = Mesh("m", (2, 2), (0, 1, 2, 3))
    t = TensorType("f32", (Axis(3, "DIDy"), Axis(5, "DIDx")), mesh)
    p = placement_module.placement("x", t, {})
    assert [b.ranges for b in p.blocks] == [((0, 2), (0, 3)), ((0, 2), (3, 5)), ((2, 3), (0, 3)), ((2, 3), (3, 5))]
    t = TensorType("f32", (Axis(5, "DIDx"),), Mesh("m", (4,), (0, 1, 2, 3)))
    p = placement_module.placement("y", t, {})
    assert [b.local_shape for b in p.blocks] == [(2,), (2,), (1,), (0,)]
    console = Console(file=io.StringIO(), width=100, color_system=None, markup=False)
    console.print(value_picture(p))
    out = console.file.getvalue()
    assert "axis 0 4:5" in out and "axis 0 empty" in out and "dev 3 (empty)" in out
    assert "[empty] (no elements)   [0]" in out


def test_explain_and_trace_of_every_corpus_program_under_mpiexec(tmp_path, capsys):
    """One launch of 4 ranks: rank 0 alone prints, and prints what a run in one process prints."""
    from refir.running.bindings import devices_needed

    fits = [str(p) for p in FILES if devices_needed(first_case(p).checked) <= 4]
    out = tmp_path / "views.json"
    done = run_mpi(4, [str(ROOT / "tests" / "mpi_views.py"), str(out), *fits], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = json.loads(out.read_text())
    assert len(fits) > 50
    for path in fits:
        for rank in ranks[1:]:
            assert rank[path]["explain"] == [0, ""] and rank[path]["trace"] == [0, ""], path
        rc, text = ranks[0][path]["explain"]
        assert rc == 0
        assert main(["explain", path, "--json", "--world", "4"]) == 0
        assert json.loads(text) == json.loads(capsys.readouterr().out), path
        rc, text = ranks[0][path]["trace"]
        assert rc == 0
        assert main(["trace", path, "--seed", "3", "--world", "4"]) == 0
        assert text == capsys.readouterr().out, path


@pytest.mark.parametrize("command", ["explain", "trace"])
def test_a_device_outside_the_world_is_an_input_error(command, capsys):
    assert main([command, str(SCATTER), "--device", "4"]) == 2
    assert capsys.readouterr().err == "error: --device 4 is not a rank of the world of 4 (0..3)\n"
