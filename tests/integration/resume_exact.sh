#!/usr/bin/env bash
# Stopping after 10 steps and resuming to 20 gives bit-identical losses and parameters to 20
# uninterrupted steps, on one rank, on dp2, on dp2 with ZeRO-1 (optimizer state sharded, saved
# whole) and on dp2 with hidden and attention dropout (masks keyed by the step: the same again); and a ZeRO-1 run resumed from a checkpoint written without it follows the run without
# it (to 1e-5: only the gradient norm's summation order differs). Runs end with one summary line;
# resuming a finished run says that there is nothing to do.
source "$(dirname "$0")/lib.sh"
make_small_dataset data.h5
COMMON=(-o Data.train_path=data.h5 -o Global.device=cpu -o Model.hidden_size=64
        -o Model.num_layers=2 -o Model.max_seq_len=32 -o Global.global_batch_size=8
        -o Global.micro_batch_size=2 -o Engine.logging_freq=1 -o Engine.eval_freq=0
        -o Engine.save_steps=10 -o Optimizer.warmup_steps=3 -o Checkpoint.keep_last=0)
for variant in 1 2 2z 2d; do
  np=${variant:0:1}
  extra=()
  [ "$variant" = 2z ] && extra=(-o Distributed.zero_stage1=true)
  [ "$variant" = 2d ] && extra=(-o Model.hidden_dropout=0.1 -o Model.attention_dropout=0.1)
  run_np $np train "${COMMON[@]}" "${extra[@]}" -o Engine.max_steps=20 -o Engine.output_dir=full$variant > full$variant.log 2>&1 ||
    fail "uninterrupted run ($variant)"
  run_np $np train "${COMMON[@]}" "${extra[@]}" -o Engine.max_steps=10 -o Engine.output_dir=part$variant -o Optimizer.decay_steps=17 > part$variant.a.log 2>&1 ||
    fail "first half ($variant)"
  # The schedule must be the 20-step one: the first half was given the same decay length.
  run_np $np train "${COMMON[@]}" "${extra[@]}" -o Engine.max_steps=20 -o Engine.output_dir=part$variant --resume auto > part$variant.b.log 2>&1 ||
    { cat part$variant.b.log; fail "resumed half ($variant)"; }
  grep -q "resumed from" part$variant.b.log || fail "$variant did not resume"
  # Same settings (the decay length in effect included): no warning about changed ones.
  ! grep -q "other than those" part$variant.b.log || { cat part$variant.b.log; fail "$variant: warned of changed settings"; }
  diff <(losses full$variant/metrics.jsonl) <(losses part$variant/metrics.jsonl) ||
    fail "$variant: resumed losses are not bit-identical"
  "$COMPARE_CHECKPOINTS" full$variant/checkpoints/step-00000020/checkpoint.h5 \
    part$variant/checkpoints/step-00000020/checkpoint.h5 0 || fail "$variant: parameters differ"
done
# A run ends with one summary line; resuming it once finished says there is nothing to do.
last_loss=$(sed -nE 's/^step +20\/20 \| loss ([0-9.]+) .*/\1/p' full1.log)
grep -q "^training done: step 20/20, 20 steps and 5120 tokens in [0-9.]*s this run (5120 tokens in all) | loss $last_loss | last checkpoint full1/checkpoints/step-00000020$" full1.log ||
  { tail -3 full1.log; fail "no summary line at the end of the run"; }
grep -q "^training done: step 20/20, 10 steps and 2560 tokens in .* (5120 tokens in all) | loss " part1.b.log ||
  { tail -3 part1.b.log; fail "no summary line at the end of the resumed run"; }
records=$(wc -l < full1/metrics.jsonl)
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=20 -o Engine.output_dir=full1 --resume auto \
  > finished.log 2>&1 || { cat finished.log; fail "resuming a finished run"; }
grep -q "^nothing to do: step 20 >= Engine.max_steps=20 (resumed from full1/checkpoints/step-00000020)" finished.log ||
  { cat finished.log; fail "resuming a finished run: no 'nothing to do'"; }
! grep -q "^step \|^training done" finished.log || fail "resuming a finished run trained"
[ "$(wc -l < full1/metrics.jsonl)" = "$records" ] || fail "resuming a finished run wrote metrics"
echo "ok: summary lines; a finished run resumed says: $(grep '^nothing to do' finished.log)"
# Across the setting: dp2's step-10 checkpoint (no ZeRO) resumed with ZeRO-1.
mkdir -p cross/checkpoints && cp -r part2/checkpoints/step-00000010 cross/checkpoints/
run_np 2 train "${COMMON[@]}" -o Distributed.zero_stage1=true -o Engine.max_steps=20 \
  -o Engine.output_dir=cross --resume auto > cross.log 2>&1 || { cat cross.log; fail "ZeRO-1 resume"; }
grep -q "resumed from" cross.log || fail "the ZeRO-1 run did not resume"
"$COMPARE_CHECKPOINTS" full2/checkpoints/step-00000020/checkpoint.h5 \
  cross/checkpoints/step-00000020/checkpoint.h5 1e-5 1e-4 || fail "ZeRO-1 resume differs from dp2"
echo "resume is bit-identical on 1 and 2 ranks and under ZeRO-1, and ZeRO-1 resumes dp2's checkpoint"
