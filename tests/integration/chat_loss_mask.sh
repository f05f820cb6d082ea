#!/usr/bin/env bash
# Chat data with a loss mask (trainer pack --input-format chat, /loss_mask): the loss averages
# over the assistant's tokens of the whole global batch, so a single rank, dp2 and dp4, with
# micro-batch splits that change the gradient accumulation, give the same training and validation
# losses (1e-5) and final parameters (compare_checkpoints); and the mask is really used: the same
# tokens packed without a mask train to other losses. Also the --max-length counts.
source "$(dirname "$0")/lib.sh"
python3 - <<'PY'
import json
with open("chat.jsonl", "w") as chat, open("plain.jsonl", "w") as plain:
    for i in range(240):
        a, b = i % 17, (7 * i) % 23
        messages = ([{"role": "system", "content": "You add numbers."}] if i % 3 == 0 else []) + [
            {"role": "user", "content": f"What is {a} plus {b}?"},
            {"role": "assistant", "content": f"{a} plus {b} is {a + b}."}]
        if i % 5 == 0:
            messages += [{"role": "user", "content": "And twice that?"},
                         {"role": "assistant", "content": f"Twice {a + b} is {2 * (a + b)}."}]
        chat.write(json.dumps({"id": i, "messages": messages}) + "\n")
        text = "".join(f"{m['content']}\n" for m in messages)  # the "none" template
        plain.write(json.dumps({"text": text}) + "\n")
PY
"$TRAINER" pack --input-format chat --chat-template none --input chat.jsonl --output chat.h5 \
  --val-fraction 0.1 --quiet > pack.log 2>&1 || { cat pack.log; fail "chat pack failed"; }
cat pack.log
grep -q "chat: 240 conversations, 0 truncated, 0 dropped" pack.log || fail "chat counts"
"$TRAINER" pack --input-format jsonl --input plain.jsonl --output plain.h5 --val-fraction 0.1 \
  --quiet > /dev/null 2>&1 || fail "plain pack failed"
cmp <(h5dump -d /tokens -y chat.h5 | tail -n +6) <(h5dump -d /tokens -y plain.h5 | tail -n +6) ||
  fail "the chat and plain packs should hold the same tokens"
"$TRAINER" pack --input-format chat --chat-template none --input chat.jsonl --output drop.h5 --max-length 60 \
  --overlong drop --quiet > drop.log 2>&1 || { cat drop.log; fail "drop pack failed"; }
grep -q "chat: 240 conversations, 0 truncated, [1-9][0-9]* dropped" drop.log ||
  { cat drop.log; fail "drop counts"; }
"$TRAINER" pack --input-format chat --chat-template none --input chat.jsonl --output cut.h5 --max-length 60 \
  --quiet > cut.log 2>&1 || { cat cut.log; fail "truncate pack failed"; }
grep -q "chat: 240 conversations, [1-9][0-9]* truncated, 0 dropped" cut.log ||
  { cat cut.log; fail "truncate counts"; }

COMMON=(-c "$SRC/configs/tiny-llama-cpu.yaml" -o Global.device=cpu -o Model.max_seq_len=32
        -o Global.global_batch_size=8 -o Engine.max_steps=6 -o Engine.save_steps=6
        -o Engine.logging_freq=1 -o Engine.eval_freq=3 -o Engine.eval_iters=2
        -o Optimizer.warmup_steps=2 -o Optimizer.eps=1e-6)
run() {  # name np data micro_batch overrides...
  local name=$1 np=$2 data=$3 mb=$4
  shift 4
  run_np "$np" train "${COMMON[@]}" -o Data.train_path="$data.h5" -o Data.val_path="$data.val.h5" \
    -o Global.micro_batch_size="$mb" -o Engine.output_dir="$name" "$@" > "$name.log" 2>&1 ||
    { tail -20 "$name.log"; fail "$name exited non-zero"; }
}
val_losses() { grep -o '"val_loss": [^,}]*' "$1" | awk '{print $2}'; }
run single 1 chat 2
grep -q "loss_mask" single.log || fail "the run should say it uses the loss mask"
# Also tensor parallelism (the vocabulary-parallel loss) and pipeline stages (the count is the
# last stage's, shared with the others).
for layout in "single-mb8 1 8" "single-mb1 1 1" "dp2 2 2" "dp2-mb4 2 4" "dp4 4 2" "dp4-mb1 4 1" \
    "dp2-tp2 4 2 -o Distributed.tp_degree=2" "dp2-pp2 4 1 -o Distributed.pp_degree=2"; do
  set -- $layout
  name=$1 np=$2 mb=$3
  shift 3
  run "$name" "$np" chat "$mb" "$@"
  set -- "$name"
  echo "== $1"
  compare_curves "$1/metrics.jsonl" single/metrics.jsonl 1e-5 1e-5 6 || fail "$1 losses differ"
  python3 - "$1/metrics.jsonl" single/metrics.jsonl <<'PY' || fail "$1 validation losses differ"
import json, sys
val = lambda p: [r["val_loss"] for r in map(json.loads, open(p)) if "val_loss" in r]
got, want = val(sys.argv[1]), val(sys.argv[2])
assert len(want) == 2 and len(got) == 2, (got, want)
assert all(abs(g - w) <= 1e-5 * abs(w) for g, w in zip(got, want)), (got, want)
print("val_loss", got)
PY
  "$COMPARE_CHECKPOINTS" "$1/checkpoints/step-00000006/checkpoint.h5" \
    single/checkpoints/step-00000006/checkpoint.h5 1e-5 1e-3 || fail "$1 parameters differ"
done
run plain 1 plain 2
masked=$(losses single/metrics.jsonl | tail -1) plain=$(losses plain/metrics.jsonl | tail -1)
echo "last loss: masked $masked, unmasked $plain"
python3 -c "import sys; m, p = map(float, sys.argv[1:]); sys.exit(abs(m - p) <= 1e-2 * p)" \
  "$masked" "$plain" || fail "the masked loss equals the unmasked one: the mask is not used"
# trainer eval: the mean over the targets the mask keeps, their count as "targets" (the mask of
# tokens 1..T of each sample evaluated, read with h5dump); where none counts, exit 3 (it reported
# loss 0, perplexity 1).
h5dump -d /loss_mask -y -w 0 chat.val.h5 > mask.txt || fail "h5dump of the loss mask"
"$TRAINER" eval single/checkpoints --data chat.val.h5 -b 2 --batches 3 > eval.json 2> eval.err ||
  { cat eval.err; fail "eval of the chat data"; }
python3 <<'PY' || fail "eval's targets are not the mask's"
import json, re
text = open("mask.txt").read()
mask = [int(v) for v in re.findall(r"\d+", text[text.index("DATA {") + 6:text.index("}", text.index("DATA {"))])]
want = sum(mask[i * 32 + 1:i * 32 + 33].count(1) for i in range(6))
r = json.loads(open("eval.json").read().splitlines()[-1])
assert r["tokens"] == 6 * 32 and r["targets"] == want, (r, want)
assert mask[1:33].count(1) == 0, "the first sample has targets that count: the case below needs none"
print(f"eval: {r['targets']} targets of {r['tokens']} tokens count, loss {r['loss']}")
PY
grep -q "over 192 tokens of which [0-9]* count (loss_mask)" eval.err || { cat eval.err; fail "eval's line"; }
expect_error 3 "no target counts in the samples evaluated (chat.val.h5, --data)" \
  "$TRAINER" eval single/checkpoints --data chat.val.h5 -b 1 --batches 1
# Training's evaluation of the same sample: no val_loss (null, and a warning; it logged 0).
run none-counts 1 chat 1 -o Global.global_batch_size=1 -o Engine.eval_iters=1 -o Engine.max_steps=3 \
  -o Engine.save_steps=0
grep -q "^warning: step      3/3 | no val loss: the 1 validation samples evaluated have no target of loss mask 1" \
  none-counts.log || { cat none-counts.log; fail "no warning for a validation without targets"; }
grep -q '^{"step": 3, "val_loss": null}$' none-counts/metrics.jsonl ||
  { cat none-counts/metrics.jsonl; fail "val_loss is not null where no target counts"; }
echo "chat loss mask: every layout matches the single-rank run"
