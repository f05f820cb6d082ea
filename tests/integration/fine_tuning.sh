#!/usr/bin/env bash
# docs/fine-tuning.md's path on the CPU, with its commands: a "released" model (a tiny llama
# trained briefly and exported as a Hugging Face folder), imported (trainer inspect's overrides,
# Checkpoint.init_from); a chat corpus packed with loss masks; LoRA on one rank and every weight
# on two (dp2, ZeRO-1), each lowering the held-out loss below the base's (trainer eval); replies
# from both (trainer sample --chat) as the chat data was rendered; exports
# (full, --lora merge, --lora adapter); and, where the transformers + PEFT venv exists
# (hf_venv.sh), transformers' loss of the merged model and PEFT's of base + adapter equal
# trainer eval's (1e-5 relative).
source "$(dirname "$0")/lib.sh"
word_text text.txt
python3 - <<'PY'
import json
with open('chat.jsonl', 'w') as f:
    for i in range(300):
        a, b = i % 13, (5 * i) % 11
        f.write(json.dumps({'messages': [
            {'role': 'user', 'content': f'{a} plus {b}?'},
            {'role': 'assistant', 'content': f'{a} plus {b} is {a + b}.'}]}) + '\n')
PY
T=128
SHAPE=(-c "$SRC/configs/tiny-llama-cpu.yaml" -o Model.hidden_size=64 -o Model.num_layers=2
       -o Model.num_heads=4 -o Model.num_kv_heads=2 -o Model.head_dim=16 -o Model.ffn_hidden_size=96
       -o Model.qk_norm=false -o Model.max_seq_len=$T)
RUN=(-o Global.micro_batch_size=4 -o Global.global_batch_size=8 -o Engine.eval_freq=0
     -o Engine.logging_freq=5 -o Optimizer.warmup_steps=2)
run_np 1 train "${SHAPE[@]}" "${RUN[@]}" -o Data.train_path=text.h5 -o Model.seq_len=32 -o Engine.max_steps=10 \
  -o Engine.save_steps=10 -o Engine.output_dir=pretrain > pretrain.log 2>&1 ||
  { tail pretrain.log; fail "pretraining the base"; }
"$TRAINER" export pretrain/checkpoints --output base-model > /dev/null || fail "exporting the base"

# 1. The base model: its overrides.
"$TRAINER" inspect base-model > inspect.txt || { cat inspect.txt; fail "inspect"; }
read -ra MODEL <<< "$(sed -n 's/^  init_from needs  //p' inspect.txt)"
[ "${#MODEL[@]}" -gt 10 ] || { cat inspect.txt; fail "no overrides from inspect"; }
BASE=(-c "$SRC/configs/tiny-llama-cpu.yaml" "${MODEL[@]}" -o Checkpoint.init_from=base-model
      -o Data.train_path=chat.h5 "${RUN[@]}")
# 2. Chat data with loss masks.
"$TRAINER" pack --input-format chat --chat-template none --input chat.jsonl --output chat.h5 \
  --val-fraction 0.1 --max-length $((T + 1)) > pack.log 2>&1 || { cat pack.log; fail "chat pack"; }
# The base as it is (learning rate 0, one step), for the loss before fine-tuning.
run_np 1 train "${BASE[@]}" -o Optimizer.lr=0 -o Optimizer.min_lr=0 -o Engine.max_steps=1 \
  -o Engine.save_steps=1 -o Engine.output_dir=out/base > base.log 2>&1 || { tail base.log; fail "base"; }
# 3a. LoRA on one rank; 3b. every weight on two.
run_np 1 train "${BASE[@]}" -o Model.lora_rank=4 -o Model.lora_alpha=8 -o Model.lora_targets=all \
  -o Optimizer.lr=1e-2 -o Optimizer.weight_decay=0 -o Engine.max_steps=30 -o Engine.save_steps=30 \
  -o Engine.output_dir=out/lora > lora.log 2>&1 || { tail lora.log; fail "LoRA fine-tuning"; }
run_np 2 train "${BASE[@]}" -o Distributed.zero_stage1=true -o Optimizer.lr=3e-3 \
  -o Engine.max_steps=30 -o Engine.save_steps=30 -o Engine.output_dir=out/full > full.log 2>&1 ||
  { tail full.log; fail "full fine-tuning"; }
# 4. Evaluate: the held-out assistant tokens' loss falls with either.
for run in base lora full; do
  "$TRAINER" eval out/$run/checkpoints --data chat.val.h5 > eval-$run.json 2> eval-$run.err ||
    { cat eval-$run.err; fail "trainer eval $run"; }
done
python3 - <<'PY' || fail "fine-tuning did not lower the held-out loss"
import json
loss = {r: json.loads(open(f"eval-{r}.json").read().splitlines()[-1])["loss"] for r in ("base", "lora", "full")}
print("held-out loss: base %.4f, LoRA %.4f, full %.4f" % (loss["base"], loss["lora"], loss["full"]))
assert loss["lora"] < loss["base"] - 0.1 and loss["full"] < loss["base"] - 0.1, loss
PY
# 4b. sample --chat renders the prompt as pack rendered the chat data (none: each message's
# content and a newline; --system's message first) and prints the reply up to the newline that
# ends it: the greedy continuation of the same text given as a plain --prompt, cut there.
for run in full lora; do
  "$TRAINER" sample out/$run/checkpoints --chat --system "Add." --prompt "3 plus 4?" -t 0 -n 40 \
    > chat-$run.txt 2> chat-$run.err || { cat chat-$run.err; fail "sample --chat ($run)"; }
  "$TRAINER" sample out/$run/checkpoints --prompt $'Add.\n3 plus 4?\n' -t 0 -n 40 > raw-$run.txt \
    2> /dev/null || fail "sample ($run)"
  python3 - chat-$run.txt raw-$run.txt <<'PY' || fail "sample --chat ($run): not the cut continuation"
import sys
chat, raw = (open(path).read() for path in sys.argv[1:])
prompt = "Add.\n3 plus 4?\n"
assert raw.startswith(prompt), repr(raw)
reply = raw[len(prompt):].split("\n")[0]
assert chat == reply + "\n" and reply, (chat, raw)
print(f"sample --chat: {reply!r}")
PY
done
expect_error 2 "system (sample) applies to --chat" "$TRAINER" sample out/full/checkpoints --system x
expect_error 2 "chat (sample) takes the user's message as --prompt TEXT" \
  "$TRAINER" sample out/full/checkpoints --chat --prompt-ids "1 2"
expect_error 2 "chat-template chatml (sample) writes special tokens such as <|im_start|>, and the bytes tokenizer has none" \
  "$TRAINER" sample out/full/checkpoints --chat --prompt x --chat-template chatml
# 5. Export.
"$TRAINER" export out/full/checkpoints --output tuned-full > /dev/null || fail "export full"
"$TRAINER" export out/lora/checkpoints --output tuned-merged --lora merge > /dev/null || fail "merge"
"$TRAINER" export out/lora/checkpoints --output tuned-adapter --lora adapter > /dev/null || fail "adapter"
[ -f tuned-adapter/adapter_config.json ] && [ -f tuned-merged/config.json ] || fail "export files"
expect_error 2 "lora bogus (trainer export): use merge" \
  "$TRAINER" export out/lora/checkpoints --output x --lora bogus
expect_error 2 "holds no LoRA adapters (Model.lora_rank=0); leave --lora out" \
  "$TRAINER" export out/full/checkpoints --output x --lora merge
# 6. Load in transformers and PEFT, where the venv exists.
PY=$(bash "$SRC/tests/integration/hf_venv.sh" 2>/dev/null) ||
  { echo "skip: no transformers + PEFT venv, so loading the exports was not checked"; exit 77; }
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error
"$TRAINER" eval out/lora/checkpoints --data text.h5 -b 1 --batches 2 -o Model.seq_len=32 > eval-text.json 2> /dev/null ||
  fail "eval on text"
"$PY" "$SRC/tests/integration/hf_llama.py" check tuned-merged text.txt 32 eval-text.json \
  --reference-only || fail "the merged model's loss against the float64 reference"
"$PY" "$SRC/tests/integration/hf_lora.py" check base-model tuned-adapter tuned-merged text.txt 32 \
  eval-text.json ||
  fail "PEFT's loss of base + adapter"
echo "fine-tuning path: import, chat pack, LoRA and full fine-tuning, eval, exports loaded"
