"""`run --save-inputs FILE.npz` writes the inputs a run drew (or read), so that
`run --inputs FILE.npz` runs them again, on any backend; the README's pair of
commands does exactly that."""

from __future__ import annotations

import contextlib
import io
import shlex

import numpy as np
from helpers import ROOT

import refir
from refir.cli import main
from refir.running.inputs import bindings_for, draw_inputs

BF16 = """mesh m = [0, 1]
func main(x: bf16[5@DIDx, 3]) {
  y = mul(x, 3.0)
  return y
}
"""


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


def readme_commands() -> list[list[str]]:
    """The README's `run` lines that save inputs and run them again."""
    using = (ROOT / "README.md").read_text().split("## Using it", 1)[1].split("\n## ", 1)[0]
    lines = [ln.split("  #")[0] for ln in using.splitlines() if "--save-inputs" in ln or "--inputs in.npz" in ln]
    return [shlex.split(ln)[3:] for ln in lines]


def test_the_readme_draws_saves_and_reruns_the_same_inputs_on_another_backend(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    first, second = readme_commands()
    assert "--seed" in first and "--save-inputs" in first and "--inputs" in second and "--backend" in second
    assert cli(*first)[0] == 0
    saved = dict(np.load(tmp_path / "in.npz"))
    checked = refir.verify(refir.load(ROOT / "examples" / "pipeline.rir"))
    drawn = draw_inputs(checked, bindings_for(checked, []), 1)
    assert saved.keys() == drawn.keys() and all(np.array_equal(saved[k], drawn[k]) for k in drawn)
    rc, out, _ = cli(*second)
    assert rc == 0 and "on gpu" in out and "all 1 expect lines hold" in out, out
    spmd, gpu = np.load(tmp_path / "out.npz"), np.load(tmp_path / "gpu.npz")
    assert np.array_equal(gpu["y"], spmd["y"]) and np.array_equal(spmd["y"], np.maximum(saved["x"], 0) ** 2)


def test_bf16_inputs_come_back_as_bf16_bit_for_bit(tmp_path):
    """numpy has no bfloat16: np.savez writes one as 2-byte records, which a
    bf16 parameter takes back."""
    prog = tmp_path / "b.rir"
    prog.write_text(BF16)
    saved, first, second = tmp_path / "in.npz", tmp_path / "a.npz", tmp_path / "b.npz"
    assert cli("run", str(prog), "--seed", "3", "--save-inputs", str(saved), "--out", str(first))[0] == 0
    rc, _, err = cli("run", str(prog), "--inputs", str(saved), "--out", str(second))
    assert rc == 0, err
    a, b = np.load(first)["y"], np.load(second)["y"]
    assert a.dtype.itemsize == 2 and a.tobytes() == b.tobytes() and np.any(a.view(np.uint16) != 0)


def test_a_run_that_fails_leaves_its_inputs_behind(tmp_path):
    saved = tmp_path / "in.npz"
    rc, _, err = cli("run", str(ROOT / "examples" / "pipeline.rir"), "--seed", "2", "--save-inputs", str(saved),
                     "--backend", "no_such_module:run")
    assert rc == 2 and "no_such_module" in err, err
    assert list(np.load(saved)) == ["x"]


def test_save_inputs_into_a_missing_folder_is_refused_before_anything_runs(tmp_path):
    rc, out, err = cli("run", str(ROOT / "examples" / "pipeline.rir"), "--save-inputs", str(tmp_path / "no" / "x.npz"))
    assert rc == 2 and out == "" and err == f"error: --save-inputs {tmp_path / 'no' / 'x.npz'}: the folder " \
        f"{tmp_path / 'no'} does not exist\n", err
