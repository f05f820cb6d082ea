#!/usr/bin/env bash
# trainer eval against the training run's own evaluation: a model trained with DP=2 on 2 CPU
# ranks (with EVAL_DEVICE=cuda, as gpu_training.sh runs it, on one GPU in bf16) evaluates its
# validation file at its last step (Engine.eval_iters=3 batches of the global batch's 8 sequences,
# split over the ranks); `trainer eval` of the checkpoint saved at that step, in one process over
# the same 3 batches of 8 sequences, must give the same loss (printed to 6 digits; on the GPU
# within 1e-3, as a new process may tune other GEMM kernels). The same weights give the same
# val_loss on 1 rank (micro-batch 8) and on dp2 (micro-batch 2): evaluation is counted in global
# batches, not in micro-batches per rank. The run trains with dropout (hidden and attention 0.2),
# which evaluation never applies: trainer eval with the dropout set to 0 gives the same loss to
# the bit. Over the whole file it reports every whole
# micro-batch's tokens. Bad input: one error line each and the exit code (no --data or no
# CHECKPOINT argument 2, a missing or too-large-vocabulary token file 3, no checkpoint at the path
# 4, more than one process 2).
source "$(dirname "$0")/lib.sh"
make_small_dataset data.h5
"$TRAINER" pack --input "$SRC"/README.md "$SRC"/INSTALL.md --output val.h5 --quiet
DEVICE=${EVAL_DEVICE:-cpu}
LAYOUT=(2 -o Global.micro_batch_size=2)  # ranks, then their overrides: 4 sequences per batch
TOLERANCE=2e-6
[ "$DEVICE" = cpu ] || { LAYOUT=(1 -o Global.micro_batch_size=4 -o Engine.mix_precision=bf16); TOLERANCE=1e-3; }
run_np "${LAYOUT[0]}" train -c "$SRC/configs/tiny-cpu.yaml" "${LAYOUT[@]:1}" -o Global.device="$DEVICE" \
  -o Data.train_path=data.h5 -o Data.val_path=val.h5 \
  -o Model.num_layers=2 -o Model.hidden_size=64 -o Model.max_seq_len=64 \
  -o Global.global_batch_size=8 -o Engine.max_steps=30 \
  -o Engine.save_steps=30 -o Engine.eval_freq=30 -o Engine.eval_iters=3 \
  -o Engine.logging_freq=10 -o Model.hidden_dropout=0.2 -o Model.attention_dropout=0.2 \
  -o Engine.output_dir=run > train.log 2>&1 ||
  { tail -20 train.log; fail "training run failed"; }
WANT=$(grep -o '"val_loss": [^,}]*' run/metrics.jsonl | tail -1 | awk '{print $2}')
[ -n "$WANT" ] || fail "the training run logged no val_loss"
# The save due at step 30 comes before its evaluation: an evaluation that fails never costs it.
saved_at=$(grep -n "^saved checkpoint run/checkpoints/step-00000030 " train.log | cut -d: -f1)
evaluated_at=$(grep -n "^step     30/30 | val loss" train.log | cut -d: -f1)
[ -n "$saved_at" ] && [ -n "$evaluated_at" ] && [ "$saved_at" -lt "$evaluated_at" ] ||
  { cat train.log; fail "step 30 was evaluated before its checkpoint was saved"; }

"$TRAINER" eval run/checkpoints --data val.h5 -b 8 --batches 3 -o Global.device="$DEVICE" \
  > eval.json 2> eval.err ||
  { cat eval.json eval.err; fail "trainer eval failed"; }
cat eval.err
python3 - "$WANT" "$TOLERANCE" <<'PY'
import json, sys
want, tolerance = float(sys.argv[1]), float(sys.argv[2])
r = json.loads(open("eval.json").read().splitlines()[-1])  # the device line, then the result
assert r["step"] == 30 and r["tokens"] == 3 * 8 * 64, r
rel = abs(r["loss"] - want) / want
print(f"trainer eval {r['loss']:.6f} against the run's val_loss {want}: relative {rel:.2e}")
assert rel < tolerance, "trainer eval does not reproduce the training run's validation loss"
assert abs(r["perplexity"] - 2.718281828459045 ** r["loss"]) < 1e-3 * r["perplexity"], r
PY
"$TRAINER" eval run/checkpoints --data val.h5 -b 8 --batches 3 -o Global.device="$DEVICE" \
  -o Model.hidden_dropout=0 -o Model.attention_dropout=0 > no-dropout.json 2> no-dropout.err ||
  { cat no-dropout.json no-dropout.err; fail "trainer eval without dropout failed"; }
[ "$(tail -1 eval.json)" = "$(tail -1 no-dropout.json)" ] ||
  { tail -1 eval.json no-dropout.json; fail "evaluation applied the configured dropout"; }

# The whole file: every whole micro-batch of 3 samples (64 tokens, and the next as target).
TOKENS=$("$TRAINER" inspect val.h5 | awk '$1 == "tokens" {print $2}')
"$TRAINER" eval run/checkpoints/step-00000030 --data val.h5 -b 3 -o Global.device="$DEVICE" \
  > all.json 2> all.err ||
  { cat all.json all.err; fail "trainer eval over the whole file failed"; }
python3 - "$TOKENS" <<'PY'
import json, sys
samples = (int(sys.argv[1]) - 1) // 64
r = json.loads(open("all.json").read().splitlines()[-1])
assert r["tokens"] == samples // 3 * 3 * 64, (r, samples)
print(f"whole file: {r['tokens']} tokens of {samples} samples, loss {r['loss']:.4f}")
PY

if [ "$DEVICE" = cpu ]; then
  # The step-30 weights evaluated by one step at lr 0 (weights unchanged) on two layouts.
  same_weights() {  # NAME NP MICRO_BATCH: prints the val_loss of that layout
    run_np "$2" train -c "$SRC/configs/tiny-cpu.yaml" -o Global.device=cpu \
      -o Data.train_path=data.h5 -o Data.val_path=val.h5 -o Model.num_layers=2 \
      -o Model.hidden_size=64 -o Model.max_seq_len=64 -o Global.global_batch_size=8 \
      -o Global.micro_batch_size="$3" -o Optimizer.lr=0 -o Optimizer.min_lr=0 \
      -o Checkpoint.init_from=run/checkpoints/step-00000030 -o Engine.max_steps=1 \
      -o Engine.eval_freq=1 -o Engine.eval_iters=3 -o Engine.save_steps=0 \
      -o Engine.output_dir="$1" > "$1.log" 2>&1 || { tail -20 "$1.log"; fail "$1: training failed"; }
    grep -o '"val_loss": [^,}]*' "$1/metrics.jsonl" | awk '{print $2}'
  }
  one=$(same_weights lr0_one 1 8)
  dp2=$(same_weights lr0_dp2 2 2)
  python3 - "$one" "$dp2" "$WANT" <<'PY'
import sys
one, dp2, want = map(float, sys.argv[1:])
print(f"the step-30 weights: val_loss {one} on 1 rank (B=8), {dp2} on dp2 (B=2), {want} in the run")
for other in (dp2, want):
    assert abs(one - other) / one < 2e-6, "val_loss depends on the layout"
PY
fi

python3 -c "import struct; open('ids.u16', 'wb').write(struct.pack('<300H', *range(300)))"
"$TRAINER" pack --tokenizer u16 --vocab-size 50257 --input ids.u16 --output big_vocab.h5 --quiet
expect_error 2 "needs a token file" "$TRAINER" eval run/checkpoints
expect_error 2 "needs a checkpoint" "$TRAINER" eval --data val.h5
expect_error 3 "nowhere.h5" "$TRAINER" eval run/checkpoints --data nowhere.h5
expect_error 3 "big_vocab.h5.*Use data packed with the model.s tokenizer, or, for a new model (not a checkpoint.s)" "$TRAINER" eval run/checkpoints --data big_vocab.h5
expect_error 4 "no checkpoint at nowhere" "$TRAINER" eval nowhere --data val.h5
expect_error 2 "runs as one process" run_np 2 eval run/checkpoints --data val.h5
echo "PASS: trainer eval"
