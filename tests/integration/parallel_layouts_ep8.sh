#!/usr/bin/env bash
# parallel_layouts_ep.sh's widest layout, on 8 ranks (--oversubscribe on small machines): DP 2 x
# TP 2 x EP 2 against one rank, dropless and with capacity dropping.
set -euo pipefail
here="$(dirname "$0")"
LAYOUT_MODEL=moe TRAINER_TEST_LAYOUTS="dp2-tp2-ep2" bash "$here/parallel_layouts.sh" "$1" "$2" "$3/dropless"
LAYOUT_MODEL=moe-capacity TRAINER_TEST_LAYOUTS="dp2-tp2-ep2" bash "$here/parallel_layouts.sh" "$1" "$2" "$3/capacity"
