#!/usr/bin/env bash
# parallel_layouts.sh with LoRA: every layout against one rank with the base frozen and adapters
# on every linear, for the llama family (GQA, q/k norm, untied; adapters split to match their
# base under TP, sequence parallelism, both recomputations, ZeRO-1) and for GPT-2; then with
# Model.lora_dropout (masks keyed by sample, position, layer, adapter and global input channel:
# every layout draws the same) on dp2, tp2, pp2 and recomputation.
set -euo pipefail
here="$(dirname "$0")"
scratch=$3
LAYOUT_MODEL=llama-lora bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/llama"
LAYOUT_MODEL=gpt2-lora bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/gpt2"
LAYOUT_MODEL=llama-lora LAYOUT_EXTRA="-o Model.lora_dropout=0.2" \
  TRAINER_TEST_LAYOUTS="dp2 tp2 pp2 tp2-sp-rc dp2-mb1" \
  bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/llama-dropout"
LAYOUT_MODEL=gpt2-lora LAYOUT_EXTRA="-o Model.lora_dropout=0.2" TRAINER_TEST_LAYOUTS="tp2 pp2" \
  bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/gpt2-dropout"
