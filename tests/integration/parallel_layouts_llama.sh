#!/usr/bin/env bash
# parallel_layouts.sh for the llama family: every layout against one rank, for a model with
# grouped-query attention, q/k norm and an untied LM head, then for one with qkv bias, tied
# embeddings and llama3 RoPE scaling.
set -euo pipefail
here="$(dirname "$0")"
scratch=$3
LAYOUT_MODEL=llama bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/untied"
LAYOUT_MODEL=llama-tied bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/tied"
