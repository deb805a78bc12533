#!/usr/bin/env bash
# The gpu backend on real GPUs: one session, logged to $OUT.
#
#   bash gpu_backend/device_session.sh     (repository root, .whl/ carried: made here
#                                          by gpu_backend/prepare_wheels.sh)
#   STAGES="kernels bench" bash gpu_backend/device_session.sh     (some stages only)
#   SUBSET="conformance/corpus/window_*.rir" STAGES=subset bash gpu_backend/device_session.sh
#
# Installs nothing but the carried wheels, into /tmp/site, first on PYTHONPATH
# (numpy 2.4.6 before the machine's 2.5.2, nccl4py without its dependencies),
# then runs these stages, one rank per GPU wherever MPI is used:
#   env              versions, GPUs, MPI library, NCCL
#   examples         every shared example on gpu in one process, against spmd
#   mpi-examples     every example that fits the GPUs, under mpiexec (NCCL)
#   mpi-collectives  the nine communications with random layouts, through NCCL (COLL_CASES=N: the first N only)
#   kernels          tests/test_gpu_kernels.py, test_gpu_mask_kernels.py, test_gpu_row_words.py and test_gpu_matmul_route.py
#                    (matmuls of different ranks through cuBLAS), the in-process collective tests,
#                    tests/test_gpu_replay.py
#   tests            pytest -v on $TESTS (files or node ids) alone, e.g. a failing kernels test again
#   cli              `python -m refir run ... --backend gpu` under mpiexec
#   conform          the conformance corpus and 40 generated programs on gpu, in one process
#   mpi-conform      the corpus (programs that fit the GPUs) and 20 generated ones, under mpiexec
#   bf16             tests/test_gpu_bf16.py and a bf16 nvFuser import: bf16 kernels compiled for the GPU
#   dtensor          redistributes through torch DTensor and through refir (gpu), every local block compared
#   dtensor-uneven   uneven blocks next to torch DTensor's redistribute, on 2 GPUs (gpu_backend/checks/dtensor_uneven.py)
#   mpi-faults       REFIR_FAULT injected on either rank of a 2-GPU NCCL run: the job ends with an error, never hangs
#   probe            benchmarks/kernel_probe.py $PROBE: launch-geometry variants of the kernels, one GPU
#   bench            benchmarks/gpu_bench.py: permutes, reductions, elementwise, collectives at 1 MiB and 1 GiB next to torch and the copy ceiling
#   bench-run        benchmarks/gpu_bench.py run: whole refir.run calls of the seed-2 pattern next to torch
#                    (under mpiexec with one rank per GPU: replayed under MPI where there are two GPUs)
#   bench-run-alone  the same with one rank that takes the MPI path (REFIR_MPI_ALONE=1: the agreement,
#                    the replay round, a one-rank NCCL allreduce, the gather), for one GPU
#   mpi-replay       tests/test_mpi_replay.py as the driver, one rank per GPU (one GPU: REFIR_MPI_ALONE=1):
#                    replayed runs under MPI, NCCL calls included, bit for bit those of the full path
#   bench-uneven     benchmarks/gpu_bench.py uneven: allgather and reduce_scatter, even vs uneven (pad-and-slice), next to torch
#   bench-coll       benchmarks/gpu_bench.py collectives: the collectives table alone (GPU_BENCH_MIB sets the sizes)
#   phases           benchmarks/collective_phases.py: each collective's phases timed apart, its wire several ways, torch
#   pack             benchmarks/collective_packing.py: all_to_all's and reduce_scatter's local copies alone, one GPU
#   bench-layer      benchmarks/gpu_bench.py layer-ops (issue 27's ops next to torch and the copy ceiling at
#                    GPU_BENCH_MIB, each row's values checked first), then benchmarks/mask_ulps.py, one GPU
# (the benchmarks come last: correctness first when the budget runs short)
# A failing or slow stage never stops the next; each has a time limit and the
# whole run keeps within $BUDGET seconds (the device tool stops a command at 600).
# Back in $OUT: summary.txt (each stage's exit status and time), session.log
# (every stage's output), bench.txt, bench-run.txt, bench-layer.txt and mask-ulps.txt.
set -x
cd "$(dirname "$0")/.."
export OUT=${OUT:-$PWD/device-logs}
mkdir -p "$OUT"
: > "$OUT/summary.txt"
: > "$OUT/session.log"
export PY=${PYTHON:-$(command -v python3)}  # absolute: ranks under mpiexec get another PATH
MPIEXEC=${MPIEXEC:-$(command -v /usr/bin/mpiexec || command -v mpiexec)}
export MPIEXEC
export REFIR_SHARED=$PWD/.whl/shared PYTHONPATH=/tmp/site:$PWD
export NUMBA_ENABLE_CUDASIM=0 NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0 PYTHONDONTWRITEBYTECODE=1 REFIR_MPI_TIMEOUT=120
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
# NVLink multicast stays off (the machine's rule: it can take the host's GPUs down).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
START=$SECONDS
BUDGET=${BUDGET:-560}

stage() {  # stage NAME SECONDS COMMAND...: run within a time limit, log, record the status
  local name=$1 limit=$2 left=$((BUDGET - (SECONDS - START)))
  shift 2
  if [[ -n ${STAGES:-} && " $STAGES " != *" $name "* && $name != install ]]; then return; fi
  ((limit > left)) && limit=$left
  if ((limit < 15)); then
    echo "$name skipped: no time left" | tee -a "$OUT/summary.txt"
    return
  fi
  local t0=$SECONDS log=/tmp/stage-$name.log
  LIMIT=$limit timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
  local rc=$?
  { echo "=================== $name: rc=$rc, $((SECONDS - t0)) s"; cat "$log"; } >> "$OUT/session.log"
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$OUT/summary.txt"
  tail -n 25 "$log"
}

ranks() {  # ranks N ARGS...: N pythons under mpiexec, one GPU each
  local n=$1
  shift
  "$MPIEXEC" -n "$n" -x PYTHONPATH -x REFIR_SHARED -x NUMBA_ENABLE_CUDASIM -x NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS \
    -x REFIR_MPI_TIMEOUT -x PYTHONDONTWRITEBYTECODE -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST \
    -x NVSHMEM_DISABLE_NVLS ${REFIR_FAULT:+-x REFIR_FAULT} ${REFIR_MPI_ALONE:+-x REFIR_MPI_ALONE} \
    ${REFIR_GPU_GRAPH_NCCL:+-x REFIR_GPU_GRAPH_NCCL} ${GPU_BENCH_MIB:+-x GPU_BENCH_MIB} \
    bash -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec "$0" "$@"' "$PY" "$@"
}

cli() {
  local f
  for f in "$REFIR_SHARED"/examples/{layouts,allreduce_then_bias}.rir; do
    ranks "$NGPU" -m mpi4py -m refir run "$f" --backend gpu || return 1
  done
}

faults() {  # each fault in its own 2-rank launch (a fault ends its job), a 5 s timeout for every wait
  local f=/tmp/fault.rir spec t0 rc bad=0
  printf 'mesh m = [0, 1]\nfunc main(x: f32[8@DIDx, 3]) {\n  s = sum(x, dims=[0])\n  return s\n}\n' > $f
  for spec in 1:collective:raise 1:collective:stall 1:collective:kill 0:gather:raise; do
    t0=$SECONDS
    REFIR_FAULT=$spec REFIR_MPI_TIMEOUT=5 timeout 90 bash -c 'ranks 2 -m mpi4py -m refir run "$0" --backend gpu' \
      "$f" > /tmp/fault.log 2>&1
    rc=$?
    local said
    said=$(grep -m1 -E "error|BAD TERMINATION|exited on signal" /tmp/fault.log)
    echo "$spec: rc=$rc, $((SECONDS - t0)) s: $said"
    if ((rc == 0 || rc == 124)) || [[ -z $said ]]; then bad=1; tail -n 20 /tmp/fault.log; fi
  done
  return $bad
}

NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")}
((NGPU > 0)) || NGPU=1
export NGPU
export -f ranks cli faults
# Numba compiles each kernel on one core: several test processes at once, if pytest-xdist is there.
WORKERS=$("$PY" -c "import xdist; print('-n 6')" 2>/dev/null)

stage install 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/numpy-*.whl .whl/nccl4py-*.whl .whl/ml_dtypes-*.whl
stage env 60 bash -c '
  nvidia-smi; "$PY" --version; "$MPIEXEC" --version
  "$PY" -m pip list 2>/dev/null | grep -iE "nccl|cuda|numba|mpi|cupy|torch|numpy|pytest|hypothesis|nvfuser"
  "$PY" -c "from mpi4py import MPI; print(MPI.Get_library_version())"
  "$PY" -c "import numpy; print(\"numpy\", numpy.__version__, numpy.__file__)"
  "$PY" -c "import nccl.core as n; n.show_versions()"
  "$PY" -c "from gpu_backend.device import SIMULATED, cuda; print(\"simulated:\", SIMULATED); cuda.detect()"'
stage examples 120 "$PY" -m pytest -q -p no:cacheprovider -rfE tests/test_gpu_examples.py -k "not under_mpi"
stage mpi-examples 120 bash -c 'ranks "$NGPU" -m mpi4py tests/test_gpu_examples.py'
stage mpi-collectives 120 bash -c 'ranks "$NGPU" -m mpi4py tests/test_gpu_collectives.py $COLL_CASES'
stage kernels 420 "$PY" -m pytest -q -p no:cacheprovider -rfE $WORKERS tests/test_gpu_kernels.py \
  tests/test_gpu_mask_kernels.py tests/test_gpu_row_words.py tests/test_gpu_matmul_route.py tests/test_gpu_collectives.py \
  tests/test_gpu_replay.py -k "not under_mpi"
stage cli 90 bash -c cli
stage tests 420 bash -c '"$PY" -m pytest -v -p no:cacheprovider -rfE --tb=short $WORKERS -k "not under_mpi" $TESTS'
stage conform 330 "$PY" -m refir conform --backend gpu --cases 40 --seed 3
# some corpus programs alone (SUBSET: files or globs), e.g. the newest ops' when time is short
stage subset 150 bash -c '"$PY" -m refir conform --backend gpu --no-mpi --cases 0 $SUBSET' 
stage mpi-replay 300 bash -c 'REFIR_MPI_ALONE=$((NGPU == 1)) ranks "$NGPU" -m mpi4py tests/test_mpi_replay.py'
stage mpi-conform 300 bash -c 'ranks "$NGPU" -m mpi4py -m refir conform --backend gpu --cases 20 --seed 5'
stage bf16 100 "$PY" -m pytest -q -p no:cacheprovider -rfE tests/test_gpu_bf16.py \
  tests/test_nvfuser_import.py::test_row_parallel_linear_in_bf16_with_two_segments
stage dtensor 150 bash -c 'ranks "$NGPU" -m mpi4py gpu_backend/checks/dtensor.py'
stage dtensor-uneven 150 bash -c 'ranks 2 -m mpi4py gpu_backend/checks/dtensor_uneven.py'
stage mpi-faults 200 bash -c faults
stage probe 240 bash -c 'set -o pipefail; "$PY" -m benchmarks.kernel_probe $PROBE | tee "$OUT/probe.txt"'
stage bench 300 bash -c 'set -o pipefail; ranks "$NGPU" -m mpi4py -m benchmarks.gpu_bench | tee "$OUT/bench.txt"'
stage bench-run 240 bash -c 'set -o pipefail; ranks "$NGPU" -m mpi4py -m benchmarks.gpu_bench run | tee "$OUT/bench-run.txt"'
stage bench-run-alone 240 bash -c 'set -o pipefail; REFIR_MPI_ALONE=1 ranks 1 -m mpi4py -m benchmarks.gpu_bench run | tee "$OUT/bench-run-alone.txt"'
stage bench-uneven 120 bash -c 'set -o pipefail; ranks "$NGPU" -m mpi4py -m benchmarks.gpu_bench uneven | tee "$OUT/bench-uneven.txt"'
stage bench-coll 120 bash -c 'set -o pipefail; ranks "$NGPU" -m mpi4py -m benchmarks.gpu_bench collectives | tee "$OUT/bench-coll.txt"'
stage phases 150 bash -c 'set -o pipefail; ranks "$NGPU" -m mpi4py -m benchmarks.collective_phases | tee "$OUT/phases.txt"'
stage pack 150 bash -c 'set -o pipefail; "$PY" -m benchmarks.collective_packing | tee "$OUT/pack.txt"'
stage bench-layer 240 bash -c 'set -o pipefail; rc=0; "$PY" -m benchmarks.gpu_bench layer-ops | tee "$OUT/bench-layer.txt" \
  || rc=1; "$PY" -m benchmarks.mask_ulps | tee "$OUT/mask-ulps.txt" || rc=1; exit $rc'

echo "=== done in $((SECONDS - START))s"
cat "$OUT/summary.txt"
