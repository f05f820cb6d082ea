#!/usr/bin/env bash
# Two ranks given one GPU (CUDA_VISIBLE_DEVICES=0 for both, as a launcher without GPU binding
# does on a one-GPU host): `trainer train` stops both ranks before NCCL's setup, exit 5, with one
# line naming the two ranks, the host and the fix (NCCL itself would stop with "duplicate GPU",
# naming neither). Skips (77) without a GPU.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
require_gpus 1
make_small_dataset data.h5
export CUDA_VISIBLE_DEVICES=0
expect_error 5 "ranks 0 and 1 on host $(hostname) were given the same GPU, and each rank needs one of its own" \
  run_np 2 train -c "$SRC/configs/tiny-cpu.yaml" -o Global.device=cuda -o Data.train_path=data.h5 \
  -o Engine.output_dir=out -o Engine.max_steps=2
grep -q "Start at most one rank per GPU of each host" err.log || fail "no fix in the error line"
[ ! -e out/metrics.jsonl ] || fail "a step ran"
echo "PASS"
