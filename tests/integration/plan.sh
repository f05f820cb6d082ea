#!/usr/bin/env bash
# `trainer plan` against closed-form counts: GPT-2 124M's parameters per rank (vocabulary padded
# to 50304) and the bytes of weights + gradients + optimizer state, which ZeRO-1 divides for the
# master weights and moments only, for one rank, dp2 with and without ZeRO-1, and tp2.
source "$(dirname "$0")/lib.sh"
CFG="$SRC/configs/gpt2-124m.yaml"
# 124M: wte 50304*768, wpe 1024*768, 12 blocks of 2 LayerNorms + qkv + proj + fc + fc proj (with
# biases), final LayerNorm; every tensor padded to 64 elements (all are multiples of 64 here).
V=50304 C=768 T=1024 L=12
PARAMS=$(( V * C + T * C + L * (4 * C + 3 * C * C + 3 * C + C * C + C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C ))
# expect_plan NAME WORLD PARAMS_PER_RANK STATE_BYTES_PER_PARAM overrides...
expect_plan() {
  local name=$1 world=$2 params=$3 bytes=$4; shift 4
  "$TRAINER" plan -c "$CFG" --world-size "$world" "$@" > "$name.txt" 2>&1 ||
    { cat "$name.txt"; fail "$name: trainer plan exited non-zero"; }
  local want_params want_gib
  want_params=$(awk -v p="$params" 'BEGIN { printf "%.1fM parameters per rank", p / 1e6 }')
  want_gib=$(awk -v p="$params" -v b="$bytes" \
    'BEGIN { printf "weights+grads+optimizer %.2f GiB", p * b / 1073741824 }')
  grep -q "$want_params" "$name.txt" || { cat "$name.txt"; fail "$name: expected '$want_params'"; }
  grep -q "$want_gib" "$name.txt" || { cat "$name.txt"; fail "$name: expected '$want_gib'"; }
  echo "$name: $want_params, $want_gib"
}
# bf16 weights (2) + f32 gradients (4) + f32 master and two moments (12, or 12/dp under ZeRO-1).
expect_plan one 1 "$PARAMS" 18
expect_plan dp2-zero1 2 "$PARAMS" 12 -o Distributed.zero_stage1=true
grep -q "ZeRO-1: master/moments split over dp" dp2-zero1.txt || fail "dp2-zero1: no ZeRO-1 line"
expect_plan dp2 2 "$PARAMS" 18 -o Distributed.zero_stage1=false
# tp2: the linears' weights and the column-parallel biases split; LayerNorms, wpe, row-parallel
# biases stay whole; wte is split by vocabulary rows.
TP2=$(( V * C / 2 + T * C + L * (4 * C + (3 * C * C + 3 * C) / 2 + C * C / 2 + C + (4 * C * C + 4 * C) / 2 + 4 * C * C / 2 + C) + 2 * C ))
expect_plan tp2 2 "$TP2" 18 -o Distributed.tp_degree=2
echo "trainer plan matches the closed-form counts"
