#!/usr/bin/env bash
# LoRA on Hugging Face models, against transformers 4.46.3 and PEFT 0.13.2 (hf_venv.sh; skipped,
# exit 77, without them). Two bases (Checkpoint.init_from): a tiny random LlamaForCausalLM
# (hf_llama.py make llama) and a tiny random GPT2LMHeadModel (hf_lora.py make gpt2), whose
# Conv1D layers store their weights (in, out) and whose attention and MLP both have a c_proj.
# On each, 4 LoRA steps on tp2 train rank-4 adapters on every linear. Then `trainer export
# --lora adapter` must hold PEFT's own keys and config and load with PEFT onto the base with
# trainer eval's loss, also after PEFT's merge_and_unload, and `trainer export --lora merge` must
# load in transformers with the same loss (hf_lora.py check, 1e-5 relative); the merged llama
# also against the float64 reference (hf_llama.py check). A LoRA checkpoint exported without
# --lora is refused in one line.
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/hf_lib.sh"
hf_python
"$PY" -c 'import peft' 2> /dev/null || { echo "skip: no peft in $PY (hf_venv.sh installs it)"; exit 77; }
word_text text.txt
T=32

lora_case() {  # CASE CONFIG: train adapters on hf-CASE, export both ways, check with PEFT
  local case=$1 config=$2
  "$TRAINER" inspect "hf-$case" > "inspect-$case.txt" ||
    { cat "inspect-$case.txt"; fail "inspect $case"; }
  read -ra MODEL <<< "$(sed -n 's/^  init_from needs  //p' "inspect-$case.txt")"
  run_np 2 train -c "$SRC/configs/$config.yaml" "${MODEL[@]}" -o Data.train_path=text.h5 \
    -o Data.val_fraction=0 -o Global.micro_batch_size=2 -o Global.global_batch_size=4 \
    -o Engine.eval_freq=0 -o Engine.logging_freq=1 -o Model.seq_len=$T \
    -o Checkpoint.init_from="hf-$case" -o Model.lora_rank=4 -o Model.lora_alpha=8 \
    -o Optimizer.lr=2e-2 -o Optimizer.warmup_steps=0 -o Engine.max_steps=4 \
    -o Engine.save_steps=4 -o Distributed.tp_degree=2 -o Engine.output_dir="lora-$case" \
    > "lora-$case.log" 2>&1 || { tail -20 "lora-$case.log"; fail "LoRA training on $case"; }
  grep -q "base weights are frozen, from hf-$case" "lora-$case.log" ||
    { cat "lora-$case.log"; fail "$case: base not named"; }
  evaluate "lora-$case/checkpoints" "eval-$case.json"
  "$TRAINER" export "lora-$case/checkpoints" --output "merged-$case" --lora merge \
    > "merged-$case.log" || fail "$case: export merge"
  "$TRAINER" export "lora-$case/checkpoints" --output "adapter-$case" --lora adapter \
    > "adapter-$case.log" || fail "$case: export adapter"
  "$PY" "$SRC/tests/integration/hf_lora.py" check "hf-$case" "adapter-$case" "merged-$case" \
    text.txt $T "eval-$case.json" || fail "$case: the exports as PEFT and transformers load them"
}

"$PY" "$SRC/tests/integration/hf_llama.py" make llama hf-llama || fail "making the llama"
lora_case llama tiny-llama-cpu
# transformers' loss of the merged export is hf_lora.py check's; here the float64 reference's.
"$PY" "$SRC/tests/integration/hf_llama.py" check merged-llama text.txt $T eval-llama.json \
  --reference-only || fail "the merged llama's loss against the float64 reference"
"$PY" "$SRC/tests/integration/hf_lora.py" make gpt2 hf-gpt2 || fail "making the GPT-2"
lora_case gpt2 tiny-cpu
expect_error 2 "holds LoRA adapters (of Checkpoint.init_from=hf-llama): give --lora merge" \
  "$TRAINER" export lora-llama/checkpoints --output plain
echo "LoRA exports of llama and GPT-2 load in transformers (merged) and PEFT (adapter) with" \
  "the trainer's loss"
