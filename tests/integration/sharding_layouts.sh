#!/usr/bin/env bash
# Sharding (Distributed.sharding, ZeRO stages 1-3) against the single-rank run on the same global
# batch, on CPU ranks through MPI: dp2, dp4, dp2-tp2 and dp2-pp2 sharded over every data rank at
# stages 1, 2 and 3 (stage 1 also through the zero_stage1 alias), sharding_offload (one rank
# unsharded, and stage 3: the state in host memory anyway, but the offload path runs: gradients
# copied out, the CPU AdamW, weights copied back), and hybrid layouts: sharding 2 inside, 2
# data-parallel replicas across. Losses and the
# final parameters and Adam moments must agree as in parallel_layouts.sh (a relative 1e-5; each
# tensor 1e-3): only the reduction order differs (stages 2-3 reduce-scatter each micro-batch's
# block gradients on top of the shard's running sum, instead of summing micro-batches first).
#
# SHARDING_MODEL picks the model: gpt2 (the default), llama or moe (MoE layers with the expert
# bias, which moves after each step outside the gradient update; sharding_layouts_llama.sh runs
# both).
source "$(dirname "$0")/lib.sh"
make_small_dataset data.h5
case ${SHARDING_MODEL:-gpt2} in
  gpt2) MODEL=("${TINY_LAYOUT_GPT[@]}") ;;
  llama) MODEL=("${TINY_LAYOUT_LLAMA[@]}") ;;
  moe) MODEL=("${TINY_LAYOUT_MOE[@]}") ;;
esac
COMMON=("${MODEL[@]}" -o Engine.max_steps=10 -o Engine.save_steps=10)
run_layout single 1
# dpD: D data ranks; sK: sharding stage K over all of them (sdN: over N of them, the rest
# replicas); z1: the zero_stage1 alias; off: sharding_offload; tpT, ppP: tensor and pipeline
# parallelism.
LAYOUTS=${TRAINER_TEST_LAYOUTS:-"dp2-s1 dp2-s2 dp2-s3 dp4-s1 dp4-s2 dp4-s3 dp2-tp2-s1 dp2-tp2-s2
  dp2-tp2-s3 dp2-pp2-s2 dp2-pp2-s3 dp4-s2-sd2 dp4-s3-sd2 dp4-s1-sd2 dp2-z1 dp1-off dp2-s3-off"}
for layout in $LAYOUTS; do
  dp=1 tp=1 pp=1 stage=1 sd=0 z1=false off=false
  for part in ${layout//-/ }; do
    case $part in dp*) dp=${part#dp};; tp*) tp=${part#tp};; pp*) pp=${part#pp};; sd*) sd=${part#sd};; s*) stage=${part#s};;
                  z1) z1=true;; off) off=true;; esac
  done
  if [ "$z1" = true ]; then
    sharding=(-o Distributed.zero_stage1=true)
  else
    [ "$sd" = 0 ] && sd=$dp
    sharding=(-o Distributed.dp_degree=$((dp / sd)) -o Distributed.sharding.sharding_degree=$sd
              -o Distributed.sharding.sharding_stage=$stage
              -o Distributed.sharding.sharding_offload=$off)
  fi
  run_layout "$layout" $((dp * tp * pp)) -o Distributed.tp_degree=$tp -o Distributed.pp_degree=$pp \
    "${sharding[@]}"
  echo "== $layout"
  compare_curves "$layout/metrics.jsonl" single/metrics.jsonl 1e-5 1e-5 10 || fail "$layout losses differ"
  "$COMPARE_CHECKPOINTS" "$layout/checkpoints/step-00000010/checkpoint.h5" \
    single/checkpoints/step-00000010/checkpoint.h5 1e-5 1e-3 || fail "$layout parameters differ"
done
if [[ " $LAYOUTS " == *" dp2-z1 "* ]]; then
  [ "$(grep -c "zero_stage1=true is an alias: sharding over all 2 data-parallel ranks" dp2-z1.log)" = 1 ] ||
    fail "the zero_stage1 alias is not announced once"
fi
echo "every sharding stage matches the single-rank run"
