#!/usr/bin/env bash
# A short real run on tinyshakespeare (skipped when ../shared/data is absent): the validation loss
# must end well below the unigram entropy of the text (the loss of the best bigram-free model).
source "$(dirname "$0")/lib.sh"
TEXT="$SRC/../shared/data/tinyshakespeare.txt"
[ -f "$TEXT" ] || { echo "skip: $TEXT not found"; exit 77; }
"$TRAINER" pack --input "$TEXT" --output shakespeare.h5 --val-fraction 0.05 > pack.log
# Unigram entropy in nats, computed independently of the trainer.
H=$(python3 -c "
import collections, math, sys
d = open(sys.argv[1], 'rb').read(); c = collections.Counter(d); n = len(d)
print(-sum(v / n * math.log(v / n) for v in c.values()))" "$TEXT")
run_np 2 train -c "$SRC/configs/tiny-cpu.yaml" -o Data.train_path=shakespeare.h5 \
  -o Data.val_path=shakespeare.val.h5 -o Engine.max_steps=${SHAKESPEARE_STEPS:-200} \
  -o Engine.eval_freq=100 -o Engine.save_steps=0 -o Engine.output_dir=run > run.log 2>&1 ||
  { tail -20 run.log; fail "training run failed"; }
VAL=$(grep -o '"val_loss": [^,}]*' run/metrics.jsonl | tail -1 | awk '{print $2}')
echo "unigram entropy $H nats; final validation loss $VAL"
[[ $VAL =~ ^[0-9.]+$ ]] || fail "no validation loss in run/metrics.jsonl"
awk -v v="$VAL" -v h="$H" 'BEGIN { exit !(v < h - 0.4) }' ||
  fail "validation loss $VAL is not well below the unigram entropy $H"
