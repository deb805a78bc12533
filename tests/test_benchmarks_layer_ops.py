"""benchmarks/gpu_bench.py layer-ops runs every row under the simulator at a tiny size:
refir's op and torch's (on the CPU, where torch is installed) each agree with interp's
numpy, the table prints every row, and a broken kernel fails the bench's own check, so
the rows cannot break unseen before they reach a GPU."""

import numpy as np
import pytest

from benchmarks import gpu_bench, gpu_layer_ops
from benchmarks.gpu_layer_ops import Operands, cases, check, prepare
from gpu_backend.device import SIMULATED
from gpu_backend.kernels import window

pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.skipif(not SIMULATED, reason="the bench itself runs these rows on a GPU")]
N = 256  # elements of the largest operand: 16 x 16


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def test_every_row_is_one_of_issue_27s_op_families():
    ops_named = " ".join(c.name for c in cases(N))
    for family in ["lt", "where", "iota", "slice", "select", "pad", "cat", "reshape", "expand",
                   "tanh", "erf", "sigmoid", "rsqrt", "sin", "cos"]:
        assert family in ops_named, family
    assert all(c.peer is not None or c.note for c in cases(N))  # a row without torch says so


@pytest.mark.parametrize("name", [c.name for c in cases(N)])
def test_each_row_agrees_with_numpy_refir_and_torch(name):
    torch = _torch()
    case = next(c for c in cases(N) if c.name == name)
    p = prepare(case, Operands(torch, seed=1))
    check(p, torch, N)  # refir's (and torch's) values against interp's numpy
    if torch is not None and p.theirs is not None:  # torch's ran: its values were checked
        assert p.theirs() is not None


def test_a_torch_views_shared_layout_shows_refir_the_same_elements():
    """What the GPU path builds refir's buffer from (torch's memory shared), on the CPU."""
    torch = _torch()
    if torch is None:
        pytest.skip("torch is not installed")
    spec = next(c for c in cases(N) if c.name.startswith("reshape [:, 1:-1]")).args[0]
    Input = gpu_layer_ops.Input
    for s in [spec, Input((4, 6), perm=(1, 0)), Input((3, 8), index=(slice(1, 3), slice(0, 8, 2)))]:
        base = torch.rand(s.shape)
        view = gpu_layer_ops._viewed(base, s, lambda v, p: v.permute(p))
        offset, shape, strides = gpu_layer_ops.shared_layout(view)
        seen = np.lib.stride_tricks.as_strided(base.numpy().reshape(-1)[offset:], shape, [4 * st for st in strides])
        assert np.array_equal(seen, view.numpy())


def test_a_broken_kernel_fails_the_benchs_check(monkeypatch):
    monkeypatch.setattr(window, "fill_view", lambda out, value: out)  # pad's border left unwritten
    case = next(c for c in cases(N) if c.name.startswith("pad"))
    with pytest.raises(AssertionError, match="pad 1 on each side: refir differs from numpy"):
        check(prepare(case, Operands(None)), None, N)


def test_the_table_prints_every_row_with_a_ratio_or_a_dash(capsys, monkeypatch):
    monkeypatch.setenv("GPU_BENCH_ELEMS", str(N))
    assert gpu_bench.layer_ops(repeats=1) == 0  # what `python -m benchmarks.gpu_bench layer-ops` runs
    out = capsys.readouterr().out
    assert out.startswith("SIMULATOR")
    for c in cases(N):
        line = next(x for x in out.splitlines() if x.startswith(c.name + " "))
        fields = line[len(c.name):].split()
        assert len(fields) == 7 and fields[3].endswith("%") and fields[6].endswith("%"), line
        assert (fields[1] == "-") == (c.peer is None or _torch() is None), line
        assert all(np.isfinite(float(f.rstrip("%"))) for f in fields if f != "-"), line


def test_mask_ulps_runs_every_op_and_exits_1_where_a_bound_is_exceeded(capsys, monkeypatch):
    from benchmarks import mask_ulps

    assert mask_ulps.main(400) == 0
    out = capsys.readouterr().out
    for name in gpu_layer_ops.UNARY:
        for dtype in ("float32", "float64"):
            assert any(line.split()[:2] == [name, dtype] for line in out.splitlines()), (name, dtype)
    assert out.rstrip().endswith("every error within its bound")
    monkeypatch.setitem(mask_ulps.MASK_ULPS, "tanh", 0)  # a bound no implementation meets
    assert mask_ulps.main(400) == 1
    assert "EXCEEDS its bound: tanh float32 numpy, tanh float32 gpu" in capsys.readouterr().out


def test_a_failing_row_is_said_and_the_others_still_run(capsys, monkeypatch):
    from gpu_backend.impls import GPU_IMPLS
    from refir.ir import ops

    def broken(*args):
        raise RuntimeError("no cat today")

    monkeypatch.setenv("GPU_BENCH_ELEMS", str(N))
    monkeypatch.setattr(window, "fill_view", lambda out, value: out)  # pad's border left unwritten
    monkeypatch.setitem(GPU_IMPLS, ops.Cat, broken)
    assert gpu_bench.layer_ops(repeats=1) == 1
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("pad 1 on each side CHECK FAILED ") for line in out)  # timed, marked
    assert not any(line.startswith("cat axis") for line in out)  # could not run: left out
    assert "FAILED 256 elements: pad 1 on each side: refir differs from numpy" in out
    assert "FAILED 256 elements: cat axis 0 of two: RuntimeError: no cat today" in out
    assert sum(line.startswith(("tanh f32 ", "where ", "iota ")) for line in out) == 5  # the rest ran


def test_the_probes_variants_name_the_slow_rows_and_keep_their_values():
    """kernel_probe `layer` (benchmarks/probe_layer_ops.py): every variant names a row of the
    bench, and under each one the row's values still agree with numpy (the simulator's run of
    what the GPU run times)."""
    from benchmarks.kernel_probe import knobs
    from benchmarks.probe_layer_ops import VARIANTS

    names = [c.name for c in cases(N)]
    assert all(any(n.startswith(start) for n in names) for start in VARIANTS)
    torch = _torch()
    made = Operands(torch, seed=2)
    tried = 0
    for case in cases(N):
        variants = next((v for start, v in VARIANTS.items() if case.name.startswith(start)), [])
        p = prepare(case, made) if variants else None
        for module, values in variants:
            with knobs(module, **values):
                check(p, torch, N)
                tried += 1
    assert tried == sum(len(v) for v in VARIANTS.values())
