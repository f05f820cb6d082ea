#!/usr/bin/env bash
# parallel_layouts.sh with Data.packing: documents on many short documents (each line of the
# text one document): the document starts travel with every micro-batch to every pipeline stage,
# so every layout (DP, TP with sequence parallelism, PP, recomputation, another micro-batch
# split; then with attention and hidden dropout) still equals one rank. The llama family (GQA,
# q/k norm, untied).
set -euo pipefail
here="$(dirname "$0")"
scratch=$3
LAYOUT_DOCUMENTS=1 LAYOUT_MODEL=llama LAYOUT_EXTRA="-o Data.packing=documents" \
  TRAINER_TEST_LAYOUTS="dp2 tp2-sp pp2 pp2-rc tp2-pp2-sp-rs dp2-mb1" \
  bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/plain"
LAYOUT_DOCUMENTS=1 LAYOUT_MODEL=llama \
  LAYOUT_EXTRA="-o Data.packing=documents -o Model.attention_dropout=0.2 -o Model.hidden_dropout=0.2" \
  TRAINER_TEST_LAYOUTS="dp2 tp2-sp pp2-rc" bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/dropout"
