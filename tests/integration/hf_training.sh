#!/usr/bin/env bash
# Whole training steps against transformers 4.46.3 and torch (hf_venv.sh; skipped, exit 77,
# without them): the other Hugging Face tests check the forward loss, this one the gradients and
# the optimizer, where a wrong gradient of one parameter kind or a wrong AdamW detail would still
# train. hf_training.py makes tiny random models with transformers: a LlamaForCausalLM (GQA,
# llama3 rope_scaling, untied), a Qwen2ForCausalLM (q/k/v biases, tied), a GPT2LMHeadModel
# (LayerNorm, biases, learned positions, tied), a Qwen2MoeForCausalLM (a dense layer, then 8
# experts top-2 with a gated shared expert) and an OlmoeForCausalLM (q/k norms over all heads);
# the trainer's router loss coefficients are 0, as transformers' loss has no router term without
# output_router_logits. The trainer starts from each (Checkpoint.init_from, fp32 on one CPU
# rank; Qwen2 also on tp2, Qwen2-MoE also on dp2 with its experts over ep2) and trains 3 steps of
# AdamW at a constant learning rate with weight decay and a gradient clip that the first steps'
# norms exceed, on the 4 windows of 32 tokens of a 128-byte text: the whole file, so that every
# step's global batch holds all of them whatever the sample order. hf_training.py runs the same
# steps in torch on the transformers model (torch.optim.AdamW set as docs/config.md states the
# trainer's: decay on matrices and embeddings only; clip_grad_norm_ before the step) and compares
# every step's loss and pre-clip gradient norm in metrics.jsonl (1e-5 relative), and every tensor
# of `trainer export` after step 3 (to 1e-3 of what the steps changed it by; hf_training.py).
# Adam's eps is 1e-4, not 1e-8: with 1e-8 the fp32 rounding (~1e-9) of gradients that are zero
# in exact arithmetic (GPT-2's key bias) becomes updates of ~lr/10 that no two fp32 programs
# agree on, while with 1e-4 they stay ~1e-5 of lr; and where eps is added, or a gradient scaled
# by a constant (to which Adam is blind otherwise), then matters to the many elements near it.
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/hf_lib.sh"
hf_python
HELPER=$SRC/tests/integration/hf_training.py
"$PY" "$HELPER" make . || fail "making the models"
T=32
word_text words.txt
head -c $((4 * T)) words.txt > text.txt  # 4 * T bytes and the end-of-document: 4 samples
"$TRAINER" pack --input text.txt --output text.h5 --quiet
STEPS=3 LR=1e-2 WEIGHT_DECAY=0.1 BETA1=0.9 BETA2=0.95 EPS=1e-4 CLIP=3
echo "{\"steps\": $STEPS, \"lr\": $LR, \"weight_decay\": $WEIGHT_DECAY, \"beta1\": $BETA1,
  \"beta2\": $BETA2, \"eps\": $EPS, \"grad_clip\": $CLIP}" > settings.json
SETTINGS=(-o Engine.max_steps=$STEPS -o Engine.save_steps=$STEPS -o Optimizer.lr=$LR
          -o Optimizer.weight_decay=$WEIGHT_DECAY -o Optimizer.beta1=$BETA1
          -o Optimizer.beta2=$BETA2 -o Optimizer.eps=$EPS -o Optimizer.grad_clip=$CLIP
          -o Optimizer.warmup_steps=0 -o Optimizer.decay_style=constant)

RUNS=()
train() {  # CASE RANKS NAME [overrides...]: train from hf-CASE to NAME and export it
  local case=$1 ranks=$2 name=$3 config=tiny-llama-cpu
  shift 3
  [ "$case" = gpt2 ] && config=tiny-cpu
  "$TRAINER" inspect "hf-$case" > "inspect-$case.txt" 2>&1 ||
    { cat "inspect-$case.txt"; fail "inspect $case"; }
  read -ra MODEL <<< "$(sed -n 's/^  init_from needs  //p' "inspect-$case.txt")"
  run_np "$ranks" train -c "$SRC/configs/$config.yaml" "${MODEL[@]}" "${SETTINGS[@]}" \
    -o Checkpoint.init_from="hf-$case" -o Data.train_path=text.h5 -o Data.val_fraction=0 \
    -o Model.seq_len=$T -o Global.micro_batch_size=2 -o Global.global_batch_size=4 \
    -o Engine.eval_freq=0 -o Engine.logging_freq=1 -o Engine.output_dir="$name" "$@" \
    > "$name.log" 2>&1 || { tail -20 "$name.log"; fail "training $name"; }
  grep -q "^data: 4 training samples of $T tokens" "$name.log" || fail "$name: not 4 samples"
  "$TRAINER" export "$name/checkpoints" --output "export-$name" > "export-$name.log" ||
    fail "export $name"
  RUNS+=("hf-$case:$name:export-$name")
}
NO_ROUTER_LOSS=(-o Model.moe_aux_loss_coeff=0 -o Model.moe_z_loss_coeff=0)
train llama 1 llama
train qwen2 1 qwen2
train qwen2 2 qwen2-tp2 -o Distributed.tp_degree=2
train gpt2 1 gpt2
train qwen2_moe 1 qwen2_moe "${NO_ROUTER_LOSS[@]}"
train qwen2_moe 2 qwen2_moe-ep2 "${NO_ROUTER_LOSS[@]}" -o Distributed.ep_degree=2
train olmoe 1 olmoe "${NO_ROUTER_LOSS[@]}"
"$PY" "$HELPER" check text.txt $T settings.json "${RUNS[@]}" ||
  fail "the trainer's steps are not torch's"
echo "PASS: training steps against transformers and torch"
