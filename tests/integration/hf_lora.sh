#!/usr/bin/env bash
# LoRA on a Hugging Face model, against transformers 4.46.3 and PEFT 0.13.2 (hf_venv.sh; skipped,
# exit 77, without them). A tiny random LlamaForCausalLM (hf_llama.py make llama) is the base
# (Checkpoint.init_from); 4 LoRA steps on tp2 train rank-4 adapters on every linear. Then
# `trainer export --lora merge` must load in transformers with trainer eval's loss (and the
# float64 reference's: hf_llama.py check, 1e-5 relative), and `trainer export --lora adapter`
# must load with PEFT onto the base with the same loss (hf_lora.py). A LoRA checkpoint exported
# without --lora, or a full one with it, is refused in one line.
source "$(dirname "$0")/lib.sh"
PY=$(bash "$SRC/tests/integration/hf_venv.sh") || exit $?
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error
word_text text.txt
T=32
"$PY" "$SRC/tests/integration/hf_llama.py" make llama hf-llama || fail "making the llama"
"$TRAINER" inspect hf-llama > inspect.txt || { cat inspect.txt; fail "inspect"; }
read -ra MODEL <<< "$(sed -n 's/^  init_from needs  //p' inspect.txt)"
run_np 2 train -c "$SRC/configs/tiny-llama-cpu.yaml" "${MODEL[@]}" -o Data.train_path=text.h5 \
  -o Data.val_fraction=0 -o Global.micro_batch_size=2 -o Global.global_batch_size=4 \
  -o Engine.eval_freq=0 -o Engine.logging_freq=1 -o Model.seq_len=$T -o Checkpoint.init_from=hf-llama \
  -o Model.lora_rank=4 -o Model.lora_alpha=8 -o Optimizer.lr=2e-2 -o Optimizer.warmup_steps=0 \
  -o Engine.max_steps=4 -o Engine.save_steps=4 -o Distributed.tp_degree=2 -o Engine.output_dir=lora \
  > lora.log 2>&1 || { tail -20 lora.log; fail "LoRA training"; }
grep -q "base weights are frozen, from hf-llama" lora.log || { cat lora.log; fail "base not named"; }
"$TRAINER" eval lora/checkpoints --data text.h5 -b 1 --batches 2 > eval.json 2> eval.err ||
  { cat eval.json eval.err; fail "trainer eval of the LoRA checkpoint"; }
"$TRAINER" export lora/checkpoints --output merged --lora merge > merged.log || fail "export merge"
"$PY" "$SRC/tests/integration/hf_llama.py" check merged text.txt $T eval.json ||
  fail "the merged export's loss"
"$TRAINER" export lora/checkpoints --output adapter --lora adapter > adapter.log || fail "export adapter"
"$PY" "$SRC/tests/integration/hf_lora.py" check hf-llama adapter text.txt $T eval.json ||
  fail "PEFT's loss of the adapter"
expect_error 2 "holds LoRA adapters (of Checkpoint.init_from=hf-llama): give --lora merge" \
  "$TRAINER" export lora/checkpoints --output plain
echo "LoRA exports load in transformers (merged) and PEFT (adapter) with the trainer's loss"
