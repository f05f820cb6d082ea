#!/usr/bin/env bash
# parallel_layouts.sh with LoRA: every layout against one rank with the base frozen and adapters
# on every linear, for the llama family (GQA, q/k norm, untied; adapters split to match their
# base under TP, sequence parallelism, both recomputations, ZeRO-1) and for GPT-2.
set -euo pipefail
here="$(dirname "$0")"
scratch=$3
LAYOUT_MODEL=llama-lora bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/llama"
LAYOUT_MODEL=gpt2-lora bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/gpt2"
