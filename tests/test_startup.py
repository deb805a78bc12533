"""What a process pays before its first run: every MPI rank and every command
line pays it again. ml_dtypes 0.7 takes about half a second of CPU to import,
so refir imports it only where a bf16 is met."""

import subprocess
import sys

from helpers import ROOT

F32_RUN = """import sys
import numpy as np
import refir
from refir.ir.types import DTYPES, dtype_name, is_float
prog = refir.load("examples/pipeline.rir")
x = np.arange(64, dtype=np.float32).reshape(8, 8)
refir.run(prog, {"x": x}, backend="spmd", world=4)
assert list(DTYPES)[-1] == "bf16" and "bf16" in DTYPES and dtype_name(x.dtype) == "f32" and not is_float(np.dtype("V2"))
print("ml_dtypes" in sys.modules)
"""
BF16_RUN = """import sys
import refir
from refir.ir.types import DTYPES, dtype_name, is_bf16, is_float
t = DTYPES["bf16"]
print("ml_dtypes" in sys.modules, dtype_name(t), is_bf16(t), is_float(t), t.itemsize)
"""


def test_a_run_without_bf16_does_not_import_ml_dtypes():
    done = subprocess.run([sys.executable, "-c", F32_RUN], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "False\n", done.stdout + done.stderr


def test_bf16_is_there_when_asked_for():
    done = subprocess.run([sys.executable, "-c", BF16_RUN], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "True bf16 True True 2\n", done.stdout + done.stderr
