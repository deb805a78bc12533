#!/usr/bin/env bash
# Everything gpu_backend/device_session.sh needs on the GPU machine that is not
# there, into .whl/ (git-ignored; the device tool carries it): cp312 wheels of
# numpy 2.4.6 (numba there fails to import with the machine's numpy 2.5.2) and
# nccl4py 0.6.0, ml-dtypes 0.6.0 (bf16; not in the machine's torch image), and a copy of
# the shared examples (../shared does not travel).
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=${PIP:-python3 -m pip}
rm -rf .whl && mkdir -p .whl/shared
$PIP download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux_2_28_x86_64 -d .whl numpy==2.4.6 nccl4py==0.6.0 ml-dtypes==0.6.0
cp -r "${REFIR_SHARED:-../shared}/examples" .whl/shared/
ls -lR .whl
du -sh .whl
