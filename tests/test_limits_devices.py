"""Limits that fit each command (issue 30, docs/spec.md §12.2): a mesh of 65,536
devices is checked, lowered and explained in time linear in the devices
(devices_c2); a run is bounded by the memory it allocates, not by a device count
below REFIR_MAX_DEVICES (devices_c3). devices_c1 is in tests/test_verify_types.py."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import numpy as np
import pytest

import refir
from refir.errors import InputError


def allgather(n: int, rows: int = 2) -> str:
    return (f"mesh m = [{', '.join(map(str, range(n)))}]\n"
            f"func main(x: f32[{n * rows}@DIDx, 4] on m) {{\n"
            f"  y: f32[{n * rows}, 4] on m = set(x)\n  return y\n}}\n")


def allreduce_add(n: int) -> str:
    return (f"mesh m = [{', '.join(map(str, range(n)))}]\n"
            f"func main(x: f32[{2 * n}@DIDx, 4], bias: f32[4]) {{\n"
            "  s: f32[4] = sum(x, dims=[0])\n  t: f32[4] = add(s, bias)\n  return t\n}\n")


def cli(tmp_path, text: str, *args: str) -> tuple[str, float]:
    """stdout and CPU seconds of `python -m refir ARGS PROG` in a fresh process."""
    path = tmp_path / "p.rir"
    path.write_text(text)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "refir", args[0], str(path), *args[1:]], capture_output=True,
                          text=True, timeout=600, env={k: v for k, v in os.environ.items() if k != "REFIR_MAX_DEVICES"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    return done.stdout, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def test_devices_c2_a_mesh_of_65536_devices_is_lowered_and_explained_in_seconds(tmp_path):
    """At the default limit, with no variable raised. The listing stays a few lines:
    the team as a range, not 65,536 ids; the CPU budget is generous (2 shared cores),
    a listing of every pair (4 billion moves) would never finish."""
    text = allgather(65536)
    out, cpu = cli(tmp_path, text, "lower")
    assert "on devices (0..65535)" in out and "team (0..65535)" in out
    assert len(out) < 2000, len(out)
    assert cpu < 30, f"lower of 65,536 devices took {cpu:.1f} s of CPU"
    out, cpu = cli(tmp_path, text, "explain")
    assert "each of the 65536 devices sends its 32 B block to the other 65535 of its team" in out
    assert len(out) < 20000, len(out)
    assert cpu < 40, f"explain of 65,536 devices took {cpu:.1f} s of CPU"


def test_devices_c2_lower_lists_the_first_and_last_teams_around_a_count():
    from refir.explain.lowered_listing import format_lowered
    from refir.lowering.lower import lower

    ids = [[z * 16 + i for i in range(16)] for z in range(16)]
    text = (f"mesh m = {ids}\nfunc main(x: f32[32@DIDy, 16@DIDx]) {{\n  y: f32[32, 16@DIDx] = set(x)\n"
            "  return y\n}\n")
    listing = format_lowered(lower(refir.verify(refir.parse(text))))
    teams = [line.strip() for line in listing.split("\n") if line.strip().startswith(("team", "..."))]
    assert teams == [*(f"team ({' '.join(str(z * 16 + i) for z in range(16))})" for i in range(7)),
                     "... 8 more teams of 16 (explain --json lists every one)",
                     f"team ({' '.join(str(z * 16 + 15) for z in range(16))})"]
    assert "on devices (0..255)" in listing


def test_devices_c2_a_small_mesh_lists_every_team_and_id():
    from refir.explain.lowered_listing import format_lowered
    from refir.lowering.lower import lower

    text = ("mesh m = [[0, 1], [2, 3]]\nfunc main(x: f32[4@DIDy, 4@DIDx]) {\n  y: f32[4, 4@DIDx] = set(x)\n"
            "  return y\n}\n")
    listing = format_lowered(lower(refir.verify(refir.parse(text))))
    assert "on devices (0 1 2 3)" in listing and "team (0 2)" in listing and "team (1 3)" in listing


def test_devices_c3_a_run_past_the_old_device_count_is_bounded_by_its_memory(monkeypatch):
    """2,048 devices (refused by a device count of 1,024 before): a run of small
    blocks runs; one whose replicas are over REFIR_MAX_RUN_BYTES is refused by
    memory_c1, before anything is allocated, not by a count of devices."""
    n = 2048
    x = (np.arange(2 * n * 4) % 8).astype(np.float32).reshape(2 * n, 4)  # sums exact in float32
    bias = np.ones(4, np.float32)
    got = refir.run(refir.parse(allreduce_add(n)), {"x": x, "bias": bias}, backend="spmd").outputs["t"]
    assert got.tolist() == (x.astype(np.float64).sum(axis=0) + 1).tolist()
    monkeypatch.setenv("REFIR_MAX_RUN_BYTES", str(64 << 20))  # the replicas: 2048 x 2048 x 2 x 4 x 4 B = 128 MiB
    with pytest.raises(InputError, match=r"memory_c1") as info:
        refir.run(refir.parse(allgather(n)), {"x": np.zeros((2 * n, 4), np.float32)}, backend="spmd")
    assert "devices_c1" not in str(info.value) and "replicated over 2048 devices" in str(info.value)


def test_devices_c2_trace_of_a_large_team_shows_its_first_and_last_devices(tmp_path, capsys):
    """trace lists 12 of 128 devices (a count for the rest) and each one's 127
    receipts as one line of senders and bytes, not 128 x 127 lines; a small team
    still lists each receipt."""
    from helpers import refir_cli

    large, small = tmp_path / "ag128.rir", tmp_path / "ag4.rir"
    large.write_text(allgather(128))
    small.write_text(allgather(4))
    code, out, _ = refir_cli(capsys, "trace", large)
    assert code == 0
    assert "116 more devices: --device D shows one" in out
    assert "from 127 devices (0..4 6..127): 4,064 B in all" in out  # device 5's: 32 B from each other one
    assert "sent 4064 B to 0..4 6..127" in out
    assert "from 3: local" not in out and "\n20 " not in out  # device 20 is one of the 116
    code, out, _ = refir_cli(capsys, "trace", small)
    assert code == 0 and "from 3: local [6:8, 0:4] (32 B)" in out and "sent 96 B to 1 2 3" in out


def test_devices_c2_json_text_is_the_document_one_device_a_line():
    """check/lower/explain --json: written by the C encoder a line at a time
    (json.dumps with indent formats in Python: 137 s for 65,536 devices); it loads
    back to the same document, every device's block on its own line."""
    import io
    import json

    from refir.explain.json_text import _Chunks, json_text, write_json

    doc = {"world": 3, "meshes": {"m": {"shape": [3], "devices": list(range(3))}}, "empty": {}, "none": None,
           "devices": {str(d): {"coords": [d], "ranges": [[d * 2, d * 2 + 2], [0, 4]]} for d in range(40)},
           "teams": [{"devices": list(range(40)), "senders": list(range(40))}], "name": "é\"", "x": 1.5}
    text = json_text(doc)
    assert json.loads(text) == doc
    lines = text.split("\n")
    assert ' "devices": {' in lines and '  "7": {"coords": [7], "ranges": [[14, 16], [0, 4]]},' in lines
    assert f'   "devices": {list(range(40))},' in lines  # a list of numbers: one line, however long
    assert ' "meshes": {"m": {"shape": [3], "devices": [0, 1, 2]}},' in lines  # small: one line
    stream = io.StringIO()
    _Chunks.CHUNK, chunk = 7, _Chunks.CHUNK  # many small writes: the same text
    try:
        write_json(doc, stream)
    finally:
        _Chunks.CHUNK = chunk
    assert stream.getvalue() == text + "\n"
