"""Registers and spills of issue 27's row kernels for sm_90, without a GPU (libnvvm and ptxas only).

    python -m benchmarks.kernel_regs

Registers decide how many blocks of THREADS an SM holds (65,536 a SM: 256 threads at 64
registers or fewer fit four blocks, at 80 three), and so the bytes in flight of a memory-bound
kernel. This compiles each variant of the word copy (gpu_backend/kernels/row_words.py's knobs),
the where kernels (masks' element rows, where_words' 8-byte words) for float32, to PTX as
benchmarks/kernel_ptx.py does, and asks ptxas (CUDA_HOME/bin/ptxas) for its -v report. The GPU's
own figures (kernel_probe `layer`) are the ones that count; these only say which variants can
fit more blocks before a GPU run.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
os.environ["NUMBA_FORCE_CUDA_CC"] = "9.0"
os.environ.setdefault("CUDA_HOME", "/usr/local/cuda-13.0")

import numba.cuda.cuda_paths as cuda_paths  # noqa: E402
import numba.cuda.dispatcher as dispatcher  # noqa: E402
from numba import cuda  # noqa: E402
from numba import types as T  # noqa: E402

dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=(9, 0))  # device functions ask
cuda_paths._get_nvrtc_path = lambda: None  # only consulted to choose the architecture, which is forced

from gpu_backend.kernels import masks, row_words  # noqa: E402
from gpu_backend.kernels.where_words import where_words_kernel  # noqa: E402

I = T.int64  # noqa: E741
U1, U2, U4, U8 = (T.Array(t, 1, "C") for t in (T.uint8, T.uint16, T.uint32, T.uint64))
ROW_WORDS = (U4, U8, U4, U8, *[I] * 15, T.uint32)  # float32's memory as elements and as words
WHERE_ROWS = (U4, I, I, I, T.Array(T.boolean, 1, "C"), I, I, I, I, U4, I, I, I, I, U4, I, I, I, I, I, I, I, I)
WHERE_WORDS = (U8, I, I, I, U2, U1, I, I, I, U8, U4, I, I, I, U8, U4, I, I, I, I, I, I, I)


def report(kernel: Any, signature: tuple[Any, ...], options: dict[str, Any]) -> str:
    ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0), **options)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(ptx)
        ptxas = Path(os.environ["CUDA_HOME"]) / "bin" / "ptxas"
        done = subprocess.run([str(ptxas), "-arch=sm_90", "-v", str(path), "-o", os.devnull],
                              capture_output=True, text=True, check=False)
    regs = re.findall(r"Used (\d+) registers", done.stderr)
    spills = re.findall(r"(\d+) bytes spill stores", done.stderr)
    return f"{','.join(regs) or '?'} registers, {','.join(spills) or '?'} bytes spilled"


def main() -> None:
    for wide, blocks, pairs, step, rows in [
            (True, 0, False, -1, False), (True, 0, False, 1, False), (True, 0, False, 0, False),
            (True, 0, False, 2, False), (False, 0, False, 1, False), (True, 0, True, 1, False),
            (False, 0, True, 1, False), (True, 4, False, 1, False), (True, 4, True, 1, False),
            (True, 0, True, 1, True)]:
        options = {"launch_bounds": (256, blocks)} if blocks else {}
        kernel = row_words.row_words_kernel(2, wide, blocks, pairs, step, rows)
        print(f"row_words f32 wide {wide} min blocks {blocks} pairs {pairs} step {step} rows {rows}: "
              f"{report(kernel, ROW_WORDS, options)}")
    for steps in [(1, 1, 0), (-1, -1, -1)]:
        print(f"where rows f32 steps {steps}: {report(masks.where_rows_kernel(*steps), WHERE_ROWS, {})}")
    for steps in [(1, 1, 0), (1, 1, 1)]:
        print(f"where words f32 steps {steps}: {report(where_words_kernel(2, *steps), WHERE_WORDS, {})}")


if __name__ == "__main__":
    main()
