#!/usr/bin/env bash
# sharding_layouts.sh for the llama family (grouped-query attention, q/k norm, an untied LM head),
# then a MoE model at stages 2 and 3 (its expert bias updated on each rank's pieces).
set -euo pipefail
here="$(dirname "$0")"
SHARDING_MODEL=llama bash "$here/sharding_layouts.sh" "$1" "$2" "$3/llama"
SHARDING_MODEL=moe TRAINER_TEST_LAYOUTS="dp2-s2 dp2-s3 dp4-s3-sd2 dp2-s3-off" \
  bash "$here/sharding_layouts.sh" "$1" "$2" "$3/moe"
