#!/usr/bin/env bash
# parallel_layouts.sh with dropout on (Model.hidden_dropout and Model.attention_dropout 0.2): the
# masks are keyed by the sample's place in the global batch, its position and the global head
# (model/philox.h), so every layout still equals one rank. GPT-2 without biases (Model.bias:
# false), then the llama family (grouped-query attention, q/k norm, untied) and a MoE model (the
# dropout after the experts' combine). "mb1": another
# micro-batch split (gradient accumulation over 8 micro-batches); "rc"/"rs": recomputation,
# which must draw the same masks again.
set -euo pipefail
here="$(dirname "$0")"
scratch=$3
DROPOUT="-o Model.hidden_dropout=0.2 -o Model.attention_dropout=0.2"
LAYOUT_MODEL=gpt2 LAYOUT_EXTRA="$DROPOUT -o Model.bias=false" \
  TRAINER_TEST_LAYOUTS="dp2 tp2 pp2 tp2-sp dp2-mb1 mb1-rc dp2-tp2-pp2-sp-z1 tp2-pp2-sp-rc" \
  bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/gpt2"
LAYOUT_MODEL=llama LAYOUT_EXTRA="$DROPOUT" \
  TRAINER_TEST_LAYOUTS="dp2 tp2 pp2 tp2-sp dp2-mb1 rs tp2-pp2-sp-rc" \
  bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/llama"
# (The MoE model keeps its micro-batch size: its load-balancing loss is taken per micro-batch.)
LAYOUT_MODEL=moe LAYOUT_EXTRA="$DROPOUT" TRAINER_TEST_LAYOUTS="dp2 tp2-sp pp2 tp2-pp2-sp-rc" \
  bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/moe"
