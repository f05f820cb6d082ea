#!/usr/bin/env bash
# Expert parallelism (Distributed.ep_degree) against one rank on the same global batch: the MoE
# model of parallel_layouts_moe.sh (4 experts, top-2, shared expert, aux and z losses, expert
# bias) with its experts split over EP groups carved out of the data-parallel ranks, alone and
# with DP, TP (and SP), PP and recomputation; then the capacity model (tokens dropped, decided on
# each rank over its own micro-batch as without EP); and with the state sharded (sh2-ep2: 2
# sharding groups of 2, the experts split over the groups, at stages 1 and 3; sh2-dp2-ep2: 8
# ranks, EP groups of 2 and 2 expert-DP replicas, at stages 1 and 2, one sequence per
# micro-batch, so the reference takes micro-batches of 1 too). Losses, aux loss, dropped tokens, final weights and Adam moments
# must match the single-rank run (parallel_layouts.sh's bounds).
set -euo pipefail
here="$(dirname "$0")"
scratch=$3
LAYOUT_MODEL=moe TRAINER_TEST_LAYOUTS=${EP_DROPLESS_LAYOUTS:-"ep2 ep4 dp2-ep2 tp2-ep2 pp2-ep2 tp2-pp2-sp-rc-ep2 dp2-rs-ep2 sh2-ep2 sh2-s3-ep2"} \
  bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/dropless"
LAYOUT_MODEL=moe-capacity TRAINER_TEST_LAYOUTS=${EP_CAPACITY_LAYOUTS:-"ep2 dp2-ep2 tp2-sp-ep2 sh2-ep2"} \
  bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/capacity"
LAYOUT_MODEL=moe LAYOUT_EXTRA="-o Global.micro_batch_size=1" \
  TRAINER_TEST_LAYOUTS=${EP_SHARDED8_LAYOUTS:-"sh2-dp2-ep2-mb1 sh2-s2-dp2-ep2-mb1"} \
  bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/sharded8"
