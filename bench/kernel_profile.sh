#!/usr/bin/env bash
# Per-kernel times of training steps on one GPU, with Nsight Compute (ncu, in the CUDA toolkit):
# every kernel of the steps after three warm-up steps (graph builds and GEMM tuning happen in the
# first two) is timed on its own (gpu__time_duration, clocks left alone). Engine.profile brackets
# those steps with cudaProfilerStart/Stop, and ncu starts with profiling off, so nothing before
# them is intercepted for timing. bench/kernel_summary.py then sums one step by kernel.
# docs/performance.md ("What limits a step") shows a result.
#
#   bench/kernel_profile.sh TRAINER OUT_CSV [extra trainer -o overrides...]
#   env: NCU (default /usr/local/cuda/bin/ncu), WORK (default /tmp/bench), MODEL (default
#        configs/gpt2-124m.yaml), B (default 32), STEPS (profiled steps, default 1)
set -euo pipefail
TRAINER=$1 OUT=$2; shift 2
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NCU=${NCU:-/usr/local/cuda/bin/ncu}
WORK=${WORK:-/tmp/bench}
B=${B:-32}
mkdir -p "$WORK"
source "$ROOT/bench/random_tokens.sh"
random_tokens random 20000000  # the same stream as gpu_vs_pytorch.sh's MATCH_PEER=0
"$NCU" --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \
  "$TRAINER" train -c "$ROOT/${MODEL:-configs/gpt2-124m.yaml}" \
  -o Data.train_path="$WORK/random.h5" -o Global.micro_batch_size="$B" \
  -o Global.global_batch_size="$B" -o Engine.max_steps=$((3 + ${STEPS:-1})) -o Engine.profile=true \
  -o Engine.logging_freq=1 -o Engine.eval_freq=0 -o Engine.save_steps=0 \
  -o Engine.output_dir="$WORK/kernel-profile" -o Checkpoint.resume= -o Global.device=cuda \
  -o Data.val_path= -o Data.val_fraction=0 "$@" > "$OUT"
