#!/usr/bin/env bash
# The training time a checkpoint save costs, synchronous against asynchronous (docs/
# checkpoint-format.md, "What a save costs"): 40 steps with a save at step 20, step times from
# metrics.jsonl, on one process.
#   bench/checkpoint_save.sh TRAINER DATA.h5 [RUNS]        writes under ./ckbench
#   MODEL=tiny (default): CPU, tiny-cpu with hidden_size 1024 (50.9 M parameters, a 610 MB checkpoint)
#   MODEL=1.3b: one GPU, configs/gpt-1.3b.yaml at micro-batch 16 (a 15.8 GB checkpoint)
#   MODES: the Checkpoint.async_save values to run (default "false true")
set -euo pipefail
TRAINER=$1 DATA=$2 RUNS=${3:-2}
SRC=$(cd "$(dirname "$0")/.." && pwd)
case "${MODEL:-tiny}" in
  tiny) M=(-c "$SRC/configs/tiny-cpu.yaml" -o Model.hidden_size=1024 -o Model.num_layers=4
           -o Model.num_heads=16 -o Model.max_seq_len=8 -o Global.global_batch_size=1
           -o Global.micro_batch_size=1) ;;
  1.3b) M=(-c "$SRC/configs/gpt-1.3b.yaml" -o Global.global_batch_size=16 -o Global.micro_batch_size=16) ;;
  *) echo "MODEL must be tiny or 1.3b" >&2; exit 2 ;;
esac
M+=(-o Data.train_path="$DATA" -o Data.val_path= -o Data.val_fraction=0 -o Engine.logging_freq=1
    -o Engine.eval_freq=0 -o Optimizer.warmup_steps=2 -o Checkpoint.keep_last=1
    -o Engine.max_steps=40 -o Engine.save_steps=20 -o Engine.tensorboard=false)
for i in $(seq 1 "$RUNS"); do
  for mode in ${MODES:-false true}; do
    out=ckbench/$mode$i
    rm -rf "$out" && mkdir -p ckbench
    "$TRAINER" train "${M[@]}" -o Engine.output_dir="$out" -o Checkpoint.async_save=$mode > "$out.log" 2>&1
  done
  python3 - "$i" ${MODES:-false true} <<'PY'
import json, statistics, sys
run, modes = sys.argv[1], sys.argv[2:]
def load(path):
    recs = [json.loads(line) for line in open(path)]
    steps = {r["step"]: r["step_ms"] for r in recs if "step_ms" in r}
    save = next(r for r in recs if "checkpoint_save_s" in r and r["step"] == 20)
    return steps, save
# Training lost to a save: the time the step loop waited for it (checkpoint_save_s; the logging
# window leaves it out of step_ms) plus what the steps after it took beyond the steps before
# (an asynchronous write shares the host with training).
for mode in modes:
    m, save = load(f"ckbench/{mode}{run}/metrics.jsonl")
    name = "async" if mode == "true" else "sync"
    base = statistics.median(m[k] for k in range(11, 21))
    at_save = save["checkpoint_save_s"]
    during = sum(m[k] - base for k in range(21, 40)) / 1e3
    print(f"{name:5s}: step {base:.0f} ms; lost {at_save:.2f} s waiting for the save "
          f"+ {during:.2f} s in the 19 steps after it = {at_save + during:.2f} s; "
          f"write {save.get('checkpoint_write_s', 0):.2f} s")
PY
done
