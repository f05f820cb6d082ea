#!/usr/bin/env bash
# Stopping after 10 steps and resuming to 20 gives bit-identical losses and parameters to 20
# uninterrupted steps, on one rank and on dp2 (and across a layout change, to 1e-5).
source "$(dirname "$0")/lib.sh"
make_small_dataset data.h5
COMMON=(-o Data.train_path=data.h5 -o Global.device=cpu -o Model.hidden_size=64
        -o Model.num_layers=2 -o Model.max_seq_len=32 -o Global.global_batch_size=8
        -o Global.micro_batch_size=2 -o Engine.logging_freq=1 -o Engine.eval_freq=0
        -o Engine.save_steps=10 -o Optimizer.warmup_steps=3 -o Checkpoint.keep_last=0)
for np in 1 2; do
  run_np $np train "${COMMON[@]}" -o Engine.max_steps=20 -o Engine.output_dir=full$np > full$np.log 2>&1 ||
    fail "uninterrupted run (np $np)"
  run_np $np train "${COMMON[@]}" -o Engine.max_steps=10 -o Engine.output_dir=part$np -o Optimizer.decay_steps=17 > part$np.a.log 2>&1 ||
    fail "first half (np $np)"
  # The schedule must be the 20-step one: the first half was given the same decay length.
  run_np $np train "${COMMON[@]}" -o Engine.max_steps=20 -o Engine.output_dir=part$np --resume auto > part$np.b.log 2>&1 ||
    { cat part$np.b.log; fail "resumed half (np $np)"; }
  grep -q "resumed from" part$np.b.log || fail "np $np did not resume"
  diff <(losses full$np/metrics.jsonl) <(losses part$np/metrics.jsonl) ||
    fail "np $np: resumed losses are not bit-identical"
  "$COMPARE_CHECKPOINTS" full$np/checkpoints/step-00000020/checkpoint.h5 \
    part$np/checkpoints/step-00000020/checkpoint.h5 0 || fail "np $np: parameters differ"
done
echo "resume is bit-identical on 1 and 2 ranks"
