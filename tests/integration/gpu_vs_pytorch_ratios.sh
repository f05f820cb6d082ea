#!/usr/bin/env bash
# bench/gpu_vs_pytorch.sh's ratio lines with a stand-in trainer (1100 tokens/s), a stand-in peer
# (1000 tokens/s) and an nvidia-smi that reports the GPU busy at 1500 MHz during the first run and
# at 1650 MHz after: the ratio is 1.1 and the ratio per SM clock cycle 1.1 * 1650 / 1500 = 1.21.
#   gpu_vs_pytorch_ratios.sh TRAINER SOURCE_DIR SCRATCH   (the trainer is not used)
set -euo pipefail
SRC=$2 DIR=$3
rm -rf "$DIR" && mkdir -p "$DIR/bin" "$DIR/bench"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cat > "$DIR/bin/nvidia-smi" <<EOF
#!/bin/sh
# utilization, SM clock, power: busy at 1500 MHz in the first sampling, 1650 MHz afterwards
if [ -f "$DIR/sampled" ]; then clock=1650; else clock=1500; touch "$DIR/sampled"; fi
for i in 1 2 3; do echo "95, \$clock, 690"; done
exec sleep 30  # the PID the bench kills
EOF
cat > "$DIR/bin/trainer" <<'EOF'
#!/usr/bin/env bash
out=
for a in "$@"; do case $a in Engine.output_dir=*) out=${a#*=} ;; esac; done
mkdir -p "$out"
for step in 10 20 30; do
  echo "{\"step\": $step, \"tokens_per_s\": 1100, \"mfu\": 0.5, \"memory_gib\": 1.5, \"loss\": 10.9}"
done > "$out/metrics.jsonl"
EOF
echo 'print("{\"tok_s\": 1000}")' > "$DIR/peer.py"
chmod +x "$DIR/bin/nvidia-smi" "$DIR/bin/trainer"
touch "$DIR/bench/random.h5"
out=$(PATH="$DIR/bin:$PATH" WORK="$DIR/bench" STEPS=30 \
  bash "$SRC/bench/gpu_vs_pytorch.sh" "$DIR/bin/trainer" "$DIR/peer.py" 124m:8)
echo "$out"
python3 - "$out" <<'PY'
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
clocks = {l["who"]: l["gpu0"]["sm_mhz"] for l in lines if "who" in l}
assert clocks == {"trainer": 1500, "pytorch": 1650}, clocks
ratio = [l for l in lines if "ratio_trainer_over_pytorch" in l]
assert len(ratio) == 1, ratio
assert ratio[0]["ratio_trainer_over_pytorch"] == 1.1, ratio
assert ratio[0]["ratio_per_sm_clock"] == 1.21, ratio
print("ok: the ratio and the ratio per SM clock cycle")
PY
