#!/usr/bin/env bash
# The llama family side by side on one GPU, in one call: the trainer and the PyTorch peer
# (bench/torch_llama.py: RMSNorm, RoPE, grouped-query attention through SDPA, SwiGLU, fused
# AdamW, torch.compile) on the same shapes, the same optimizer settings and the same kind of
# random tokens. Prints one JSON line per run (tokens/s, MFU, memory) and the ratio trainer / peer.
#
#   bench/llama_vs_pytorch.sh TRAINER [PEER_SCRIPT] MODEL:B...
#   PEER_SCRIPT: default bench/torch_llama.py; another script taking its JSON keys
#   MODEL: llama-1b (configs/llama-3.2-1b.yaml) | qwen3-0.6b (configs/qwen3-0.6b.yaml)
#   env: STEPS (default 30), SKIP_PEER=1, WORK (default /tmp/bench), TRAINER_ARGS (more -o
#        overrides), RECORD=1 (append one record per comparison to RECORD_FILE, default
#        bench/results/gpu.jsonl, as bench/gpu_vs_pytorch.sh does)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TRAINER=$1; shift
PEER=$ROOT/bench/torch_llama.py
PEER_ARG=
if [ $# -gt 0 ] && [[ $1 == *.py ]]; then PEER=$1 PEER_ARG=$1; shift; fi
[ $# -gt 0 ] || { echo "usage: bench/llama_vs_pytorch.sh TRAINER [PEER_SCRIPT] MODEL:B..." >&2; exit 2; }
STEPS=${STEPS:-30}
WORK=${WORK:-/tmp/bench}
mkdir -p "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source "$ROOT/bench/peer_common.sh"  # random_u32, trainer_side, peer_side
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
for spec in "$@"; do
  IFS=: read -r model B <<< "$spec"
  case $model in
    llama-1b) cfg=configs/llama-3.2-1b.yaml V=128256
      shape='"V":128256,"T":2048,"L":16,"D":2048,"H":32,"KV":8,"F":8192,"tie":true,"theta":500000,"rope_scaling":"llama3","eps":1e-5' ;;
    qwen3-0.6b) cfg=configs/qwen3-0.6b.yaml V=151936
      shape='"V":151936,"T":2048,"L":28,"D":1024,"H":16,"KV":8,"HD":128,"F":3072,"tie":true,"qk_norm":true,"theta":1000000,"eps":1e-6' ;;
    *) echo "unknown model $model: llama-1b or qwen3-0.6b" >&2; exit 2 ;;
  esac
  T=2048 out="$WORK/$model-b$B"
  data=$model-b$B
  random_u32 "$data" $((8 * B * T + 1)) "$V"
  trainer_side "$model" "$B" "$out" "$data" -c "$ROOT/$cfg"
  peer_side "$model" "$B" "$shape" "$out"
done
# The comparisons (bench/compare_runs.py), and with RECORD=1 one record each in RECORD_FILE.
command="STEPS=$STEPS"
[ -z "${TRAINER_ARGS:-}" ] || command+=" TRAINER_ARGS='$TRAINER_ARGS'"
record_comparisons "$RESULTS" "$command bench/llama_vs_pytorch.sh $TRAINER ${PEER_ARG:+$PEER_ARG }$*"
