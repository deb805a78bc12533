"""The receive-buffer sentinel (interp/sentinel.py, spec §9.1): what it writes
fails the comparator for every dtype, it is off unless asked for, every
transport's receive buffers hold it before they are written, and correct
results keep their bits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, run_mpi

import refir
from conformance.cases import CORPUS, cases_of
from conformance.compare import bad_elements
from interp import sentinel
from refir.ir.types import DTYPES


@pytest.fixture
def armed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sentinel, "_ARMED", [True])


@pytest.fixture
def disarmed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sentinel, "_ARMED", [False])


@pytest.mark.parametrize("name", list(DTYPES))
def test_an_unwritten_element_fails_the_comparison_in_every_dtype(name: str, armed: None) -> None:
    dtype = DTYPES[name]
    got = sentinel.empty((6,), dtype)
    rng = np.random.default_rng(0)
    if dtype == np.bool_:
        want = np.array([True, False] * 3)
    else:
        want = rng.integers(-100, 100, 6).astype(dtype)
    assert bad_elements(got, want, np.zeros(6)).all(), got
    # a byte buffer holding elements of the dtype (what MPI receives into) too
    as_bytes = sentinel.empty_bytes(6 * dtype.itemsize, dtype).view(dtype)
    assert bad_elements(as_bytes, want, np.zeros(6)).all()


def test_nothing_is_filled_where_it_is_not_armed(disarmed: None) -> None:
    x = np.arange(4, dtype=np.float32)
    assert sentinel.fill(x) is x and x.tolist() == [0, 1, 2, 3]
    b = np.zeros(8, np.uint8)
    assert sentinel.fill_bytes(b, np.int32).tolist() == [0] * 8


def _armed_in_a_fresh_process(env: dict[str, str], code: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k != sentinel.ENV}
    done = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return [line.split()[1] for line in done.stdout.splitlines() if line.startswith("ARMED ")]


def test_off_by_default_on_in_conform_and_forced_by_the_variable() -> None:
    code = ("from interp import sentinel; print('ARMED', sentinel.armed()); sentinel.arm(); "
            "print('ARMED', sentinel.armed())")
    assert _armed_in_a_fresh_process({}, code) == ["False", "True"]
    assert _armed_in_a_fresh_process({"REFIR_SENTINEL": "0"}, code) == ["False", "False"]
    assert _armed_in_a_fresh_process({"REFIR_SENTINEL": "1"}, code) == ["True", "True"]
    # a plain run leaves it off; conform arms it
    plain = ("import numpy as np, refir; from interp import sentinel\n"
             "refir.run('mesh m = [0, 1]\\nfunc main(x: f32[4@DIDx]) {\\n  y: f32[4@DIDx] = neg(x)\\n  return y\\n}', "
             "{'x': np.ones(4, 'f4')})\n"
             "print('ARMED', sentinel.armed())\n"
             "from refir.cli import main; main(['conform', '--no-corpus', '--cases', '0', '--backend', 'spmd'])\n"
             "print('ARMED', sentinel.armed())")
    assert _armed_in_a_fresh_process({}, plain) == ["False", "True"]


def test_in_process_collectives_make_their_buffers_with_the_sentinel(armed: None,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A concatenation that never writes its first block leaves the sentinel there."""
    import interp.collectives as collectives

    real = np.concatenate

    def skips_first(xs: list[np.ndarray], axis: int, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            return real(xs, axis=axis)
        np.copyto(out[xs[0].shape[0]:], real(xs[1:], axis=axis))
        return out

    monkeypatch.setattr(collectives.np, "concatenate", skips_first)
    got = collectives.NUMPY.concatenate([np.ones((2, 3), np.float32), np.zeros((1, 3), np.float32)], 0)
    assert np.isnan(got[:2]).all() and (got[2] == 0).all()
    folded = collectives.NUMPY.fold("sum", [np.ones(3, np.int32)] * 2)
    assert folded.tolist() == [2, 2, 2]


def test_mpi_results_and_receive_scratch_hold_the_sentinel(armed: None) -> None:
    from interp.mpi import pools

    assert np.isnan(pools.result((4, 5), np.dtype(np.float32))).all()
    big = (1 << 15,)  # 128 KiB of f32: a kept result, handed out again once nobody holds it
    first = pools.result(big, np.dtype(np.float32))
    first[...] = 1.0
    address = first.ctypes.data
    del first
    again = pools.result(big, np.dtype(np.float32))
    assert again.ctypes.data == address and np.isnan(again).all()
    received = pools.scratch("received", (1 << 15,), np.dtype(np.int32))
    assert (received.view(np.uint8) == sentinel.BYTE).all()
    send = pools.scratch("send", (1 << 15,), np.dtype(np.int32))
    send[...] = 7
    assert (pools.scratch("send", (1 << 15,), np.dtype(np.int32)) == 7).all()  # a send buffer is not filled


def test_the_mpi_allgathers_receive_buffer_holds_the_sentinel_around_its_own_block(armed: None) -> None:
    """What MpiTransport.allgather receives the others' blocks into (in place,
    MPI_IN_PLACE): this rank's block at its place, the sentinel elsewhere."""
    from interp.mpi.transport import MpiTransport

    class Member:
        rank = 1

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = MpiTransport._own_block_in_place(Member(), x, 0, [24, 24, 24]).view(np.float32)
    assert np.isnan(got[:6]).all() and np.isnan(got[12:]).all() and got[6:12].tolist() == list(range(6))


def test_gpu_receive_buffers_hold_the_sentinel(armed: None) -> None:
    from gpu_backend.buffers.buffer import download
    from gpu_backend.transports.device_arrays import received

    assert np.isnan(download(received((2, 3), np.dtype(np.float32), (1, 0)))).all()
    assert (download(received((5,), np.dtype(np.int16))).view(np.uint8) == sentinel.BYTE).all()
    assert (download(received((), np.dtype(np.bool_))).view(np.uint8) == sentinel.BYTE).all()
    assert np.isnan(download(received((3,), DTYPES["bf16"])).astype(np.float32)).all()


def test_the_gpu_pool_clears_blocks_it_hands_out_only_where_armed(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_backend.buffers.pool import SizeClassPool

    cleared: list[int] = []
    pool = SizeClassPool(bytearray, lambda block, size: cleared.append(size))
    monkeypatch.setattr(sentinel, "_ARMED", [False])
    block, size = pool.take(1000)
    assert cleared == []
    pool.give(block, size)
    monkeypatch.setattr(sentinel, "_ARMED", [True])
    again, _ = pool.take(1000)  # a reused block too
    assert again is block and cleared == [size]


CORPUS_FILES = ["comm_every_dtype", "uneven_allgather", "uneven_all_to_all", "reduce_scatter_noncontig",
                "mesh2d_every_axis", "cast_every_dtype"]


def _outputs(backend: str) -> dict[str, bytes]:
    out = {}
    for name in CORPUS_FILES:
        for case in cases_of(CORPUS / f"{name}.rir"):
            got = refir.run(case.program, case.inputs(), backend=backend, world=None)
            out.update({f"{case.name}:{r}": np.ascontiguousarray(v).tobytes() for r, v in got.outputs.items()})
    return out


@pytest.mark.parametrize("backend", ["spmd", "gpu"])
def test_correct_results_keep_their_bits(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sentinel, "_ARMED", [False])
    plain = _outputs(backend)
    monkeypatch.setattr(sentinel, "_ARMED", [True])
    assert _outputs(backend) == plain and plain


BITS_UNDER_MPI = """
import sys, numpy as np, refir
from conformance.cases import CORPUS, cases_of
from interp import sentinel
def outputs():
    out = {}
    for name in sys.argv[1:]:
        for case in cases_of(CORPUS / f"{name}.rir"):
            got = refir.run(case.program, case.inputs(), everywhere=True)
            out.update({f"{case.name}:{r}": np.ascontiguousarray(v).tobytes() for r, v in got.outputs.items()})
    return out
sentinel._ARMED[0] = False
plain = outputs()
sentinel._ARMED[0] = True
assert outputs() == plain and plain, "bits differ with the sentinel"
print("same bits", len(plain))
"""


def test_correct_results_keep_their_bits_under_mpi() -> None:
    done = run_mpi(4, ["-c", BITS_UNDER_MPI, *CORPUS_FILES[:5]], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("same bits") == 4


def test_the_docs_name_the_switch() -> None:
    for doc in ("docs/spec.md", "docs/conformance.md"):
        assert "REFIR_SENTINEL" in (Path(ROOT) / doc).read_text(), doc
