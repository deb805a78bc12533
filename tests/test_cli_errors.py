"""One line where a traceback or a silent drop used to be (issue 25): output paths
checked before the work, environment values, mistyped commands, --bind, byte-order
marks and garbage bytes, duplicate results, builder locations, world advice, help."""

import argparse
import json

import pytest
from helpers import ROOT, refir_cli, refused, run_mpi

from conformance.cli import add_arguments, check_modes
from refir import env
from refir.errors import InputError

PIPELINE = ROOT / "examples" / "pipeline.rir"  # needs a world of 4; N over 2 devices
DUMP = ROOT / "docs" / "frontends" / "permute_then_scatter.txt"
BOUND = """\
mesh m = [0, 1]
func main(x: f32[N@DIDx, K] on m) {
  y: f32[N@DIDx, K] on m = relu(x)
  return y
}
# bind: N=6 K=3
"""




def written(tmp_path, text: str, name: str = "prog.rir"):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- output paths are checked before anything is printed ---------------------------------


@pytest.mark.parametrize("option", ["--svg", "--html"])
def test_explain_refuses_an_unwritable_picture_before_printing(capsys, tmp_path, option):
    err = refused(capsys, "explain", PIPELINE, option, tmp_path / "missing" / "x.svg")
    assert err == f"error: {option} {tmp_path}/missing/x.svg: the folder {tmp_path}/missing does not exist\n"
    err = refused(capsys, "explain", PIPELINE, option, "-")
    assert err == f"error: {option} '-': give the name of a file to write\n"


def test_import_nvfuser_refuses_an_unwritable_output_before_the_work(capsys, tmp_path):
    err = refused(capsys, "import-nvfuser", DUMP, "-o", tmp_path / "missing" / "p.rir")
    assert err == f"error: -o {tmp_path}/missing/p.rir: the folder {tmp_path}/missing does not exist\n"


@pytest.mark.parametrize("args, message", [
    (["explain", PIPELINE, "--svg", ""], "--svg '': give the name of a file to write"),
    (["import-nvfuser", DUMP, "-o", ""], "-o '': give the name of a file to write"),
    (["run", PIPELINE, "--out", ""], "--out '': give the name of a file to write"),
])
def test_an_empty_file_name_is_refused_not_ignored(capsys, args, message):
    assert refused(capsys, *args) == f"error: {message}\n"


def test_import_nvfuser_of_a_binary_file_is_one_line_without_raw_bytes(capsys, tmp_path):
    path = tmp_path / "dump.bin"
    path.write_bytes(b"\x7fELF\x02\x01\x00\x1b[31m\xb6 rest\n")
    err = refused(capsys, "import-nvfuser", path)
    assert err.endswith("parse error: byte 0xb6 is not UTF-8 (program text is UTF-8)\n")
    assert all(c.isprintable() or c == "\n" for c in err), err  # no ESC, no NUL reaches the terminal
    assert "\\x7fELF\\x02\\x01\\x00\\x1b[31m" in err


def test_explain_json_with_svg_writes_both(capsys, tmp_path):
    svg = tmp_path / "j.svg"
    code, out, _ = refir_cli(capsys, "explain", PIPELINE, "--json", "--svg", svg)
    assert code == 0 and json.loads(out)["world"] == 4
    assert svg.read_text().startswith("<svg") and "send_recv" in svg.read_text()


# ---- environment ---------------------------------------------------------------------------


@pytest.mark.parametrize("name, value, message", [
    ("REFIR_MPI_TIMEOUT", "abc", "REFIR_MPI_TIMEOUT='abc' is not a number of seconds (write e.g. "
                                 "REFIR_MPI_TIMEOUT=120)"),
    ("REFIR_MPI_TIMEOUT", "nan", "REFIR_MPI_TIMEOUT='nan' is not a number of seconds"),
    ("REFIR_MPI_TIMEOUT", "-1", "REFIR_MPI_TIMEOUT='-1' is not a number of seconds"),
    ("REFIR_GPU_POOL", "off", "REFIR_GPU_POOL='off': write REFIR_GPU_POOL=0 (off) or REFIR_GPU_POOL=1 (on)"),
    ("REFIR_MPI_ALONE", "yes", "REFIR_MPI_ALONE='yes': write REFIR_MPI_ALONE=0"),
    ("REFIR_FAULT", "1:inputs", "REFIR_FAULT='1:inputs': write RANK:STAGE:KIND"),
    ("REFIR_MAX_ELEMENTS", "lots", "REFIR_MAX_ELEMENTS='lots' is not a non-negative integer"),
    ("REFIR_MPI_NODE_RANKS", "0", "REFIR_MPI_NODE_RANKS='0' is not a positive number of ranks (write e.g. "
                                  "REFIR_MPI_NODE_RANKS=1: every rank its own node)"),
    ("REFIR_MPI_NODE_RANKS", "1.5", "REFIR_MPI_NODE_RANKS='1.5' is not a positive number of ranks"),
    ("REFIR_MPI_NODE_RANKS", "-2", "REFIR_MPI_NODE_RANKS='-2' is not a positive number of ranks"),
])
def test_a_bad_environment_value_is_one_line(capsys, monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    assert refused(capsys, "check", PIPELINE).startswith(f"error: {message}")


def test_environment_values_parse():
    assert env.seconds("REFIR_" + "NOT_SET_ANYWHERE", 120) == 120
    assert env.flag("REFIR_" + "NOT_SET_ANYWHERE", True) is True


def test_the_node_rule_parses(monkeypatch):
    monkeypatch.delenv("REFIR_MPI_NODE_RANKS", raising=False)
    assert env.node_ranks() is None
    for text, k in ((" 1 ", 1), ("2", 2), ("64", 64)):
        monkeypatch.setenv("REFIR_MPI_NODE_RANKS", text)
        assert env.node_ranks() == k
    monkeypatch.setenv("REFIR_MPI_NODE_RANKS", "\u0663")  # a digit to str.isdigit and int(): only ASCII ones are taken
    with pytest.raises(InputError, match="is not a positive number of ranks"):
        env.node_ranks()


def test_a_bad_mpi_timeout_ends_every_rank_with_one_line():
    done = run_mpi(4, ["-m", "refir", "run", str(PIPELINE)], timeout=90, env={"REFIR_MPI_TIMEOUT": "abc"})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert [line for line in done.stderr.splitlines() if "error" in line] == [
        "error: REFIR_MPI_TIMEOUT='abc' is not a number of seconds (write e.g. REFIR_MPI_TIMEOUT=120)"]


# ---- commands and options --------------------------------------------------------------------


def test_a_mistyped_command_is_named_and_a_real_path_still_runs_conform(capsys, tmp_path, monkeypatch):
    assert refused(capsys, "expalin", PIPELINE) == "error: unknown command 'expalin', did you mean explain\n"
    assert refused(capsys, "frobnicate").startswith("error: unknown command 'frobnicate' (commands: run, check,")
    monkeypatch.chdir(tmp_path)
    written(tmp_path, PIPELINE.read_text(), "expalin")  # a file of that name is a program, as before
    code, out, err = refir_cli(capsys, "expalin", "--cases", 0, "--backend", "global")
    assert code == 0 and "all backends agree" in out, (out, err)


@pytest.mark.parametrize("command", ["explain", "trace"])
def test_a_world_of_no_rank_is_refused_by_every_command(capsys, command):
    assert refused(capsys, command, PIPELINE, "--world", 0) == "error: --world 0: a world has at least one rank\n"
    assert refused(capsys, command, PIPELINE, "--world", 70000).startswith("error: --world asks for 70000 devices")


def test_a_negative_seed_is_refused_by_trace_too(capsys):
    assert refused(capsys, "trace", PIPELINE, "--seed", -1) == "error: --seed -1: a seed is a non-negative integer\n"


def test_lower_and_check_honour_bind(capsys):
    code, out, _ = refir_cli(capsys, "lower", PIPELINE, "--bind", "N=3")
    assert code == 0 and out.startswith("func main: 3 segments (N=3)\n  input x: f32[3@DIDx, 8] on s1  local [2, 8] ")
    assert "axis 0: 3 over 2 -> device 0:2, 1:1 short" in out
    code, out, _ = refir_cli(capsys, "lower", PIPELINE)
    assert "local [ceil(N/2), 8]" in out and "(N=" not in out  # without --bind: symbols, as before
    code, out, _ = refir_cli(capsys, "check", PIPELINE, "--bind", "N=3")
    assert code == 0 and "func main(x: f32[3@DIDx, 8] on s1) {" in out and out.endswith(": ok with N=3\n")
    assert "  moved: f32[3@DIDx, 8] on s2 = set(h)\n" in out


def test_conform_refuses_an_unknown_backend_and_an_empty_folder_before_the_work(capsys, tmp_path):
    err = refused(capsys, "conform", "--backend", "nope", "--cases", 0, "--no-corpus")
    assert err == "error: unknown backend 'nope' (global, spmd, gpu, or module:callable)\n"
    assert refused(capsys, "conform", tmp_path) == f"error: {tmp_path} is a folder with no .rir file in it\n"


def conform_args(*argv: str):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(list(argv))
    check_modes(args)
    return args


def test_conform_mode_options(capsys):
    assert conform_args("--mutant", "max_drops_nan").mutants  # --mutant implies --mutants
    assert conform_args("--mutant", "mpi_broadcast_root_world_rank").mutants  # the MPI batch names these
    assert conform_args("--until-killed").mutants
    assert not conform_args("--cases", "0").mutants
    assert refused(capsys, "conform", "--coverage", "--mutants") == (
        "error: --coverage and --mutants (or --mutant, --kills-json, --until-killed) are separate runs: give one\n")
    assert refused(capsys, "conform", "--coverage", "--until-killed").startswith("error: --coverage and --mutants")
    assert refused(capsys, "--coverage", "--mutant", "max_drops_nan").startswith("error: --coverage and --mutants")
    assert refused(capsys, "conform", "--mutant", "max_drop_nan") == (
        "error: --mutant max_drop_nan: no such mutant, did you mean max_drops_nan\n")
    assert refused(capsys, "conform", "--mutants", "--junit", "j.xml").startswith("error: --junit reports the suite")


# ---- bindings ------------------------------------------------------------------------------------


def test_bind_merges_over_the_files_line_and_refuses_a_symbol_bound_twice(capsys, tmp_path):
    path = written(tmp_path, BOUND)
    code, out, _ = refir_cli(capsys, "explain", path, "--json", "--bind", "N=4")
    assert code == 0 and json.loads(out)["bindings"] == {"K": 3, "N": 4}  # K from the file, N from --bind
    err = refused(capsys, "run", path, "--bind", "N=4", "N=5")
    assert err == "error: --bind: N is bound twice (N=4 and N=5): bind it once\n"


def test_a_bind_line_naming_an_unknown_symbol_is_refused_at_its_line(capsys, tmp_path):
    path = written(tmp_path, BOUND.replace("K=3", "Q=3"))
    assert refused(capsys, "run", path) == (f"error: {path}:6: the # bind: line names 'Q', which is a symbol of no "
                                            "function (symbols: K, N)\n")
    path = written(tmp_path, BOUND.replace("K=3", "N=3"))
    assert refused(capsys, "explain", path).startswith(f"error: {path}:6: the # bind: line: N is bound twice")
