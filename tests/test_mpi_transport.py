"""The MPI transport's building blocks, in a child process of one MPI rank (a
plain test run never loads mpi4py): a strided buffer read in place through a
datatype sends the bytes to_bytes would pack, and the transport's fold has
interp.impls.fold's bits."""

import subprocess
import sys

from helpers import ROOT

CHILD = r"""
import ml_dtypes
import numpy as np
from mpi4py import MPI

from interp import impls
from interp.mpi_transport import fold, outgoing, to_bytes

rng = np.random.default_rng(0)
base = rng.standard_normal((4, 6, 5)).astype(np.float32)
views = {"c": base, "f": np.asfortranarray(base), "permuted": base.transpose(2, 0, 1),
         "gaps": base[::2, 1::2], "negative": base[::-1], "0-d": base[1, 2, 3, ...],
         "f16 gaps": base.astype(np.float16)[:, ::3].transpose(1, 0, 2)}
for name, x in views.items():
    for axis in range(max(x.ndim, 1)):
        want = to_bytes(x, axis)
        got = np.empty_like(want)
        MPI.COMM_SELF.Sendrecv(outgoing(x, axis), 0, 0, [got, got.size, MPI.BYTE], 0, 0)
        assert got.tobytes() == want.tobytes(), (name, axis)
        print("sent", name, axis, x.strides)
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
    assert "sent f 0 (4, 16, 96)" in lines and "sent negative 2 (-120, 20, 4)" in lines
    assert lines[-1] == "folds agree"
