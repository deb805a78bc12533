"""The MPI transport's building blocks, in a child process of one MPI rank (a
plain test run never loads mpi4py): a strided buffer laid out in place by
pack_into, and equal pieces packed by one stacked copy, give the bytes
to_bytes gives (small buffers through numpy's copy, large ones through the
tiled and in-order copies of interp/host_copy.py), and the transport's fold has
interp.impls.fold's bits."""

import subprocess
import sys

from helpers import ROOT

CHILD = r"""
import ml_dtypes
import numpy as np
from mpi4py import MPI

from interp import impls
from interp import host_copy
from interp.mpi_transport import _piece_sizes, _pieces, fold, pack_into, split, to_bytes

rng = np.random.default_rng(0)
base = rng.standard_normal((4, 6, 5)).astype(np.float32)
views = {"c": base, "f": np.asfortranarray(base), "permuted": base.transpose(2, 0, 1),
         "gaps": base[::2, 1::2], "negative": base[::-1], "0-d": base[1, 2, 3, ...],
         "f16 gaps": base.astype(np.float16)[:, ::3].transpose(1, 0, 2)}
big = rng.standard_normal((16, 40, 72)).astype(np.float32)  # 180 KiB: past host_copy's threshold
views |= {"big f": np.asfortranarray(big), "big permuted": big.transpose(2, 0, 1),
          "big f16 f": np.asfortranarray(big.astype(np.float16)), "big negative": np.asfortranarray(big)[::-1]}
for name, x in views.items():
    for axis in range(max(x.ndim, 1)):
        want = to_bytes(x, axis)
        got = np.full_like(want, 7)
        pack_into(got, x, axis)
        assert got.tobytes() == want.tobytes(), (name, axis)
        print("laid out", name, axis, x.strides)
        for split_axis in range(x.ndim):
            for n in (3, 4):
                send = _pieces(x, n, split_axis, axis)
                pieces = [to_bytes(p, axis) for p in split(x, n, split_axis)]
                assert send.tobytes() == b"".join(p.tobytes() for p in pieces), (name, axis, split_axis, n)
                assert _piece_sizes(x.shape, x.itemsize, n, split_axis) == tuple(p.nbytes for p in pieces)
for kernel in (host_copy._tiled, host_copy._in_order):
    assert kernel.signatures, kernel  # the big views went through both compiled copies
for dtype in (np.float16, ml_dtypes.bfloat16, np.float32, np.int8, np.bool_):
    for kind in ("sum", "prod", "max", "min"):
        for n in (1, 2, 4):
            parts = [(rng.standard_normal((3, 5)) * 300).astype(dtype) for _ in range(n)]
            parts[0][0, 0] = np.nan if np.dtype(dtype).kind == "f" else parts[0][0, 0]
            with np.errstate(all="ignore"):
                want, got = impls.fold(kind, parts), fold(kind, parts)
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (dtype, kind, n)
print("folds agree")
"""


def test_datatype_sends_and_fold_keep_the_bits():
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "laid out f 0 (4, 16, 96)" in lines and "laid out negative 2 (-120, 20, 4)" in lines
    assert "laid out big f 2 (4, 64, 2560)" in lines
    assert lines[-1] == "folds agree"
