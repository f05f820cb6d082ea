#!/usr/bin/env bash
# parallel_layouts.sh for a model with mixture-of-experts layers (dense and MoE layers mixed over
# the pipeline stages; experts replicated over TP): every layout against one rank, dropless with
# a shared expert, then with a sigmoid router and a capacity that drops tokens; then one micro-batch
# of the whole batch (the experts' gradient squares added to the norm as they are written) against
# four, without the load-balancing loss (taken per micro-batch, it is another objective).
set -euo pipefail
here="$(dirname "$0")"
scratch=$3
LAYOUT_MODEL=moe bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/dropless"
LAYOUT_MODEL=moe-capacity bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/capacity"
LAYOUT_MODEL=moe LAYOUT_EXTRA="-o Model.moe_aux_loss_coeff=0" TRAINER_TEST_LAYOUTS=mb8 \
  bash "$here/parallel_layouts.sh" "$1" "$2" "$scratch/one-micro-batch"
