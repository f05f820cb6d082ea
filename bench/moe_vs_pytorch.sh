#!/usr/bin/env bash
# Mixture-of-experts models side by side on one GPU, in one call: the trainer and the PyTorch peer
# (bench/torch_llama.py with its E/K/EF keys: dropless top-k, torch._grouped_mm,
# torch.compile) on the same shapes, the same optimizer settings and the same kind of random
# tokens. Prints one JSON line per run (tokens/s, MFU with active parameters, memory) and the
# ratio trainer / peer; with PHASES=1 also one trainer step's kernel time by MoE phase (router,
# dispatch, experts, combine; bench/kernel_profile.sh under ncu, bench/kernel_summary.py). Issue 48's targets: olmoe >= 1.5x the peer, mixtral >= 1.3x.
#
#   bench/moe_vs_pytorch.sh TRAINER [PEER_SCRIPT] MODEL:B[:SIDE]...
#   PEER_SCRIPT: default bench/torch_llama.py; another script taking its JSON keys
#   MODEL: olmoe   8 layers, hidden 2048, 16 heads, 64 experts top-8 of width 1024, vocab 50304
#          mixtral the same block with 8 experts top-2 of width 7168 (Mixtral's 3.5x), top-k of
#                  the logits then the softmax over the chosen
#   (T = 2048; B = micro-batch; each side at several B: run e.g. olmoe:4 olmoe:8 olmoe:16)
#   SIDE: trainer or peer, to run that side only at this B. E.g. olmoe:16 olmoe:32:trainer runs
#         both at 16, the trainer also at 32, and compares each side's best.
#   env: STEPS (default 30), SKIP_PEER=1, PHASES=1, WORK (default /tmp/bench), TRAINER_ARGS
#        (more -o overrides), RECORD=1 (append one record per comparison to RECORD_FILE, default
#        bench/results/gpu.jsonl, as bench/gpu_vs_pytorch.sh does)
#
# Both sides count MFU as 6 x active parameters + 12 L H HD T FLOPs per token against 989 TFLOP/s
# (of the experts only K of E, plus the router; the input embedding is a lookup).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TRAINER=$1; shift
PEER=$ROOT/bench/torch_llama.py
PEER_ARG=
if [ $# -gt 0 ] && [[ $1 == *.py ]]; then PEER=$1 PEER_ARG=$1; shift; fi
[ $# -gt 0 ] || { echo "usage: bench/moe_vs_pytorch.sh TRAINER [PEER_SCRIPT] MODEL:B..." >&2; exit 2; }
STEPS=${STEPS:-30}
WORK=${WORK:-/tmp/bench}
mkdir -p "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source "$ROOT/bench/peer_common.sh"  # random_u32, trainer_side, peer_side
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
V=50304 T=2048
# The shared block: 8 layers of hidden 2048, 16 heads of 128, untied, no dense MLP layer, no
# recomputation (the records' setting, not the base config's; TRAINER_ARGS may set another).
BLOCK=(-o Model.recompute=none -o Model.vocab_size=$V -o Model.vocab_pad_multiple=128 -o Model.num_layers=8
       -o Model.hidden_size=2048 -o Model.num_heads=16 -o Model.num_kv_heads=16 -o Model.head_dim=128
       -o Model.max_seq_len=$T -o Model.rope_scaling=none -o Model.rope_factor=8 -o Model.rope_theta=1000000
       -o Model.tie_embeddings=false -o Model.moe_aux_loss_coeff=0.01)
for spec in "$@"; do
  IFS=: read -r model B side <<< "$spec"
  side=${side:-both}
  case $side in
    both | trainer | peer) ;;
    *) echo "unknown side '$side' in $spec: both, trainer or peer" >&2; exit 2 ;;
  esac
  case $model in
    olmoe) E=64 K=8 EF=1024 PRE=true ;;
    mixtral) E=8 K=2 EF=7168 PRE=false ;;
    *) echo "unknown model $model: olmoe or mixtral" >&2; exit 2 ;;
  esac
  ROUTING=(-o Model.moe_router_pre_softmax=$PRE)
  shape="\"V\":$V,\"T\":$T,\"L\":8,\"D\":2048,\"H\":16,\"KV\":16,\"HD\":128,\"theta\":1000000"
  shape+=",\"E\":$E,\"K\":$K,\"EF\":$EF,\"aux\":0.01,\"pre_softmax\":$PRE"
  out="$WORK/moe-$model-b$B" data=moe-b$B
  random_u32 "$data" $((8 * B * T + 1)) "$V"
  TRAINER_OVERRIDES=("${BLOCK[@]}" "${ROUTING[@]}" -o Model.num_experts=$E -o Model.moe_router_topk=$K
                     -o Model.moe_ffn_hidden_size=$EF -o Model.ffn_hidden_size=$EF)
  if [ "$side" = peer ]; then
    OURS='{"error": "not run"}' OURS_GPU='{}'
  else
    trainer_side "$model" "$B" "$out" "$data" -c "$ROOT/configs/llama-3.2-1b.yaml" \
      "${TRAINER_OVERRIDES[@]}"
  fi
  if [ "${PHASES:-0}" = 1 ]; then  # one step's kernels (ncu) by MoE phase
    MODEL=configs/llama-3.2-1b.yaml B=$B bash "$ROOT/bench/kernel_profile.sh" "$TRAINER" \
      "$out.ncu.csv" "${TRAINER_OVERRIDES[@]}" > "$out.ncu.log" 2>&1 &&
      python3 "$ROOT/bench/kernel_summary.py" "$out.ncu.csv" --moe-phases | grep "^moe phase\|^one step" ||
      echo "kernel profile failed: $out.ncu.log" >&2
  fi
  [ "$side" = trainer ] || peer_side "$model" "$B" "$shape" "$out"
done
# The comparisons (bench/compare_runs.py), and with RECORD=1 one record each in RECORD_FILE.
command="STEPS=$STEPS"
[ -z "${TRAINER_ARGS:-}" ] || command+=" TRAINER_ARGS='$TRAINER_ARGS'"
record_comparisons "$RESULTS" "$command bench/moe_vs_pytorch.sh $TRAINER ${PEER_ARG:+$PEER_ARG }$*"
