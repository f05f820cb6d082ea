#!/usr/bin/env bash
# Every parallel layout against the single-rank run on the same global batch: 10 steps of a tiny GPT
# whose 5 layers do not divide evenly over 2 or 4 stages ("-sp": sequence parallelism, "-rc":
# whole-block activation recomputation, "-rs": selective recomputation, "-z1": ZeRO-1, the optimizer
# state sharded over DP). Losses (metrics.jsonl) and the final parameters and Adam moments
# (checkpoints, compared by an independent HDF5 reader) must agree to a relative 1e-5 (fp32; only
# the reduction order differs; MoE models' gradient norms to 1e-4), each tensor to 1e-3 (see
# tests/tools/compare_checkpoints.cpp for why single tensors need the looser bound).
#
# LAYOUT_MODEL picks the model: gpt2 (the default), llama (GQA, q/k norm, untied; the wrapper
# parallel_layouts_llama.sh), llama-tied (qkv bias, tied embeddings, llama3 RoPE scaling), moe
# (MoE layers; parallel_layouts_moe.sh) or moe-capacity (sigmoid router, per-sequence balancing, a
# capacity that drops tokens), llama-lora or gpt2-lora (LoRA adapters on every linear, the base
# frozen; parallel_layouts_lora.sh). For MoE models the load-balancing loss must agree too.
# LAYOUT_EXTRA adds overrides to every run (parallel_layouts_dropout.sh: dropout on); the layout
# part "mb1" splits the batch into micro-batches of one sample (another gradient accumulation;
# "mb8": one micro-batch of the whole batch, where a MoE model's experts add their gradients'
# squares to the norm as they are written; the single-rank run accumulates four of two),
# "lcN" runs the LM head and loss in chunks of N tokens (Model.loss_chunk_tokens);
# "epN" multiplies the data-parallel ranks by N and splits the experts over groups of N of them
# (expert parallelism; parallel_layouts_ep.sh).
# LAYOUT_DOCUMENTS=1 trains on many short documents (make_document_dataset; parallel_layouts_
# packing.sh). LAYOUT_BOUNDS="EACH MEAN ALL TENSOR" sets the bounds (default "1e-5 1e-5 1e-5
# 1e-3": the losses' per step and mean, the checkpoints' whole and per tensor; fp32 GEMMs on a GPU
# pick algorithms by shape, so gpu_staged_layouts.sh gives them looser ones).
source "$(dirname "$0")/lib.sh"
if [[ -n ${LAYOUT_DOCUMENTS:-} ]]; then make_document_dataset data.h5; else make_small_dataset data.h5; fi
LORA=(-o Model.lora_rank=4 -o Model.lora_alpha=8 -o Optimizer.lr=1e-2)
case ${LAYOUT_MODEL:-gpt2} in
  gpt2) MODEL=("${TINY_LAYOUT_GPT[@]}") ;;
  llama) MODEL=("${TINY_LAYOUT_LLAMA[@]}")
    DEFAULT_LAYOUTS="dp2 tp2 pp2 pp4 dp2-tp2 tp2-pp2 tp2-sp tp2-pp2-sp-rc tp2-sp-rs dp2-rs dp2-z1 dp2-tp2-pp2-sp-z1 tp2-sp-lc7" ;;
  llama-tied) MODEL=("${TINY_LAYOUT_LLAMA[@]}" -o Model.tie_embeddings=true -o Model.qk_norm=false
                     -o Model.qkv_bias=true -o Model.rope_scaling=llama3 -o Model.rope_factor=4
                     -o Model.rope_original_max_positions=16)
    DEFAULT_LAYOUTS="dp2 tp2 pp2 tp2-pp2-sp dp2-tp2-z1 pp2-lc5" ;;
  moe) MODEL=("${TINY_LAYOUT_MOE[@]}")
    DEFAULT_LAYOUTS="dp2 tp2 pp2 dp2-z1 tp2-sp tp2-pp2-sp-rc dp2-rs dp2-tp2-pp2-z1" ;;
  moe-capacity) MODEL=("${TINY_LAYOUT_MOE[@]}" -o Model.moe_router_score_function=sigmoid
                       -o Model.moe_norm_topk_prob=true -o Model.moe_expert_capacity_factor=1.0
                       -o Model.moe_router_load_balancing_type=seq_aux_loss
                       -o Model.moe_shared_expert_intermediate_size=0)
    DEFAULT_LAYOUTS="dp2 tp2-sp pp2 dp2-z1" ;;
  llama-lora) MODEL=("${TINY_LAYOUT_LLAMA[@]}" "${LORA[@]}")
    DEFAULT_LAYOUTS="dp2 tp2 pp2 tp2-sp dp2-z1 tp2-pp2-sp-rc tp2-sp-rs dp2-tp2-pp2-sp-z1" ;;
  gpt2-lora) MODEL=("${TINY_LAYOUT_GPT[@]}" "${LORA[@]}")
    DEFAULT_LAYOUTS="dp2 tp2 pp2 tp2-sp-rs dp2-z1" ;;
esac
read -r -a EXTRA <<< "${LAYOUT_EXTRA:-}"
read -r B_EACH B_MEAN B_ALL B_TENSOR <<< "${LAYOUT_BOUNDS:-1e-5 1e-5 1e-5 1e-3}"
COMMON=("${MODEL[@]}" "${EXTRA[@]}" -o Engine.max_steps=10 -o Engine.save_steps=10)
run_layout single 1
LAYOUTS=${TRAINER_TEST_LAYOUTS:-${DEFAULT_LAYOUTS:-"dp2 dp4 tp2 tp4 pp2 pp4 dp2-tp2 tp2-pp2 dp2-pp2 dp2-tp2-pp2 tp2-sp tp2-pp2-sp tp2-pp2-rc dp2-z1 dp4-z1 dp2-tp2-pp2-sp-z1"}}
for layout in $LAYOUTS; do
  dp=1 tp=1 pp=1 ep=1 sh=1 stage=1 sp=false rc=none z1=false mb=2 lc=0
  for part in ${layout//-/ }; do
    case $part in lc*) lc=${part#lc};; sh*) sh=${part#sh};; s[123]) stage=${part#s};; dp*) dp=${part#dp};; tp*) tp=${part#tp};; pp*) pp=${part#pp};; ep*) ep=${part#ep};; sp) sp=true;; rc) rc=block;; rs) rc=selective;; z1) z1=true;; mb*) mb=${part#mb};; esac
  done
  # "epN": N more data-parallel ranks, which split the experts (dp2-ep2: 4 DP ranks, EP groups of 2);
  # "shN": N more, sharding the state (sh2-ep2: 2 sharding groups of 2), at stage K with "sK".
  run_layout "$layout" $((dp * ep * sh * tp * pp)) -o Distributed.tp_degree=$tp \
    -o Distributed.pp_degree=$pp -o Distributed.ep_degree=$ep \
    -o Distributed.sharding.sharding_degree=$sh -o Distributed.sharding.sharding_stage=$stage \
    -o Model.sequence_parallel=$sp \
    -o Model.recompute=$rc -o Distributed.zero_stage1=$z1 -o Global.micro_batch_size=$mb \
    -o Model.loss_chunk_tokens=$lc
  echo "== $layout"
  compare_curves "$layout/metrics.jsonl" single/metrics.jsonl "$B_EACH" "$B_MEAN" 10 || fail "$layout losses differ"
  if [[ ${LAYOUT_MODEL:-gpt2} == moe* ]]; then  # the same routing: the same aux loss and drops
    diff <(moe_fields "$layout/metrics.jsonl") <(moe_fields single/metrics.jsonl) ||
      fail "$layout: the MoE layers' aux loss or dropped tokens differ"
    # The gradient norms (the experts' share is added as their gradients are written where each
    # is written once a step) within ten times the losses' bounds: a norm that missed or doubled
    # a part of the gradients would be off by far more.
    compare_curves "$layout/metrics.jsonl" single/metrics.jsonl \
      "$(python3 -c "print(10 * $B_EACH)")" "$(python3 -c "print(10 * $B_MEAN)")" 10 grad_norm ||
      fail "$layout gradient norms differ"
  fi
  "$COMPARE_CHECKPOINTS" "$layout/checkpoints/step-00000010/checkpoint.h5" \
    single/checkpoints/step-00000010/checkpoint.h5 "$B_ALL" "$B_TENSOR" || fail "$layout parameters differ"
done
echo "all layouts match the single-rank run"
