#!/usr/bin/env bash
# trainer sample: a model trained (TP=2 on 2 CPU ranks; with SAMPLE_DEVICE=cuda, as
# gpu_training.sh runs it, on one GPU in bf16) on a text that repeats one 24-byte sentence
# must continue a prompt with that text, taking the likeliest byte each time (--temperature 0):
# the expected output is the text itself, known without the trainer. The checkpoint of a
# two-rank layout loads on one process; the step folder, its checkpoint.h5 and the checkpoint
# directory give the same sample; a seeded draw repeats. Bad input: one error line each and the
# exit code (no checkpoint 4, more than one process / bad options 2).
source "$(dirname "$0")/lib.sh"
DEVICE=${SAMPLE_DEVICE:-cpu}
LAYOUT=(2 -o Distributed.tp_degree=2)  # ranks, then their overrides
[ "$DEVICE" = cpu ] || LAYOUT=(1 -o Engine.mix_precision=bf16)
SENTENCE="the cat sat on the mat. "
python3 -c "import sys; open('cat.txt', 'w').write(sys.argv[1] * 400)" "$SENTENCE"
"$TRAINER" pack --input cat.txt --output cat.h5 --quiet
run_np "${LAYOUT[0]}" train -c "$SRC/configs/tiny-cpu.yaml" "${LAYOUT[@]:1}" \
  -o Global.device="$DEVICE" -o Data.train_path=cat.h5 -o Data.val_fraction=0 \
  -o Model.num_layers=2 -o Model.hidden_size=64 -o Model.max_seq_len=64 \
  -o Engine.max_steps=150 -o Engine.save_steps=150 -o Engine.eval_freq=0 \
  -o Engine.logging_freq=50 -o Engine.output_dir=run > train.log 2>&1 ||
  { tail -20 train.log; fail "training run failed"; }
LOSS=$(losses run/metrics.jsonl | tail -1)
awk -v l="$LOSS" 'BEGIN { exit !(l < 0.05) }' || fail "training did not learn the text (loss $LOSS)"

PROMPT="the cat sat on the"
"$TRAINER" sample run/checkpoints/step-00000150 --prompt "$PROMPT" -n 40 -t 0 --output greedy.txt \
  -o Global.device="$DEVICE" 2> sample.err > sample.log ||
  { cat sample.log sample.err; fail "trainer sample failed"; }
python3 - "$SENTENCE" "$PROMPT" <<'PY'
import sys
sentence, prompt = sys.argv[1], sys.argv[2]
want = (sentence * 10)[:len(prompt) + 40]
got = open("greedy.txt").read().rstrip("\n")
assert got == want, f"sample {got!r}, expected {want!r}"
print(f"greedy sample as expected: {got!r}")
PY
for path in run/checkpoints/step-00000150/checkpoint.h5 run/checkpoints; do
  "$TRAINER" sample "$path" --prompt "$PROMPT" -n 40 -t 0 --output other.txt \
    -o Global.device="$DEVICE" 2> /dev/null > /dev/null
  cmp -s greedy.txt other.txt || fail "sampling from $path differs from the step folder's sample"
done
for i in 1 2; do
  "$TRAINER" sample run/checkpoints -n 64 -t 1 -k 10 --seed 7 --output "draw$i.txt" \
    -o Global.device="$DEVICE" 2> /dev/null > /dev/null
done
cmp -s draw1.txt draw2.txt || fail "two draws with --seed 7 differ"

expect_error 4 "no checkpoint at nowhere" "$TRAINER" sample nowhere
expect_error 2 "runs as one process" run_np 2 sample run/checkpoints
expect_error 2 "not a token id" "$TRAINER" sample run/checkpoints --prompt-ids "1 999"
expect_error 2 "\-\-prompt and \-\-prompt-ids are alternatives" "$TRAINER" sample run/checkpoints \
  --prompt hi --prompt-ids 1
expect_error 2 "\-\-tokens 0: give at least 1" "$TRAINER" sample run/checkpoints -n 0
expect_error 2 "\-\-temperature nan: give a finite value of at least 0" "$TRAINER" sample run/checkpoints -t nan
expect_error 2 "\-\-top-k -3: give at least 0" "$TRAINER" sample run/checkpoints -k -3
expect_error 2 "needs a checkpoint" "$TRAINER" sample
mkdir -p no-tokenizer
expect_error 2 "no tokenizer in no-tokenizer (\-\-tokenizer-dir): expected a Hugging Face tokenizer.json" \
  "$TRAINER" sample run/checkpoints --tokenizer-dir no-tokenizer
# A failed sample leaves an existing --output as it was (the sample is written to OUTPUT.tmp and
# renamed over it once whole), and stdout holds the sample alone (progress lines go to stderr).
echo "notes kept" > kept.txt
expect_error 2 "\-\-tokens 0" "$TRAINER" sample run/checkpoints -n 0 --output kept.txt
expect_error 4 "no checkpoint at nowhere" "$TRAINER" sample nowhere --output kept.txt
[ "$(cat kept.txt)" = "notes kept" ] && [ ! -e kept.txt.tmp ] || fail "a failed sample changed kept.txt"
"$TRAINER" sample run/checkpoints -n 8 -t 0 -o Global.device="$DEVICE" > stdout.txt 2> /dev/null ||
  fail "sample to stdout"
if grep -q "^device: " stdout.txt; then cat stdout.txt; fail "a progress line in sample's stdout"; fi
# Data.packing: documents: a document starts after each end of document (id 256), and attention
# stays inside it, so what comes before one cannot change the continuation. A model barely
# trained (one step: its greedy choices follow any change in the logits) continues "the cat"
# alike alone and after another document; an empty prompt (a document's first token, which
# such a model never learned) is refused.
"$TRAINER" train -c "$SRC/configs/tiny-llama-cpu.yaml" -o Global.device="$DEVICE" \
  -o Data.train_path=cat.h5 -o Data.val_fraction=0 -o Data.packing=documents \
  -o Model.num_layers=1 -o Model.max_seq_len=32 -o Engine.max_steps=1 -o Engine.save_steps=1 \
  -o Engine.eval_freq=0 -o Engine.output_dir=docs > docs.log 2>&1 || { tail docs.log; fail "documents run"; }
ids() { python3 -c 'import sys; print(" ".join(str(b) for b in sys.argv[1].encode()))' "$1"; }
for prompt in "$(ids "the cat")" "$(ids "xq7#zz!!kp") 256 $(ids "the cat")"; do
  "$TRAINER" sample docs/checkpoints --prompt-ids "$prompt" -n 20 -t 0 -o Global.device="$DEVICE" \
    2> /dev/null | tail -c 21 > "docs-$(wc -w <<< "$prompt").txt" || fail "sample of the documents run"
done
cmp -s docs-7.txt docs-18.txt ||
  { cat docs-7.txt docs-18.txt; fail "the document before the prompt changed the continuation"; }
expect_error 2 "with Data.packing=documents the model never learned a document's first token" \
  "$TRAINER" sample docs/checkpoints -n 4
echo "sample: all checks passed"
