"""The generator's broadcasting hooks (conformance/generate_broadcast.py): over a
few seeds it draws `expand` (static and symbolic extents, expanded axes sharded)
and matmul of operands of every pair of ranks (1-D operands, batch axes missing,
`b` on either side, the contraction sharded), on uneven blocks, declared layouts,
strided inputs and meshes with permuted ids; and those programs agree on every
backend (issue 27: every new op over the generator's cases)."""

from collections import Counter
from functools import cache

import pytest
from helpers import assert_cases_pass

from conformance.explore import drawn
from conformance.generate import generate
from conformance.shrink import RandomDraw
from refir.checks.verifier import verify
from refir.ir import ops
from refir.ir.types import block

SEEDS = (0, 1)
PROGRAMS = 120


def _kinds(checked: object) -> set[str]:
    """What each expand and matmul of a program is, as the assertions below name it."""
    out = set()
    types = checked.types
    for e in checked.func.eqns:
        if isinstance(e.op, ops.Expand):
            x, y = types[e.args[0].name], types[e.out]
            grown = [(a, b) for a, b in zip(x.axes, y.axes) if a.broadcast]
            out.add("expand")
            out |= {"expand to a symbol" for _, b in grown if isinstance(b.extent, str)}
            out |= {"expand sharded" for _, b in grown if b.shard}
            for _, b in grown:
                if b.shard and isinstance(b.extent, int):
                    n = y.mesh.size(b.shard)
                    if any(hi - lo != -(-b.extent // n) for lo, hi in (block(b.extent, n, k) for k in range(n))):
                        out.add("expand sharded unevenly")
            if y.mesh.ndim > 1 and list(y.mesh.devices) != sorted(y.mesh.devices):
                out.add("expand on a permuted mesh of 2-D or more")
        if isinstance(e.op, ops.Matmul):
            a, b = (types[v.name] for v in e.args)
            out.add(f"matmul {min(a.rank, 3)}x{min(b.rank, 3)}")
            if a.rank != b.rank and min(a.rank, b.rank) >= 2:
                out.add("matmul batch axes missing")
            if any(x.broadcast for x in a.axes[:-2] + b.axes[:-2]):
                out.add("matmul batch b")
            if a.axes[-1].shard:
                out.add("matmul K sharded")
            if a.layout is not None or b.layout is not None:
                out.add("matmul declared layout")
    return out


@cache
def drawn_kinds() -> Counter:
    seen: Counter = Counter()
    for seed in SEEDS:
        for i in range(PROGRAMS):
            seen.update(_kinds(verify(generate(RandomDraw(seed, i)).program)))
    return seen


WANTED = ["expand", "expand to a symbol", "expand sharded", "expand sharded unevenly",
          "expand on a permuted mesh of 2-D or more",
          *(f"matmul {i}x{j}" for i in (1, 2, 3) for j in (1, 2, 3)),
          "matmul batch axes missing", "matmul batch b", "matmul K sharded", "matmul declared layout"]


@pytest.mark.parametrize("kind", WANTED)
def test_the_generator_draws_every_form_of_expand_and_matmul(kind):
    assert drawn_kinds()[kind] > 0, sorted(drawn_kinds().items())


def _first_with(seed: int, wanted: str) -> int:
    return next(i for i in range(PROGRAMS) if wanted in _kinds(verify(generate(RandomDraw(seed, i)).program)))


@pytest.mark.parametrize("wanted", ["expand sharded", "matmul 1x3", "matmul 3x1", "matmul batch b",
                                    "matmul batch axes missing", "matmul K sharded"])
def test_drawn_programs_of_each_form_agree_on_every_backend(wanted):
    index = _first_with(0, wanted)
    assert_cases_pass(drawn(0, index), context=(wanted, index))


@pytest.mark.parametrize("name", ["expand_kept_axis_reversed", "gpu_expand_all_strides_zero",
                                  "matmul_first_batch_repeated"])
def test_the_generated_cases_alone_kill_the_expand_and_matmul_mutants(name):
    from conformance.mutants import MUTANTS
    from conformance.teeth import hunt

    cases = [c for i in range(40) for c in drawn(0, i)]
    (kill,) = hunt(cases, mutants=[m for m in MUTANTS if m.name == name])
    assert kill.killed and kill.first.startswith("gen0-"), (name, kill.first)
