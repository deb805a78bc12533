"""docs/conformance.md's "Your own backend" can be followed from the page alone:
its backends, taken from the page's python blocks as they stand and written out
as modules, pass `conform --backend module:run` on corpus programs, in one
process and under mpiexec; the page's own-loop backend with a kernel that
ignores its result's layout (the bug the page names) fails it."""

from __future__ import annotations

import contextlib
import io
import re

from helpers import ROOT, run_mpi

import refir
import refir.backend_api as api
from refir.cli import main

PAGE = ROOT / "docs" / "conformance.md"
SECTION = PAGE.read_text().split("## Your own backend", 1)[1].split("\n## ", 1)[0]
BLOCKS = re.findall(r"^```python\n(.*?)^```", SECTION, re.M | re.S)
# Layouts on compute results and communications, a symbol used as a value, uneven
# blocks, a returned parameter, scalars of every kind of elementwise op.
PROGRAMS = [str(ROOT / "conformance" / "corpus" / f"{name}.rir") for name in (
    "scatter_after_permute_sweep", "all_to_all_layouts", "allreduce_symbol_gone", "uneven_allgather",
    "return_parameter_and_copies", "elementwise_all", "layout_only")]
PLANT = ("return laid_out(out, t)", "return np.ascontiguousarray(out)")


def page_block(marker: str) -> str:
    (code,) = [b for b in BLOCKS if marker in b]
    return code


def conform(tmp_path, monkeypatch, module: str, code: str, *programs: str) -> tuple[int, str]:
    (tmp_path / f"{module}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["conform", *programs, "--backend", f"{module}:run", "--cases", "3", "--save", str(tmp_path / "f")])
    return rc, buf.getvalue()


def test_the_page_shows_the_call_and_names_every_type_from_one_module():
    assert "run(lowered: Lowered, inputs: Shards, scalars: dict[str, int], world: World) -> Shards" in SECTION
    for name in ("Lowered", "Segment", "Step", "ops", "Var", "Sym", "Lit", "TensorType", "Shards", "World",
                 "run_spmd", "reference_step", "laid_out", "Communications"):
        assert re.search(rf"^\| [^|]*`{name}\b", SECTION, re.M), name
        assert name in api.__all__ and hasattr(api, name), name
    for code in BLOCKS[1:]:  # the backends import from the facade alone
        imports = re.findall(r"^from (\S+) import|^import (\S+)", code, re.M)
        assert {a or b for a, b in imports} <= {"__future__", "numpy", "refir.backend_api"}, imports


def test_the_page_wrapping_spmd_passes(tmp_path, monkeypatch):
    rc, out = conform(tmp_path, monkeypatch, "page_wrapped", page_block("run_spmd(lowered"), *PROGRAMS)
    assert rc == 0 and "all backends agree" in out, out


def test_the_page_own_loop_passes(tmp_path, monkeypatch):
    rc, out = conform(tmp_path, monkeypatch, "page_own_loop", page_block("own_loop.py"), *PROGRAMS)
    assert rc == 0 and "all backends agree" in out, out
    assert re.search(r"^total +(\d+)/\1$", out, re.M), out


def test_the_page_own_loop_with_its_kernel_ignoring_the_layout_fails(tmp_path, monkeypatch):
    code = page_block("own_loop.py")
    assert code.count(PLANT[0]) == 1
    rc, out = conform(tmp_path, monkeypatch, "page_own_loop_planted", code.replace(*PLANT), *PROGRAMS)
    assert rc == 1, out
    assert re.search(r"^- scatter_after_permute_sweep\S* on page_own_loop_planted:run \[strides", out, re.M), out


def test_the_page_own_loop_passes_under_mpiexec(tmp_path):
    (tmp_path / "page_own_loop.py").write_text(page_block("own_loop.py"))
    done = run_mpi(4, ["-m", "refir", "conform", *PROGRAMS[:4], "--backend", "page_own_loop:run", "--cases", "0",
                       "--save", str(tmp_path / "f")], timeout=240, env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0 and "all backends agree" in done.stdout, done.stdout + done.stderr
    assert re.match(r"refir conform: \d+ cases \(\d+ files\) on 4 MPI ranks", done.stdout), done.stdout


def test_the_page_segments_of_pipeline_are_what_lowering_makes():
    from refir.lowering.lower import lower

    lowered = lower(refir.verify(refir.load(ROOT / "examples" / "pipeline.rir")))
    got = [(s.kind, [(st.out, st.op, tuple(a.name for a in st.args)) for st in s.steps]) for s in lowered.segments]
    assert got == [("compute", [("h", api.ops.Unary("relu"), ("x",))]),
                   ("communication", [("moved", api.ops.SendRecv(axis=0), ("h",))]),
                   ("compute", [("y", api.ops.Binary("mul"), ("moved", "moved"))])]
    assert str(lowered.segments[0].steps[0].type) == "f32[N@DIDx, 8] on s1"
    for shown in ('Step(out="h", op=ops.Unary("relu"), args=(Var("x"),), type=f32[N@DIDx, 8] on s1)',
                  'Step(out="moved", op=ops.SendRecv(axis=0), args=(Var("h"),), ...)',
                  'Step(out="y", op=ops.Binary("mul"), args=(Var("moved"), Var("moved")), ...)'):
        assert shown in SECTION.replace("\n  ", " "), shown
