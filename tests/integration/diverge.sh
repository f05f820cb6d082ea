#!/usr/bin/env bash
# A run that diverges stops on every rank with exit code 6 and one error line naming the step and
# the last checkpoint, and saves nothing from the diverged state: a save step that is not a
# logging step is checked first, and the checkpoint it resumed from is left byte for byte (with
# Checkpoint.keep_last=1, one more save would have deleted it). On one rank, dp2 (the gradient
# norm on the device's path) and pp2 (the norm summed over ranks on the host). gpu_training.sh
# runs it on GPUs too: DIVERGE_DEVICE=cuda, DIVERGE_RANKS=<GPUs> (the two-rank layouts need 2).
source "$(dirname "$0")/lib.sh"
DEVICE=${DIVERGE_DEVICE:-cpu}
RANKS=${DIVERGE_RANKS:-2}
make_small_dataset data.h5
COMMON=(-o Data.train_path=data.h5 -o Global.device="$DEVICE" -o Model.hidden_size=128
        -o Model.num_heads=4 -o Model.num_layers=2 -o Model.max_seq_len=32
        -o Global.global_batch_size=8 -o Global.micro_batch_size=2 -o Engine.eval_freq=0
        -o Checkpoint.keep_last=1)
for variant in "1:" "dp2:" "pp2:-o Distributed.pp_degree=2"; do
  name=${variant%%:*}
  np=1
  [ "$name" = 1 ] || np=2
  [ "$np" -le "$RANKS" ] || continue
  read -r -a extra <<< "${variant#*:}"
  out=run$name
  run_np $np train "${COMMON[@]}" "${extra[@]}" -o Engine.max_steps=4 -o Engine.save_steps=2 \
    -o Engine.logging_freq=1 -o Engine.output_dir=$out > $name.good.log 2>&1 ||
    { cat $name.good.log; fail "$name: the healthy first run failed"; }
  ckpt=$out/checkpoints/step-00000004
  [ -f $ckpt/checkpoint.h5 ] || fail "$name: no step-4 checkpoint"
  before=$(cd $out/checkpoints && find . -type f ! -name .lock | sort | xargs sha256sum)
  # Step 5 (logged) still starts from good parameters; its update with this learning rate ruins
  # them, so step 6 (a save step, not a logging step) has a non-finite loss.
  set +e
  run_np $np train "${COMMON[@]}" "${extra[@]}" -o Engine.max_steps=12 -o Engine.save_steps=3 \
    -o Engine.logging_freq=5 -o Optimizer.lr=1e30 -o Optimizer.warmup_steps=0 \
    -o Engine.output_dir=$out --resume auto > $name.bad.log 2>&1
  rc=$?
  set -e
  [ $rc -eq 6 ] || { cat $name.bad.log; fail "$name: exit code $rc, expected 6 (diverged)"; }
  grep -q "resumed from $ckpt" $name.bad.log || { cat $name.bad.log; fail "$name: did not resume"; }
  grep -q "warning: resumed with 3 settings other than those $ckpt was saved with: Optimizer.lr 0.001 -> 1.0e+30, Optimizer.warmup_steps 10 -> 0, the decay length .* 0 -> 12\." $name.bad.log ||
    { cat $name.bad.log; fail "$name: no warning naming the changed learning rate and warmup"; }
  [ "$(grep -c 'training diverged' $name.bad.log)" -eq 1 ] ||
    { cat $name.bad.log; fail "$name: expected exactly one 'training diverged' line"; }
  grep -q "^error: training diverged (step 6;.*the last checkpoint is $ckpt\." $name.bad.log ||
    { cat $name.bad.log; fail "$name: the error line does not name step 6 and $ckpt"; }
  # metrics.jsonl (appended to by both runs) records every save: the first run's two, no more.
  python3 - $out/metrics.jsonl <<'PY' || fail "$name: a checkpoint was saved after diverging"
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
saves = [r["step"] for r in records if "checkpoint_bytes" in r]
trained = max(r["step"] for r in records if "loss" in r)
assert saves == [2, 4], f"saves at steps {saves}, expected the first run's 2 and 4"
assert trained == 5, f"last logged step {trained}, expected 5 (the bad run's only logging step)"
PY
  after=$(cd $out/checkpoints && find . -type f ! -name .lock | sort | xargs sha256sum)
  [ "$before" = "$after" ] || fail "$name: the checkpoint folder changed (its .lock aside)"
  echo "$name: stopped at step 6 with exit code 6, step-4 checkpoint untouched"
done
echo "divergence stops every rank before anything is saved"
