#!/usr/bin/env bash
# Data.shift_windows: each epoch's windows start at an offset drawn from the seed and the epoch
# (GlobalSampler::WindowShift), keyed by the sample's place in the sample order, so every layout
# and micro-batch split still equals one rank. A small file (8 steps an epoch at global batch 8)
# makes the 10 steps cross into a second epoch, with another shift. The same run without the
# shift must train on other windows (other losses), or the option would do nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
data="$3.data"
rm -rf "$data" && mkdir -p "$data"
head -c 2300 "$2/README.md" > "$data/small.txt"
"$1" pack --input "$data/small.txt" --output "$data/small.h5" > /dev/null
SHIFT="-o Data.train_path=$data/small.h5 -o Data.shift_windows=true"
LAYOUT_MODEL=gpt2 LAYOUT_EXTRA="$SHIFT" TRAINER_TEST_LAYOUTS="dp2 pp2 tp2 dp2-mb1" \
  bash "$here/parallel_layouts.sh" "$1" "$2" "$3/layouts"
# The layouts' single-rank run, against fixed windows.
source "$here/lib.sh" "$1" "$2" "$3/fixed"
make_small_dataset data.h5
COMMON=("${TINY_LAYOUT_GPT[@]}" -o Data.train_path="$data/small.h5" -o Engine.max_steps=10
        -o Engine.save_steps=10)
run_layout fixed 1
if compare_curves fixed/metrics.jsonl "$3/layouts/single/metrics.jsonl" 1e-5 1e-5 10 > /dev/null; then
  fail "Data.shift_windows=true trained on the same windows as fixed windows"
fi
echo "shifted windows: every layout equals one rank, and the windows differ from fixed ones"
