"""The conformance summary: columns stay aligned whatever a cell holds."""

from types import SimpleNamespace

from conformance.check import Outcome
from conformance.report import summary


def outcome(group, name, backend, status, note=""):
    return Outcome(SimpleNamespace(group=group, name=name), backend, status, note=note)


def test_summary_columns_align_when_a_cell_holds_skips():
    outcomes = [outcome("corpus", f"c{i}", b, "pass") for i in range(12) for b in ("global", "spmd")]
    outcomes += [outcome("corpus", "big", "spmd", "skip", "big needs 8 ranks, the world has 4"),
                 outcome("corpus", "big", "global", "pass"),
                 outcome("generated", "g0", "global", "pass"), outcome("generated", "g0", "spmd", "pass")]
    text = summary(outcomes, ["global", "spmd"], "4 MPI ranks", 1.25)
    assert text == """\
refir conform: 14 cases (13 corpus, 1 generated) on 4 MPI ranks, 1.2 s

            global             spmd
───────────────────────────────────
corpus       13/13   12/12 (1 skip)
generated      1/1              1/1

total        14/14   13/13 (1 skip)

skipped: big needs 8 ranks, the world has 4

all backends agree"""
