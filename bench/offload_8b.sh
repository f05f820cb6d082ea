#!/usr/bin/env bash
# The Llama-3.1-8B shape on one GPU with its optimizer offloaded (configs/llama-3.1-8b.yaml:
# T 8192, micro-batch 2, selective recompute, sharding_offload): STEPS steps (default 8) of
# GLOBAL_BATCH sequences (default 32: 16 micro-batches per offloaded optimizer step) on random
# tokens from random weights, no evaluation, no checkpoint. Prints one JSON line: the median
# tokens/s and MFU over the steps after the second (the first times the GEMM routes), the
# largest GPU memory in use (metrics.jsonl's memory_gib), the trainer's peak resident host
# memory (getrusage of the child), and what `trainer plan` said of both. Issue 50's aim: MFU at
# least 40% of the 1.3B model's without offload (0.63 on an H200: bench/results/gpu.jsonl).
#   bench/offload_8b.sh TRAINER [WORK]            (WORK default ./offload8b)
#   STEPS=8 GLOBAL_BATCH=32 TRAINER_ARGS="-o ..." bench/offload_8b.sh build/src/trainer
set -euo pipefail
TRAINER=$(realpath "$1") WORK=${2:-offload8b}
SRC=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${STEPS:-8} GLOBAL_BATCH=${GLOBAL_BATCH:-32}
mkdir -p "$WORK"
source "$SRC/bench/random_tokens.sh"
random_tokens tokens8b $(( (STEPS + 1) * GLOBAL_BATCH * 8192 + 8193 ))
# shellcheck disable=SC2206
M=(-c "$SRC/configs/llama-3.1-8b.yaml" -o Data.train_path="$WORK/tokens8b.h5" -o Data.val_path= -o Data.val_fraction=0
   -o Global.global_batch_size="$GLOBAL_BATCH" -o Engine.max_steps="$STEPS" -o Engine.logging_freq=1
   -o Engine.eval_freq=0 -o Engine.save_steps=0 -o Engine.tensorboard=false
   -o Optimizer.warmup_steps=2 -o Engine.output_dir="$WORK/run" ${TRAINER_ARGS:-})
"$TRAINER" plan "${M[@]}" -n 1 > "$WORK/plan.txt"
rm -rf "$WORK/run"
python3 - "$WORK" "$GLOBAL_BATCH" "$TRAINER" train "${M[@]}" <<'PY'
import json, re, resource, statistics, subprocess, sys
work, global_batch, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
with open(f"{work}/train.log", "w") as log:
    rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
rss_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux
if rc != 0:
    sys.stdout.write(open(f"{work}/train.log").read()[-3000:])
    sys.exit(f"trainer exited {rc}")
plan = open(f"{work}/plan.txt").read()
gpu_plan = re.search(r"on the GPU ~([0-9.]+) GiB in all", plan)
host_plan = re.search(r"sharding_offload keeps ([0-9.]+) GiB", plan)
params = re.search(r"stage 0: \d+ blocks, ([0-9.]+)M parameters", plan)
recs = [json.loads(l) for l in open(f"{work}/run/metrics.jsonl") if '"tokens_per_s"' in l]
timed = [r for r in recs if r["step"] > 2] or recs
print(json.dumps({
    "model": "Llama-3.1-8B shape (configs/llama-3.1-8b.yaml), sharding_offload, 1 GPU",
    "parameters_m": float(params.group(1)) if params else None,
    "global_batch": global_batch,
    "steps": len(recs),
    "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in timed)),
    "mfu": round(statistics.median(r["mfu"] for r in timed), 4),
    "memory_gib": round(max(r["memory_gib"] for r in recs), 2),
    "memory_planned_gib": float(gpu_plan.group(1)) if gpu_plan else None,
    "host_peak_rss_gib": round(rss_gib, 2),
    "host_offload_planned_gib": float(host_plan.group(1)) if host_plan else None,
}))
PY
