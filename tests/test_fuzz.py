"""Fuzzing: mutated and generated program texts, inputs and command lines go through
parse, verify, lower and run (the command line, in-process). Any exception that is not
a RefirError fails, as does a case over the time limit or over the memory limit.

CI runs a bounded, derandomized number of cases (the `ci` hypothesis profile). The long
mode runs many more, with fresh randomness:

    REFIR_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest -q tests/test_fuzz.py
"""

import io
import os
import signal
import tracemalloc
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from helpers import OWN_EXAMPLES, ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refir.cli import main

LONG = int(os.environ.get("REFIR_FUZZ_EXAMPLES", "0"))
fuzz_settings = settings(max_examples=LONG, derandomize=False, deadline=None,
                         suppress_health_check=list(HealthCheck)) if LONG else settings(
                         suppress_health_check=list(HealthCheck))

SECONDS = 60  # per case: generous for a loaded 2-core CI machine; a case normally takes well under one
MEGABYTES = 128  # per case, as tracemalloc counts Python and numpy allocations
SEEDS = [p.read_text() for p in sorted((ROOT / "conformance" / "corpus").glob("*.rir"))[:12]] + [
    p.read_text() for p in OWN_EXAMPLES]
# Tokens a mutation may splice in: the language's own, and the edges of its input space.
TOKENS = ["[", "]", "(", ")", "{", "}", ",", ":", "=", "@", "\n", "#", " ", "b", "on", "layout", "DIDx", "DIDy",
          "DIDz", "mesh", "func", "return", "set", "add", "sum", "dims=[0]", "f32", "i8", "bool", "N", "x",
          "0", "1", "-1", "3", "65536", "1099511627776", "9" * 40, "1e999", "1.5", "-0.0", "nan",
          "# expect: y = x", "# expect: y = x.sum(0)", "# expect: y = (", "# bind: N=4", "# bind: N=-1",
          "\x00", "\xff", "é", "\t", "[" * 50, "]" * 50]


@contextmanager
def bounded(what: str):
    """Fail when the block runs over SECONDS or allocates over MEGABYTES."""

    def timeout(signum, frame):
        raise AssertionError(f"{what}: over the time limit of {SECONDS} s")

    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(SECONDS)
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
        assert peak < MEGABYTES << 20, f"{what}: {peak >> 20} MiB, over the memory limit of {MEGABYTES} MiB"
    finally:
        tracemalloc.stop()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_cli(args: list[str], what: str) -> int:
    """`python -m refir ARGS` in-process: it returns 0, 1 or 2, or argparse exits 2."""
    with bounded(what):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code
    assert code in (0, 1, 2), f"{what}: exit status {code}"
    return code


@st.composite
def mutated_text(draw) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 40)))
        kind = draw(st.sampled_from(["delete", "insert", "duplicate", "replace"]))
        if kind == "delete":
            text = text[:i] + text[j:]
        elif kind == "insert":
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]
        elif kind == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        else:
            text = text[:i] + draw(st.text(max_size=6)) + text[j:]
    return text


@pytest.fixture
def small_limits(monkeypatch):
    """Limits that keep every run small (the fuzz looks for crashes, not big data)."""
    monkeypatch.setenv("REFIR_MAX_ELEMENTS", str(1 << 14))
    monkeypatch.setenv("REFIR_MAX_DEVICES", "16")


@fuzz_settings
@given(text=mutated_text(), seed=st.integers(0, 3), backend=st.sampled_from(["global", "spmd"]))
def test_mutated_programs_give_refir_errors_only(tmp_path_factory, small_limits, capsys, text, seed, backend):
    path = tmp_path_factory.mktemp("fuzz") / "p.rir"
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    what = f"program:\n{text}"
    if run_cli(["check", path], what) == 0:
        run_cli(["lower", path], what)
        run_cli(["run", path, "--seed", seed, "--backend", backend], what)
    capsys.readouterr()


ARG_VALUES = st.one_of(st.sampled_from(["-1", "0", "1", "2", "4", "1099511627776", "9" * 30, "1.5", "", "-", "x",
                                        "N=4", "N=-1", "N=1e3", "=", "nowhere.npz", "/dev/null", "."]),
                       st.text(max_size=8))


@fuzz_settings
@given(command=st.sampled_from(["run", "check", "lower", "conform", None]),
       options=st.lists(st.tuples(st.sampled_from(["--seed", "--bind", "--world", "--inputs", "--out", "--backend",
                                                   "--func", "--cases", "--no-corpus", "-v", "--junit", "--save"]),
                                  ARG_VALUES), max_size=4))
def test_generated_command_lines_give_refir_errors_only(tmp_path_factory, small_limits, capsys, monkeypatch,
                                                       command, options):
    where = tmp_path_factory.mktemp("cli")
    monkeypatch.chdir(where)
    program = OWN_EXAMPLES[0]
    args = [command] if command else []
    if command in ("run", "check", "lower"):
        args.append(program)
    flat = [str(x) for pair in options for x in pair]
    if command in (None, "conform"):
        flat += ["--no-corpus", "--cases", "0"] if "--cases" not in flat else ["--no-corpus"]
    run_cli(args + flat, f"refir {' '.join(map(str, args + flat))}")
    capsys.readouterr()


def npz_bytes(arrays: dict) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


@fuzz_settings
@given(flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6),
       cut=st.one_of(st.none(), st.integers(0, 10_000)),
       shape=st.sampled_from([(4, 4), (2, 4), (4,), (4, 4, 1), ()]),
       dtype=st.sampled_from([np.int32, np.int64, np.float32, np.uint8, bool]))
def test_mutated_inputs_give_refir_errors_only(tmp_path_factory, small_limits, capsys, flips, cut, shape, dtype):
    data = bytearray(npz_bytes({"x": np.ones(shape, dtype)}))
    for at, byte in flips:
        data[at % len(data)] = byte
    if cut is not None:
        data = data[:cut % (len(data) + 1)]
    path = tmp_path_factory.mktemp("inputs") / "in.npz"
    path.write_bytes(bytes(data))
    program = Path(tmp_path_factory.mktemp("prog")) / "p.rir"
    program.write_text("mesh m = [0, 1]\nfunc main(x: i32[N@DIDx, 4]) {\n  s: i32[4] = sum(x, dims=[0])\n"
                       "  return s\n}\n# expect: s = x.sum(0, dtype=np.int32)\n")
    run_cli(["run", program, "--inputs", path], f"inputs {bytes(data)[:80]!r}...")
    capsys.readouterr()


def test_the_zip_reader_refuses_what_the_fuzz_cannot_reach(tmp_path, capsys):
    """Members that are not .npy, and pickled objects."""
    odd = tmp_path / "odd.npz"
    with zipfile.ZipFile(odd, "w") as z:
        z.writestr("x.txt", b"hello")
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, x=np.array([{"a": 1}], dtype=object))
    program = OWN_EXAMPLES[0]
    assert run_cli(["run", program, "--inputs", odd], "odd") == 2
    assert "is not an .npy array" in capsys.readouterr().err
    assert run_cli(["run", program, "--inputs", pickled], "pickled") == 2
    assert "holds Python objects" in capsys.readouterr().err
