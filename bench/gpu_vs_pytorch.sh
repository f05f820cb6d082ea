#!/usr/bin/env bash
# The trainer against PyTorch on the same GPU, one after the other: the same model shapes, the
# same optimizer settings and the same random tokens. Prints one JSON line per run (tokens/s, MFU,
# memory, and the GPU's SM clock and power while it ran; for the trainer also the memory that
# trainer plan gave), then one line per comparison (bench/compare_runs.py): the ratio at each
# micro-batch (also per SM clock cycle), each side's best against the other's for a model run at
# several micro-batches, and on several GPUs the trainer against itself on one GPU.
# docs/performance.md has the results and the command of each.
#
#   bench/gpu_vs_pytorch.sh TRAINER [PEER_SCRIPT | -] MODEL...
#   PEER_SCRIPT: the PyTorch side (default bench/torch_gpt.py; any script that takes the same JSON
#          argument and prints a JSON line with "tok_s"); "-" runs the trainer only
#   MODEL: 124m:B | 350m:B | 1.3b:B, each optionally :trainer or :peer to run that side only
#          (B = micro batch of one GPU; global batch = B x GPUs). E.g. 1.3b:16 1.3b:24:peer
#          runs both at 16, the peer also at 24, and compares each side's best.
#   env: STEPS (default 40), NP (GPUs for the trainer, default 1: with NP > 1 the trainer also
#        runs on one GPU, its baseline there), SKIP_PEER=1 (the trainer only), MATCH_PEER,
#        TRAINER_ARGS (more -o overrides), WORK (/tmp/bench), RECORD=1 (append one record per
#        comparison to RECORD_FILE, default bench/results/gpu.jsonl; COMMIT names the build when
#        the source tree has no git history)
#
# MATCH_PEER=1 (the default): the trainer trains the way the PyTorch script does, so that both
# sides multiply the same kind of values (at the power limit the values set the clock, and with it
# tokens/s): AdamW lr 3e-4 from the first step, betas 0.9/0.999, eps 1e-8, weight decay 0.1,
# clipping at 1.0, on 8 global batches of random tokens, repeated. MATCH_PEER=0: the configs' own
# optimizer settings (a warmup of hundreds of steps, so a short run trains at lr ~1e-5) on a
# 20M-token random stream.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TRAINER=$1; shift
# The PyTorch script: the second argument unless it is already a MODEL:B.
PEER=$ROOT/bench/torch_gpt.py
PEER_ARG=
if [ $# -gt 0 ] && ! [[ $1 =~ ^[0-9.]+[mb]:[0-9]+(:[a-z]+)?$ ]]; then PEER=$1 PEER_ARG=$1; shift; fi
[ $# -gt 0 ] || { echo "usage: bench/gpu_vs_pytorch.sh TRAINER [PEER_SCRIPT | -] MODEL..." >&2; exit 2; }
[ "$PEER" != - ] || SKIP_PEER=1
STEPS=${STEPS:-40}
NP=${NP:-1}
WORK=${WORK:-/tmp/bench}
mkdir -p "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MATCH_PEER=${MATCH_PEER:-1}
source "$ROOT/bench/peer_common.sh"  # PEER_OPTIMIZER, record_comparisons
source "$ROOT/bench/random_tokens.sh"  # random_tokens NAME COUNT -> $WORK/NAME.h5
[ "$MATCH_PEER" = 1 ] || random_tokens random 20000000
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
# run_trainer GPUS: the trainer on GPUS GPUs at $model, $B; prints and keeps its JSON line.
run_trainer() {
  local np=$1 out=$WORK/$model-b$B-np$1${TAG:-} data matched
  if [ "$MATCH_PEER" = 1 ]; then
    # The PyTorch script's 8 batches: 8 global batches of T + 1 tokens per sequence (the
    # trainer's samples are windows of T + 1 tokens at multiples of T, in a new order each epoch).
    data=peer-b$((B * np))-t$T
    random_tokens "$data" $((8 * B * np * T + 1))
    matched=("${PEER_OPTIMIZER[@]}")
  else
    data=random matched=()
  fi
  rm -rf "$out"
  gpu_sampling_start "$out.gpu"
  # shellcheck disable=SC2086  # TRAINER_ARGS are words
  mpirun -n "$np" --bind-to none "$TRAINER" train -c "$ROOT/$cfg" -o Data.train_path="$WORK/$data.h5" \
    "${matched[@]}" -o Global.micro_batch_size="$B" -o Global.global_batch_size=$((B * np)) \
    -o Engine.max_steps="$STEPS" -o Engine.logging_freq=10 -o Engine.eval_freq=0 \
    -o Engine.save_steps=0 -o Engine.output_dir="$out" -o Checkpoint.resume= -o Global.device=cuda \
    -o Data.val_path= -o Data.val_fraction=0 \
    ${TRAINER_ARGS:-} > "$out.log" 2>&1 || { gpu_sampling_stop "$out.gpu" > /dev/null; tail -30 "$out.log"; return 0; }
  local gpu ours planned
  gpu=$(gpu_sampling_stop "$out.gpu")
  # Median tokens/s over the logging windows after the first 10 steps (warm-up, graph builds).
  ours=$(python3 "$ROOT/bench/metrics.py" summary "$out/metrics.jsonl")
  # What trainer plan said rank 0 would need (its memory line), beside the memory measured.
  planned=$(grep -o 'needs ~[0-9.]* [KMGT]iB' "$out.log" | head -1 | sed 's/^needs ~//' || true)
  echo "{\"who\":\"trainer\",\"model\":\"$model\",\"B\":$B,\"gpus\":$np,\"match_peer\":$MATCH_PEER,\"args\":\"${TRAINER_ARGS:-}\",\"result\":$ours,\"memory_planned\":\"$planned\",\"gpu0\":$gpu}" |
    tee -a "$RESULTS"
}
for spec in "$@"; do
  IFS=: read -r model B side <<< "$spec"
  side=${side:-both}
  case $side in
    both | trainer | peer) ;;
    *) echo "unknown side '$side' in $spec: both, trainer or peer" >&2; exit 2 ;;
  esac
  case $model in
    124m) cfg=configs/gpt2-124m.yaml; T=1024; shape='"L":12,"H":12,"D":768' ;;
    350m) cfg=configs/gpt2-350m.yaml; T=1024; shape='"L":24,"H":16,"D":1024' ;;
    1.3b) cfg=configs/gpt-1.3b.yaml;  T=2048; shape='"L":24,"H":16,"D":2048' ;;
    *) echo "unknown model $model" >&2; exit 2 ;;
  esac
  shape="$shape,\"T\":$T"
  out="$WORK/$model-b$B-np$NP${TAG:-}"
  [ "$side" = peer ] || run_trainer "$NP"
  if [ "$side" = trainer ] || [ "${SKIP_PEER:-0}" = 1 ]; then continue; fi
  if [ "$NP" != 1 ]; then  # on several GPUs the trainer's baseline is itself on one GPU
    run_trainer 1
    continue
  fi
  gpu_sampling_start "$out.peer.gpu"
  peer=$(python3 "$PEER" "[{\"V\":50304,$shape,\"B\":$B,\"compile\":true,\"steps\":$STEPS}]" 2>"$out.peer.err" | tail -1) || true
  [ -n "$peer" ] || peer="{\"error\": \"no result line: see $out.peer.err\"}"
  gpu=$(gpu_sampling_stop "$out.peer.gpu")
  echo "{\"who\":\"pytorch\",\"model\":\"$model\",\"B\":$B,\"result\":$peer,\"gpu0\":$gpu}" |
    tee -a "$RESULTS"
  python3 -c "
import json, sys
if 'tok_s' not in json.loads(sys.argv[1]): print(json.dumps({'peer_error': json.loads(sys.argv[1])}))" "$peer"
done
# The comparisons (bench/compare_runs.py), and with RECORD=1 one record each in RECORD_FILE.
command="STEPS=$STEPS NP=$NP"
[ "$MATCH_PEER" = 1 ] || command+=" MATCH_PEER=$MATCH_PEER"
[ -z "${TRAINER_ARGS:-}" ] || command+=" TRAINER_ARGS='$TRAINER_ARGS'"
record_comparisons "$RESULTS" "$command bench/gpu_vs_pytorch.sh $TRAINER ${PEER_ARG:+$PEER_ARG }$*"
