#!/usr/bin/env bash
# nanoGPT's shakespeare-char recipe (configs/shakespeare-char.yaml, docs/shakespeare-char.md) on one
# GPU, the trainer beside the PyTorch peer on the same bytes vocabulary: each side's best validation
# loss, its step, and the whole run's wall time (5000 steps, evaluation included; the trainer's from
# its process start, the peer's from its own clock, which leaves out its Python and torch.compile
# start-up). Issue 53's target: best validation loss <= the peer's + 0.01 in at most half its time.
#
#   bench/char_vs_pytorch.sh TRAINER TEXT [PEER_SCRIPT]
#   TEXT: tinyshakespeare's input.txt; PEER_SCRIPT: default ../shared/bench/torch_char.py
#   env: WORK (default /tmp/charbench), SKIP_PEER=1, TRAINER_ARGS (more -o overrides)
set -euo pipefail
TRAINER=$(realpath "$1") TEXT=$(realpath "$2")
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEER=${3:-$ROOT/../shared/bench/torch_char.py}
WORK=${WORK:-/tmp/charbench}
mkdir -p "$WORK"
"$TRAINER" pack --input "$TEXT" --output "$WORK/char.h5" --val-fraction 0.1 --force --quiet
rm -rf "$WORK/out"
start=$(date +%s.%N)
# shellcheck disable=SC2086
"$TRAINER" train -c "$ROOT/configs/shakespeare-char.yaml" -o Data.train_path="$WORK/char.h5" \
  -o Data.val_path="$WORK/char.val.h5" -o Engine.output_dir="$WORK/out" ${TRAINER_ARGS:-} \
  > "$WORK/trainer.log" 2>&1 || { tail "$WORK/trainer.log"; exit 1; }
wall=$(python3 -c "import sys, time; print(round(time.time() - float(sys.argv[1]), 1))" "$start")
python3 - "$WORK/out/metrics.jsonl" "$wall" <<'PY'
import json, sys
vals = [(r["val_loss"], r["step"]) for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r]
best = min(vals)
print(json.dumps({"who": "trainer", "best_val": round(best[0], 4), "best_step": best[1],
                  "wall_s": float(sys.argv[2])}))
PY
[ "${SKIP_PEER:-0}" = 1 ] || python3 "$PEER" "$TEXT" '{"vocab": "bytes"}' | tail -1
