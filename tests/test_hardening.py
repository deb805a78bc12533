"""Untrusted programs, bad inputs and huge requests: each is a RefirError (exit 2, a
message with its location where it has one), never a traceback, a wrong result, code
run from the text, or an allocation attempted before the limit is checked.

The command line runs in-process here (`refir.cli.main`), so that many cases stay cheap."""

import io
import subprocess
import sys
import time
import warnings
import zipfile

import numpy as np
import pytest
from helpers import OWN_EXAMPLES, ROOT, refir_cli, refused

import refir
from refir.checks.expect_eval import evaluate
from refir.errors import InputError, Loc

OK = """\
mesh m = [0, 1]
func main(x: i32[N@DIDx, 4]) {
  s: i32[4] = sum(x, dims=[0])
  return s
}
# expect: s = x.sum(0, dtype=np.int32)
"""




def program(tmp_path, text, name="p.rir"):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


# ---- security: expect lines never reach eval ------------------------------------------------


@pytest.mark.parametrize("expr, why", [
    ('__import__("os").system("touch PWNED")', "the attribute .system"),
    ('__import__("os").system("touch PWNED") or x', "BoolOp"),
    ("exit(7)", "a call of anything but"),
    ("x.__class__", "the attribute .__class__"),
    ("np.sum.__globals__", "np.sum.__globals__"),
    ("np.save('f.npy', x)", "np.save"),
    ("np.random.rand(3)", "np.random.rand"),
    ("x.tofile('f')", "the attribute .tofile"),
    ("(lambda: x)()", "a call of anything but"),
    ("[v for v in x]", "ListComp"),
    ("f'{x}'", "JoinedStr"),
    ("os", "the name 'os'"),
    ("x if x else x", "IfExp"),
    ("2 ** 10 ** 10", "more than 4096 bits"),
    ("'a' * 10 ** 9", "arithmetic on strings"),
    ("x.astype('U100000')", "astype must be a numpy dtype"),
    ("np.load('/etc/passwd')", "np.load takes one path ending in .npz"),
    ("(" * 300 + "x" + ")" * 300, "not an expression"),
    ("-" * 5000 + "x", "too deeply nested"),
])
def test_expect_lines_outside_the_whitelist_are_input_errors_at_their_line(tmp_path, capsys, expr, why):
    path = program(tmp_path, OK.replace("x.sum(0, dtype=np.int32)", expr))
    err = refused(capsys, "run", path)
    assert err.startswith(f"error: {path}:6:1\n") and why in err, err
    assert not (tmp_path / "PWNED").exists() and not (ROOT / "PWNED").exists()


def test_the_evaluator_computes_what_the_examples_need():
    loc = Loc("p.rir", 1, 1)
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    scope = {"x": x, "N": 3}
    np.testing.assert_array_equal(evaluate("np.bitwise_xor.reduce(x, 0)", scope, loc), np.bitwise_xor.reduce(x, 0))
    np.testing.assert_array_equal(evaluate("x.sum(0, dtype=np.int8)[1:3]", scope, loc), x.sum(0, dtype=np.int8)[1:3])
    np.testing.assert_array_equal(evaluate("(x.T @ x)[:, None] >= N", scope, loc), (x.T @ x)[:, None] >= 3)
    assert evaluate("x.shape[0] * N - 1", scope, loc) == 8
    np.testing.assert_array_equal(evaluate("np.einsum('ij,ik->jk', x, x)", scope, loc), x.T @ x)
    with pytest.raises(InputError, match="over refir's limit"):
        evaluate("x[:, :, None, None] * x[None, None, :, :]", {"x": np.zeros((200, 200))}, loc)


def test_an_expect_line_may_load_an_npz_of_results(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "want.npz", s=np.array([8, 8, 8, 8], np.int32))
    path = program(tmp_path, OK.replace("x.sum(0, dtype=np.int32)", "np.load('want.npz')['s']"))
    np.savez(tmp_path / "in.npz", x=np.full((4, 4), 2, np.int32))
    code, out, _ = refir_cli(capsys, "run", path, "--inputs", tmp_path / "in.npz")
    assert code == 0 and "all 1 expect lines hold" in out


def test_a_long_expect_line_parses_in_linear_time():
    text = OK.replace("x.sum(0, dtype=np.int32)", "x.sum(0, dtype=np.int32)" + " " * 40_000 + "+ 0 ")
    start = time.perf_counter()
    p = refir.parse(text)
    assert time.perf_counter() - start < 1.0
    assert p.expects[0].expr == "x.sum(0, dtype=np.int32)" + " " * 40_000 + "+ 0"


# ---- resource limits: refused before allocating ---------------------------------------------


def npz_claiming(path, shape, data=b""):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<i4", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", header.getvalue() + data)
    return path


def test_an_npz_header_claiming_2_to_the_40_elements(tmp_path, capsys):
    npz = npz_claiming(tmp_path / "huge.npz", (1 << 40, 4))
    err = refused(capsys, "run", program(tmp_path, OK), "--inputs", npz)
    assert "member 'x.npy' of shape (1099511627776, 4) has 4398046511104 elements, over refir's limit" in err
    assert "REFIR_MAX_ELEMENTS" in err


def test_a_compressed_member_that_inflates_huge(tmp_path, capsys, monkeypatch):
    # 4 MiB of zeros compress to a few KiB; the limits are lowered so the test stays small
    npz = npz_claiming(tmp_path / "bomb.npz", (1 << 20,), bytes(4 << 20))
    assert npz.stat().st_size < 64 << 10
    monkeypatch.setenv("REFIR_MAX_INPUT_BYTES", str(1 << 20))
    err = refused(capsys, "run", program(tmp_path, OK), "--inputs", npz)
    assert "its members uncompress to 4194432 bytes, over refir's limit of 1048576" in err
    monkeypatch.setenv("REFIR_MAX_INPUT_BYTES", str(1 << 30))
    monkeypatch.setenv("REFIR_MAX_ELEMENTS", str(1 << 16))
    err = refused(capsys, "run", program(tmp_path, OK), "--inputs", npz)
    assert "of shape (1048576,) has 1048576 elements, over refir's limit of 65536" in err


def test_a_member_shorter_than_its_header(tmp_path, capsys):
    npz = npz_claiming(tmp_path / "short.npz", (3, 4), bytes(8))
    assert "is shorter than its header's shape (3, 4) needs" in refused(capsys, "run", program(tmp_path, OK),
                                                                          "--inputs", npz)


def test_an_extent_of_2_to_the_40_in_a_program(tmp_path, capsys):
    path = program(tmp_path, "mesh m = [0]\nfunc main(x: f32[1099511627776]) {\n  return x\n}\n")
    err = refused(capsys, "run", path)
    assert err.startswith(f"error: {path}:2:14: a tensor of static extents [1099511627776] has 1099511627776 "
                          "elements, over refir's limit of 134217728 (raise it with REFIR_MAX_ELEMENTS=N)")


def test_an_extent_of_2_to_the_40_from_bind(tmp_path, capsys):
    err = refused(capsys, "run", program(tmp_path, OK), "--bind", "N=1099511627776")
    assert "with N=1099511627776, x: i32[N@DIDx, 4] on m of shape (1099511627776, 4) has" in err


def test_the_limit_can_be_raised(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("REFIR_MAX_ELEMENTS", "16")
    assert "over refir's limit of 16" in refused(capsys, "run", program(tmp_path, OK), "--bind", "N=8")
    monkeypatch.setenv("REFIR_MAX_ELEMENTS", "32")
    assert refir_cli(capsys, "run", program(tmp_path, OK), "--bind", "N=8")[0] == 0
    monkeypatch.setenv("REFIR_MAX_ELEMENTS", "lots")
    assert "REFIR_MAX_ELEMENTS='lots' is not a non-negative integer" in refused(capsys, "run", program(tmp_path, OK))


def test_a_mesh_id_of_10_to_the_9(tmp_path, capsys):
    path = program(tmp_path, "mesh m = [0, 1000000000]\nfunc main(x: f32[4]) {\n  return x\n}\n")
    err = refused(capsys, "check", path)
    assert err.startswith(f"error: {path}:1:14: device id 1000000000 needs a world of 1000000001 devices, "
                          "over refir's limit of 65536 (raise it with REFIR_MAX_DEVICES=N) [devices_c1]")


def test_a_world_of_10_to_the_9(tmp_path, capsys):
    assert "--world asks for 1000000000 devices" in refused(capsys, "run", program(tmp_path, OK),
                                                             "--world", 1_000_000_000)


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/zero.rir", "/dev/stdin.rir", "."])
def test_a_program_path_that_is_not_a_regular_file(capsys, path):
    assert refused(capsys, "check", path).startswith(f"error: cannot read {path}: ")


# ---- bad input is a RefirError --------------------------------------------------------------


def test_non_utf8_bytes_are_a_parse_error_at_their_place(tmp_path, capsys):
    path = program(tmp_path, b"mesh m = [0]\nfunc main(x: f32[4]) {\n  return x \xff\xfe\n}\n")
    err = refused(capsys, "check", path)
    assert err.startswith(f"error: {path}:3:12\n") and "byte 0xff is not UTF-8" in err


@pytest.mark.parametrize("where", ["extent", "literal", "mesh"])
def test_integers_with_thousands_of_digits(tmp_path, capsys, where):
    digits = "9" * 5000
    text = {"extent": f"mesh m = [0]\nfunc main(x: f32[{digits}]) {{\n  return x\n}}\n",
            "literal": f"mesh m = [0]\nfunc main(x: i64[4]) {{\n  y = add(x, {digits})\n  return y\n}}\n",
            "mesh": f"mesh m = [{digits}]\nfunc main(x: f32[4]) {{\n  return x\n}}\n"}[where]
    err = refused(capsys, "check", program(tmp_path, text))
    assert "has 5000 digits; " + ("an integer literal has at most 1000" if where == "literal" else
                                  "extents, device ids, dims and layouts fit in 64 bits") in err
    assert max(len(line) for line in err.splitlines()) < 200  # a window of the line, not all of it


def test_hundreds_of_nested_brackets(tmp_path, capsys):
    text = "mesh m = " + "[" * 500 + "0" + "]" * 500 + "\nfunc main(x: f32[4]) {\n  return x\n}\n"
    err = refused(capsys, "check", program(tmp_path, text))
    assert "verify error [mesh_c1]: a mesh must be a non-empty 1- to 3-D array" in err


@pytest.mark.parametrize("bind", ["N=-3", "N=2.5", "N=", "=4", "N=١٢", "N=0x10"])
def test_bad_bindings(tmp_path, capsys, bind):
    assert "write NAME=N, N a non-negative integer" in refused(capsys, "run", program(tmp_path, OK), "--bind", bind)


def test_a_negative_seed(tmp_path, capsys):
    assert "--seed -1: a seed is a non-negative integer" in refused(capsys, "run", program(tmp_path, OK),
                                                                    "--seed", -1)
    assert "both are non-negative integers" in refused(capsys, "conform", "--seed", -1, "--cases", 0)


def test_an_npy_or_an_empty_file_as_inputs(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((4, 4), np.int32))
    (tmp_path / "empty.npz").write_bytes(b"")
    err = refused(capsys, "run", program(tmp_path, OK), "--inputs", tmp_path / "x.npy")
    assert "not an .npz archive (a single .npy array? save inputs with np.savez(path, name=array))" in err
    assert "not an .npz archive" in refused(capsys, "run", program(tmp_path, OK), "--inputs", tmp_path / "empty.npz")


def test_out_into_a_missing_folder_is_refused_before_anything_runs(tmp_path, capsys):
    err = refused(capsys, "run", program(tmp_path, OK), "--out", tmp_path / "nowhere" / "out.npz")
    assert f"the folder {tmp_path / 'nowhere'} does not exist" in err


def test_out_naming_a_folder(tmp_path, capsys):
    err = refused(capsys, "run", program(tmp_path, OK), "--out", tmp_path)
    assert "is a folder, not a file to write" in err
    assert not tmp_path.with_suffix(".npz").exists()


def test_out_writes_exactly_the_path_given(tmp_path, capsys):
    code, out, _ = refir_cli(capsys, "run", program(tmp_path, OK), "--seed", 2, "--out", tmp_path / "results")
    assert code == 0 and out.endswith(f"wrote {tmp_path / 'results'}\n")
    assert not (tmp_path / "results.npz").exists()
    with np.load(tmp_path / "results") as got:
        assert got["s"].dtype == np.int32 and got["s"].shape == (4,)


def test_a_crashing_backend_under_run(tmp_path, capsys, monkeypatch):
    (tmp_path / "mybackend.py").write_text(
        "def crash(lowered, inputs, bindings, world):\n    raise ZeroDivisionError('boom')\n"
        "def wrong(lowered, inputs, bindings, world):\n    return 42\n"
        "raise_on_import = None\n")
    (tmp_path / "broken.py").write_text("1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = program(tmp_path, OK)
    assert "backend 'mybackend:crash' failed: ZeroDivisionError: boom" in refused(
        capsys, "run", path, "--backend", "mybackend:crash")
    assert "backend 'mybackend:wrong' returned a int, not a dict" in refused(
        capsys, "run", path, "--backend", "mybackend:wrong")
    assert "cannot load backend 'broken:run': ZeroDivisionError" in refused(capsys, "run", path, "--backend",
                                                                            "broken:run")


def test_a_float_literal_out_of_range(tmp_path, capsys):
    path = program(tmp_path, "mesh m = [0]\nfunc main(x: f32[4]) {\n  y = mul(x, 1e999)\n  return y\n}\n")
    err = refused(capsys, "check", path)
    assert err.startswith(f"error: {path}:3:14\n") and "the float literal 1e999 is out of range" in err
    big = refir.parse("mesh m = [0]\nfunc main(x: f64[4]) {\n  y = mul(x, 1.7e308)\n  return y\n}\n")
    assert refir.parse(refir.print_program(big)) == big  # what prints parses back


def test_a_path_not_ending_in_rir_is_a_path(tmp_path, capsys):
    path = program(tmp_path, OK, "prog.txt")
    code, out, _ = refir_cli(capsys, "check", path)
    assert code == 0 and out.endswith(f"{path}: ok\n")
    assert refused(capsys, "check", "mesh m = [0]").startswith("error: cannot read mesh m = [0]: No such file")


def test_dash_reads_standard_input(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(OK.encode())))
    code, out, _ = refir_cli(capsys, "check", "-")
    assert code == 0 and out.endswith("<stdin>: ok\n")


def test_numpy_warnings_do_not_leak(tmp_path, capsys):
    text = ("mesh m = [0, 1]\nfunc main(x: i64[4@DIDx]) {\n  y = mul(x, 4611686018427387904)\n"
            "  p: i64[] = prod(y, dims=[0])\n  f = cast(x, dtype=f16)\n  g = mul(f, 60000.0)\n  return p, g\n}\n"
            "# expect: p = (x * 4611686018427387904).prod()\n# expect: g = x.astype(np.float16) * np.float16(60000)\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for backend in ("global", "spmd", "gpu"):  # gpu: the CUDA simulator warns from its own threads
            code, out, err = refir_cli(capsys, "run", program(tmp_path, text), "--seed", 3, "--backend", backend)
            assert code == 0 and "warn" not in err.lower() and "all 2 expect lines hold" in out, (out, err)


# ---- a first clone --------------------------------------------------------------------------


def test_version_and_top_level_help():
    done = subprocess.run([sys.executable, "-m", "refir", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.startswith("refir ") and done.stdout.strip() != "refir"
    done = subprocess.run([sys.executable, "-m", "refir", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0
    assert "With no subcommand, refir runs `conform`" in done.stdout
    assert all(f"    {command} " in done.stdout for command in ("run", "check", "lower", "conform"))


def test_conform_options_are_accepted_without_the_subcommand(capsys):
    code, out, _ = refir_cli(capsys, "--no-corpus", "--cases", 0, "--backend", "global")
    assert code == 0, out


@pytest.mark.parametrize("path", OWN_EXAMPLES, ids=lambda p: p.stem)
def test_the_projects_own_examples_hold_their_expect_lines(capsys, path):
    for backend in ("global", "spmd"):
        code, out, err = refir_cli(capsys, "run", path, "--seed", 1, "--backend", backend)
        assert code == 0 and err == "" and "expect lines hold" in out, (out, err)


def test_the_readme_uses_only_files_and_commands_the_repository_has():
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    assert len(quick.strip().splitlines()) == 2  # one fenced block, exactly two commands
    for name in [w for w in readme.split() if w.startswith("examples/") and w.endswith(".rir")]:
        assert (ROOT / name).is_file(), name
    assert (OWN_EXAMPLES and "examples/" in readme)
    # the mpich wheel puts mpirun beside the venv's python: the README says to use that one
    assert ".venv/bin/mpirun -n 4 .venv/bin/python -m refir" in readme
    assert (__import__("pathlib").Path(sys.executable).parent / "mpirun").exists()


def test_docs_point_only_at_files_the_repository_has():
    import re

    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        prose = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.S | re.M)  # code is not links
        for target in re.findall(r"\]\(([^)#\s]+)", re.sub(r"`[^`]*`", "", prose)):  # nor inline code
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{doc.name} links to {target}"
        for target in re.findall(r"`((?:refir|interp|gpu_backend|conformance|tests|docs|examples|benchmarks)"
                                  r"/[\w./-]+\.(?:py|md|rir|sh))`", doc.read_text()):
            assert (ROOT / target).exists(), f"{doc.name} names {target}"
