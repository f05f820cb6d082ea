#!/usr/bin/env bash
# NVIDIA Compute Sanitizer (from the CUDA toolkit) over the GPU path, on a machine with a GPU:
#  - memcheck over every kernel test (cuda_backend_test) and the whole-model test (gpu_model_test);
#  - racecheck and synccheck over the tests of our own kernels (shared memory, barriers);
#  - memcheck and initcheck over a 3-step bf16 training run with block recomputation and an
#    evaluation (cuBLASLt, cuDNN and our kernels together, the gradient norm and AdamW);
#  - where two GPUs and mpirun are there, memcheck on every rank of 3 steps of DP=2 (with the
#    overlapped bucket reduction, and with ZeRO-1), TP=2 with sequence parallelism, and PP=2.
# Prints each tool's summary and exits non-zero when a tool reports an error or a test fails.
#
#   scripts/compute_sanitizer.sh BIN_DIR [OUT_DIR]
#   BIN_DIR holds trainer, cuda_backend_test and gpu_model_test (e.g. build/src + build/tests
#   copied together); each tool's full log goes to OUT_DIR (default /tmp/compute_sanitizer).
#   PARTS (default "tests train layouts") picks the parts: the tests, the one-GPU training run,
#   the two-GPU layouts.
set -uo pipefail
BIN=${1:?usage: scripts/compute_sanitizer.sh BIN_DIR [OUT_DIR]}
OUT=${2:-/tmp/compute_sanitizer}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$CS" ] || { echo "error: compute-sanitizer not found (CUDA toolkit's bin/)" >&2; exit 2; }
nvidia-smi -L > /dev/null 2>&1 || { echo "error: no GPU visible" >&2; exit 2; }
mkdir -p "$OUT/run"
PARTS=${PARTS:-tests train layouts}
OURS='CudaLayerNormTest.*:CudaLayersTest.*:CudaCrossEntropyTest.*:CudaVsCpuTest.*:CudaAttentionFixture.*'
failed=0
check() {  # name command...: runs one tool, keeps its log, prints its summary lines
  local name=$1 log="$OUT/$1.log"
  shift
  "$@" > "$log" 2>&1
  local rc=$?
  local summary tests
  summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1 | sed 's/=* *//')
  tests=$(grep -E '^\[  (PASSED|FAILED)  \] [0-9]' "$log" | tr '\n' ' ')
  echo "$name: exit $rc${summary:+; $summary}${tests:+; $tests}"
  [ $rc -eq 0 ] || failed=1
}
if [[ " $PARTS " == *" tests "* ]]; then
  check memcheck_kernels "$CS" --tool memcheck --error-exitcode 9 "$BIN/cuda_backend_test" --gtest_brief=1
  check memcheck_model "$CS" --tool memcheck --error-exitcode 9 "$BIN/gpu_model_test" --gtest_brief=1
  check racecheck_ours "$CS" --tool racecheck --error-exitcode 9 "$BIN/cuda_backend_test" \
    --gtest_brief=1 --gtest_filter="$OURS"
  check synccheck_ours "$CS" --tool synccheck --error-exitcode 9 "$BIN/cuda_backend_test" \
    --gtest_brief=1 --gtest_filter="$OURS"
fi
cat "$ROOT"/README.md "$ROOT"/docs/*.md > "$OUT/run/text.txt"
"$BIN/trainer" pack --input "$OUT/run/text.txt" --output "$OUT/run/text.h5" --force > /dev/null || exit 1
TRAIN=(train -c "$ROOT/configs/tiny-cpu.yaml" -o Global.device=cuda -o Engine.mix_precision=bf16
  -o Data.train_path="$OUT/run/text.h5" -o Model.recompute=block -o Engine.max_steps=3
  -o Engine.eval_freq=3 -o Engine.logging_freq=1 -o Engine.save_steps=0)
# NCCL probes kernels for other GPU architectures at start and handles the errors itself.
for tool in memcheck initcheck; do
  [[ " $PARTS " == *" train "* ]] || continue
  check "${tool}_train" "$CS" --tool $tool --report-api-errors no --error-exitcode 9 \
    "$BIN/trainer" "${TRAIN[@]}" -o Engine.output_dir="$OUT/run/$tool"
done
if [[ " $PARTS " == *" layouts "* ]] && [ "$(nvidia-smi -L | wc -l)" -ge 2 ] &&
  command -v mpirun > /dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  for layout in "dp2_overlap:-o Distributed.overlap_grad_reduce=true" \
                "dp2_zero1:-o Distributed.zero_stage1=true" \
                "tp2_sp:-o Distributed.tp_degree=2 -o Model.sequence_parallel=true" \
                "pp2:-o Distributed.pp_degree=2"; do
    name=memcheck_${layout%%:*}
    # The tool writes one log per rank (%q{OMPI_COMM_WORLD_RANK}); check() sees mpirun's
    # output, so each rank's summary is printed after it.
    # shellcheck disable=SC2086
    check "$name" timeout 300 mpirun -np 2 --bind-to none "$CS" --tool memcheck \
      --report-api-errors no --error-exitcode 9 --log-file "$OUT/$name.rank%q{OMPI_COMM_WORLD_RANK}.log" \
      "$BIN/trainer" "${TRAIN[@]}" ${layout#*:} -o Engine.output_dir="$OUT/run/$name"
    grep -H 'ERROR SUMMARY' "$OUT/$name".rank*.log | sed "s|$OUT/||"
  done
fi
exit $failed
