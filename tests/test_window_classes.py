"""The window ops' error classes (conformance/window_classes.py): each wrong way of
gathering a sharded axis differs from the spec's result exactly where its data
condition holds (ids out of order, np.array_split's cut, an uneven last block, a
step out of phase with a block boundary, cat's blocks side by side), the default
run exposes every one on every dtype (window_classes_every_dtype.rir), `conform
--coverage` says so per op, class and dtype, and the mutant that gathers as
np.array_split cuts is killed by that program's values."""

import re

import numpy as np
import pytest

from conformance.cases import CORPUS, bundled_cases, cases_of
from conformance.classes import CLASSES
from conformance.coverage import Coverage, missing_classes
from conformance.error_class import Site
from conformance.explore import drawn
from conformance.mutants import MUTANTS
from conformance.teeth import hunt
from conformance.window_classes import WINDOW_CLASSES
from interp.impls import compute
from refir.cli import main
from refir.ir import ops
from refir.ir.types import DTYPES, Axis, Mesh, TensorType

BY_NAME = {c.name: c for c in WINDOW_CLASSES}
ROWS = {"team order": ("slice", "select", "pad", "cat"), "array_split blocks": ("slice", "select", "pad", "cat"),
        "padded domain": ("pad", "cat"), "step phase": ("slice",), "blocks side by side": ("cat",)}


def _type(extent: int, devices: tuple[int, ...], shard: str | None = "DIDx") -> TensorType:
    return TensorType("f32", (Axis(extent, shard), Axis(2)), Mesh("m", (len(devices),), devices))


def _site(op: object, t: TensorType, n_operands: int = 1) -> Site:
    x = np.arange(t.axes[0].extent * 2, dtype=np.float32).reshape(-1, 2) + 1
    args = [x + 100 * i for i in range(n_operands)]
    return Site(op, args, [t] * n_operands, np.dtype(np.float32))


def _differs(name: str, site: Site) -> bool:
    wrong = BY_NAME[name].value(site)
    if wrong is None:
        return False
    right = compute(site.op, list(site.args), site.dtype)
    return wrong.shape != right.shape or not np.array_equal(wrong, right)


SLICE = ops.Slice((0,), (0,), (5,), (3,))
SELECT = ops.Select(0, 3)
PAD = ops.Pad((1, 0), (2, 0), 7)
CAT = ops.Cat(0)


def test_each_class_applies_to_its_rows_only():
    for c in WINDOW_CLASSES:
        assert [r for r in ("slice", "select", "pad", "cat", "reshape", "add") if c.applies(r, "f32")] == \
            list(ROWS[c.name])


@pytest.mark.parametrize("op, n", [(SLICE, 1), (SELECT, 1), (PAD, 1), (CAT, 2)])
def test_team_order_shows_only_on_ids_out_of_order(op, n):
    assert _differs("team order", _site(op, _type(5, (2, 0, 3, 1)), n))
    assert not _differs("team order", _site(op, _type(5, (0, 1, 2, 3)), n))
    assert not _differs("team order", _site(op, _type(5, (2, 0, 3, 1), None), n))  # not sharded: nothing gathered


@pytest.mark.parametrize("op, n", [(SLICE, 1), (SELECT, 1), (PAD, 1), (CAT, 2)])
def test_array_split_shows_only_where_its_cut_differs(op, n):
    assert _differs("array_split blocks", _site(op, _type(5, (0, 1, 2, 3)), n))  # 2, 2, 1, 0 against 2, 1, 1, 1
    assert not _differs("array_split blocks", _site(op, _type(7, (0, 1, 2, 3)), n))  # 2, 2, 2, 1 either way
    assert not _differs("array_split blocks", _site(op, _type(5, (0, 1)), n))  # over 2 devices they agree


def test_padded_domain_needs_an_uneven_last_block_before_what_follows():
    assert _differs("padded domain", _site(PAD, _type(5, (0, 1, 2, 3))))
    assert not _differs("padded domain", _site(PAD, _type(8, (0, 1, 2, 3))))  # even blocks: no padding
    assert not _differs("padded domain", _site(ops.Pad((2, 0), (0, 0), 7), _type(5, (0, 1, 2, 3))))  # low side only
    assert _differs("padded domain", _site(CAT, _type(5, (0, 1, 2, 3)), 2))
    assert not _differs("padded domain", _site(CAT, _type(4, (0, 1, 2, 3)), 2))


def test_step_phase_needs_a_step_out_of_phase_with_a_block_boundary():
    t = _type(5, (0, 1, 2, 3))  # blocks [0, 2) [2, 4) [4, 5) [5, 5)
    site = _site(SLICE, t)  # rows 0 and 3; the wrong one takes 0 and 2 (device 1 from its first row)
    wrong = BY_NAME["step phase"].value(site)
    np.testing.assert_array_equal(wrong, site.args[0][[0, 2]])
    assert not _differs("step phase", _site(ops.Slice((0,), (0,), (5,), (2,)), t))  # boundaries 2, 4 in phase
    assert not _differs("step phase", _site(ops.Slice((0,), (1,), (4,), (1,)), t))  # step 1
    # a step that skips devices 1 and 2's whole blocks (rows 1, 6): the wrong one picks row 2 from device 1
    t8 = _type(8, (0, 1, 2, 3))  # blocks of 2: [0, 2) [2, 4) [4, 6) [6, 8)
    np.testing.assert_array_equal(BY_NAME["step phase"].value(_site(ops.Slice((0,), (1,), (8,), (5,)), t8)),
                                  np.arange(16, dtype=np.float32).reshape(8, 2)[[1, 2]] + 1)


def test_blocks_side_by_side_keep_the_shape_and_lose_the_rows():
    site = _site(CAT, _type(4, (0, 1)), 2)
    wrong = BY_NAME["blocks side by side"].value(site)
    x, y = site.args
    np.testing.assert_array_equal(wrong, np.concatenate([x[:2], y[:2], x[2:], y[2:]]))
    assert not _differs("blocks side by side", _site(CAT, _type(4, (0,)), 2))  # one device: nothing to gather


def _default_cases():
    return bundled_cases(0) + [c for index in range(20) for c in drawn(0, index)]


def test_the_default_run_exposes_every_window_class_on_every_dtype():
    cov = Coverage().measure(_default_cases())
    assert {c.name for c in WINDOW_CLASSES} <= {c.name for c in CLASSES}
    for name, rows in ROWS.items():
        for row in rows:
            for d in DTYPES:
                assert name not in missing_classes(cov, row, d), (row, d, name)


def test_without_its_corpus_program_some_classes_are_never_exposed():
    cases = [c for c in _default_cases() if not c.name.startswith("window_classes_every_dtype")]
    cov = Coverage().measure(cases)
    assert "array_split blocks" in missing_classes(cov, "select", "f32")


def test_conform_coverage_prints_the_window_classes(capsys):
    assert main(["conform", "--coverage", "--cases", "0"]) == 0
    table = capsys.readouterr().out.split("data classes:")[1]
    every = " ".join(DTYPES)
    for name, rows in ROWS.items():
        for row in rows:
            assert re.search(rf"^{row}\s+{name}\s+{every}\s+-", table, re.M), (row, name)


def test_the_array_split_gather_mutant_is_killed_by_the_window_classes_program():
    (mutant,) = [m for m in MUTANTS if m.name == "allgather_array_split"]
    (kill,) = hunt(cases_of(CORPUS / "window_classes_every_dtype.rir", "corpus"), mutants=[mutant],
                   backends=("spmd",))
    assert kill.killed and kill.first.startswith("window_classes_every_dtype/"), kill.first
