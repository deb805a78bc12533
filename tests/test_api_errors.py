"""Errors of the Python API and the text that point where the mistake is (issue 25):
a byte-order mark, a duplicate result, builder calls at the caller's line, the
world a program needs, folders, the parser's limits in the builder; and the
listings' grammar and trailing spaces."""

import sys

import numpy as np
import pytest
from helpers import ROOT

import refir
from refir.cli import build_parser, main
from refir.errors import InputError, ParseError, VerifyError
from refir.frontends.builder import Builder

PIPELINE = ROOT / "examples" / "pipeline.rir"
DUMP = ROOT / "docs" / "frontends" / "permute_then_scatter.txt"


def here() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


# ---- the text ------------------------------------------------------------------------------


def test_a_byte_order_mark_is_skipped(tmp_path):
    path = tmp_path / "bom.rir"
    path.write_bytes(b"\xef\xbb\xbf" + PIPELINE.read_bytes())
    assert refir.load(path) == refir.load(PIPELINE)
    assert refir.parse("\ufeff" + PIPELINE.read_text()) == refir.load(PIPELINE)


def test_a_garbage_line_is_shown_escaped_with_the_caret_under_its_column(tmp_path):
    path = tmp_path / "garbage.rir"
    path.write_bytes(b"\x1b[2J\x00 \xb6\n")
    with pytest.raises(ParseError) as info:
        refir.load(path)
    caret = " " * (4 + len("\\x1b[2J\\x00 "))  # under the bad byte, past the escapes
    assert str(info.value) == (f"{path}:1:7\n    \\x1b[2J\\x00 \ufffd\n{caret}^\n"
                               "parse error: byte 0xb6 is not UTF-8 (program text is UTF-8)")


def test_a_duplicate_result_is_named_where_it_stands():
    with pytest.raises(VerifyError) as info:
        refir.parse("mesh m = [0]\nfunc main(x: f32[4]) {\n  y = relu(x)\n  return x, y, y\n}\n", "p.rir")
    assert (info.value.label, info.value.loc.line, info.value.loc.col) == ("func_c4", 4, 16)
    assert info.value.message == "'y' is returned twice (result 1 and result 2)"


# ---- the builder ------------------------------------------------------------------------------


def test_builder_errors_stand_at_the_callers_line():
    b = Builder()
    b.mesh([0, 1])
    x = b.input("x", "f32", ["N@DIDx", 4])
    y = b.input("y", "f32", [3, 4])
    with pytest.raises(VerifyError) as info:
        line = here(); x + y  # noqa: E702
    assert (info.value.loc.file, info.value.loc.line) == (__file__, line)
    assert f"{__file__}:{line}:" in str(info.value) and "line = here(); x + y" in str(info.value)
    assert info.value.message == "in t0: axis 0 has extents N and 3; only b axes broadcast"
    with pytest.raises(InputError) as info:
        line = here(); x.set(shard={0: "DIDq"})  # noqa: E702
    assert str(info.value).startswith(f"{__file__}:{line}:") and "use DIDx, DIDy or DIDz" in str(info.value)


def test_a_built_program_runs_with_its_equations_placed_at_the_builder_calls():
    b = Builder()
    b.mesh([0, 1])
    x = b.input("x", "f32", ["N@DIDx", 4])
    line = here(); y = x.relu()  # noqa: E702
    b.output(y)
    program = b.build()
    assert (program.funcs[0].eqns[0].loc.file, program.funcs[0].eqns[0].loc.line) == (__file__, line)
    assert refir.parse(refir.print_program(program)) == program


def test_the_builder_refuses_what_the_parser_would_not_read_back():
    b = Builder()
    b.mesh([0])
    with pytest.raises(InputError, match=r"a tensor of static extents \[1000000000000, 1000000000000\] has "
                                         r"1000000000000000000000000 elements, over refir's limit"):
        b.input("x", "f32", [10**12, 10**12])
    with pytest.raises(InputError, match="the extent 100000000000000000000... has 21 digits"):
        b.input("y", "f32", [10**20])
    x = b.input("z", "f32", [4])
    with pytest.raises(InputError, match="the integer operand has 1001 digits"):
        x * 10**1000
    with pytest.raises(ParseError, match="digits"):  # what the builder refuses, the parser refuses too
        refir.parse("mesh m = [0]\nfunc main(x: f32[100000000000000000000]) {\n  return x\n}\n")


def test_refirs_own_builder_calls_are_not_placed_at_refirs_lines(capsys):
    # `redistribute` builds its program with the builder: a bad option is the user's, not dtensor.py's.
    assert main(["redistribute", "--mesh", "2", "--shape", "4", "--from", "S0", "--to", "R", "--dtype", "nope"]) == 2
    assert capsys.readouterr().err == ("error: unknown dtype 'nope' (known: bool, i8, i16, i32, i64, u8, f16, f32, "
                                       "f64, bf16)\n")
    assert main(["redistribute", "--mesh", "2", "--shape", "-4", "--from", "S0", "--to", "R"]) == 2
    assert capsys.readouterr().err == "error: verify error [type_c6]: axis 0 has a negative extent -4\n"
    b = Builder()
    with pytest.raises(InputError) as info:
        line = here(); b.mesh(list(range(70000)))  # noqa: E702
    assert str(info.value).startswith(f"{__file__}:{line}:9: mesh 'm' names device 69999, which needs a world of "
                                      "70000 devices, over refir's limit")


# ---- the API ------------------------------------------------------------------------------------


def test_the_world_advised_is_the_one_the_program_needs():
    program = refir.load(PIPELINE)  # meshes [0, 1] and [2, 3]: a world of 4
    x = {"x": np.zeros((4, 8), np.float32)}
    with pytest.raises(InputError, match=r"^world=0: a world is a whole number of ranks, at least one "
                                         r"\(this program needs 4\)$"):
        refir.run(program, x, world=0)
    with pytest.raises(InputError, match=r"^mesh 's1' names device 1, outside a world of 1 rank "
                                         r"\(run with --world 4 or mpirun -n 4\)$"):
        refir.run(program, x, world=1)


def test_loading_a_folder_says_it_is_a_folder():
    for name in ("examples", ROOT / "examples"):
        with pytest.raises(InputError, match=r"cannot read .*examples: it is a folder \(give a file in it\)"):
            refir.load(name if isinstance(name, type(ROOT)) else str(ROOT / name))


def test_from_nvfuser_speaks_of_links_and_the_cli_of_link(capsys):
    with pytest.raises(InputError) as info:
        refir.from_nvfuser(DUMP.read_text(), links={"T9": "T2"})
    assert str(info.value) == "links={'T9': 'T2'}: <dump> has no TensorView T9 (it has T0, T1, T2, T3, T4)"
    with pytest.raises(InputError, match=r"^links='T3=T2': map each later input"):
        refir.from_nvfuser(DUMP.read_text(), links="T3=T2")
    assert main(["import-nvfuser", str(DUMP), "--link", "T9=T2"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --link T9=T2: {DUMP} has no TensorView T9 (it has T0, T1, T2, T3, T4)\n"


# ---- help and listings ----------------------------------------------------------------------------


def test_help_lists_every_command_with_a_line():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    described = parser.description.split("\n\n")[1].splitlines()
    assert [line.split()[0] for line in described] == list(commands)
    assert all(len(line.split()) > 2 for line in described)


def test_piped_output_has_no_trailing_spaces_and_one_segment_is_singular(capsys, tmp_path):
    for command in ("explain", "trace", "lower"):
        assert main([command, str(PIPELINE)]) == 0
        out = capsys.readouterr().out
        assert out.count("\n") > 10 and not [line for line in out.splitlines() if line != line.rstrip()], command
    path = tmp_path / "one.rir"
    path.write_text("mesh m = [0]\nfunc main(x: f32[4]) {\n  y = relu(x)\n  return y\n}\n")
    assert main(["lower", str(path)]) == 0
    assert capsys.readouterr().out.startswith("func main: 1 segment\n")
    assert main(["redistribute", "--mesh", "2", "--shape", "4", "--from", "S0", "--to", "R"]) == 0
    out = capsys.readouterr().out
    assert not [line for line in out.splitlines() if line != line.rstrip()]
