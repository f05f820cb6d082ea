#!/usr/bin/env bash
# LoRA against full fine-tuning on one GPU (docs/fine-tuning.md): the Llama-3.2-1B shape
# (configs/llama-3.2-1b.yaml, random weights) at micro-batch 8 x 2048 tokens, 30 steps each
# (STEPS) on random tokens; LoRA at rank 16 (alpha 32) on every linear. Prints `trainer plan`'s
# memory for both, then each run's median tokens/s and memory (GiB, metrics.jsonl's memory_gib)
# over the last two thirds of the steps, and the ratios (the aim: LoRA's memory under half of
# full's, tokens/s at least 1.2x). LoRA runs first; each run's log ends in WORK/RUN.log.
#   bench/lora_vs_full.sh TRAINER [WORK]          (WORK default ./lorabench)
#   env: B (micro-batch, default 8), RECOMPUTE (Model.recompute, default the config's: gelu),
#        STEPS (default 30; the medians over the last two thirds)
set -euo pipefail
TRAINER=$(realpath "$1") WORK=${2:-lorabench}
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$WORK"
source "$SRC/bench/random_tokens.sh"
random_tokens tokens 20000000
M=(-c "$SRC/configs/llama-3.2-1b.yaml" -o Data.train_path="$WORK/tokens.h5" -o Data.val_path= -o Data.val_fraction=0
   -o Global.micro_batch_size="${B:-8}" -o Global.global_batch_size=64 -o Engine.max_steps="${STEPS:=30}"
   -o Engine.logging_freq=1 -o Engine.eval_freq=0 -o Engine.save_steps=0 -o Engine.tensorboard=false
   -o Optimizer.warmup_steps=2)
[ -n "${RECOMPUTE:-}" ] && M+=(-o Model.recompute="$RECOMPUTE")
LORA=(-o Model.lora_rank=16 -o Model.lora_alpha=32 -o Model.lora_targets=all)
for run in lora full; do
  extra=(); [ $run = lora ] && extra=("${LORA[@]}")
  "$TRAINER" plan "${M[@]}" "${extra[@]}" -n 1 | sed -n 's/^  stage 0: /plan '$run': /p'
  rm -rf "$WORK/$run"
  "$TRAINER" train "${M[@]}" "${extra[@]}" -o Engine.output_dir="$WORK/$run" > "$WORK/$run.log" 2>&1 ||
    { tail "$WORK/$run.log"; exit 1; }
done
python3 - "$WORK/full/metrics.jsonl" "$WORK/lora/metrics.jsonl" "$((STEPS / 3))" <<'PY'
import json, statistics, sys
def load(path):
    recs = [json.loads(l) for l in open(path) if '"tokens_per_s"' in l]
    recs = [r for r in recs if r["step"] > int(sys.argv[3])]
    return statistics.median(r["tokens_per_s"] for r in recs), max(r["memory_gib"] for r in recs)
(ft, fm), (lt, lm) = load(sys.argv[1]), load(sys.argv[2])
print(f"full: {ft:.0f} tokens/s, {fm:.2f} GiB; LoRA r16: {lt:.0f} tokens/s, {lm:.2f} GiB")
print(f"LoRA/full: memory {lm / fm:.2f} (aim < 0.5), tokens/s {lt / ft:.2f} (aim >= 1.2)")
PY
