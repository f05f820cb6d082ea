#!/usr/bin/env bash
# Side-by-side throughput on the GPU machine, in one call: the trainer and the PyTorch peer
# (nanoGPT-style GPT-2, bf16 autocast, SDPA flash attention, fused AdamW, torch.compile) on the
# same shapes and random tokens. Prints one JSON line per run (tokens/s, MFU, memory, and the
# GPU's SM clock and power while it ran; for the trainer also the memory that trainer plan gave)
# and the ratio (also per SM clock cycle); for a model run at several micro-batches, also the
# ratio of each side's best (what the targets compare).
# docs/performance.md records the results and the exact command.
#
#   bench/gpu_vs_pytorch.sh TRAINER PEER_SCRIPT MODEL...
#   MODEL: 124m:B | 350m:B | 1.3b:B, each optionally :trainer or :peer to run that side only
#          (B = micro batch of one GPU; global batch = B x GPUs). E.g. 1.3b:16 1.3b:24:peer
#          runs both at 16, the peer also at 24, and compares each side's best.
#   env: STEPS (default 40), NP (GPUs for the trainer, default 1), SKIP_PEER=1, MATCH_PEER
#
# MATCH_PEER=1 (the default): the trainer trains the way the peer script does, so that both sides
# multiply the same kind of values (at the H200's power limit the values set the clock, and with
# it tokens/s: docs/performance.md): the peer's optimizer (AdamW lr 3e-4 from the first step,
# betas 0.9/0.999, eps 1e-8, weight decay 0.1, clipping at 1.0) and its data (8 global batches
# of random tokens, repeated). MATCH_PEER=0: the configs' own optimizer settings (a warmup of
# hundreds of steps, so a short run trains at lr ~1e-5) on a 20M-token random stream, the runs
# of the figures before the twenty-first session (other random draws: the tokens now come from
# Python's own generator, so the bench needs no numpy).
set -euo pipefail
TRAINER=$1 PEER=$2; shift 2
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS=${STEPS:-40}
NP=${NP:-1}
WORK=${WORK:-/tmp/bench}
mkdir -p "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The GPU's clock and power, sampled every 200 ms while a run goes (an H200 at its 700 W limit
# runs well below its 1980 MHz boost clock, so both sides of a ratio should show similar figures).
# gpu_sampling_start FILE; ...; gpu_sampling_stop FILE prints {"sm_mhz":..,"power_w":..}: the
# medians over the samples with the GPU busy (utilization >= 90%).
gpu_sampling_start() {
  SAMPLER=
  command -v nvidia-smi > /dev/null || return 0
  nvidia-smi -i 0 --query-gpu=utilization.gpu,clocks.sm,power.draw --format=csv,noheader,nounits \
    -lms 200 > "$1" 2> /dev/null &
  SAMPLER=$!
}
gpu_sampling_stop() {
  [ -n "$SAMPLER" ] && kill "$SAMPLER" 2> /dev/null && wait "$SAMPLER" 2> /dev/null
  python3 - "$1" <<'PY'
import statistics, sys
rows = []
for line in open(sys.argv[1]) if len(sys.argv) > 1 else []:
    try: rows.append([float(x) for x in line.split(",")])
    except ValueError: pass
busy = [r for r in rows if r[0] >= 90]
print('{"sm_mhz": %s, "power_w": %s}' % (
    round(statistics.median(r[1] for r in busy)) if busy else "null",
    round(statistics.median(r[2] for r in busy)) if busy else "null"))
PY
}
MATCH_PEER=${MATCH_PEER:-1}
PEER_OPTIMIZER=(-o Optimizer.lr=3e-4 -o Optimizer.min_lr=3e-4 -o Optimizer.warmup_steps=0
                -o Optimizer.decay_style=constant -o Optimizer.beta1=0.9 -o Optimizer.beta2=0.999
                -o Optimizer.eps=1e-8 -o Optimizer.weight_decay=0.1 -o Optimizer.grad_clip=1.0)
source "$ROOT/bench/random_tokens.sh"  # random_tokens NAME COUNT -> $WORK/NAME.h5
[ "$MATCH_PEER" = 1 ] || random_tokens random 20000000
RESULTS=$(mktemp)
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
  if [ "$side" != peer ]; then
    if [ "$MATCH_PEER" = 1 ]; then
      # The peer's 8 batches: 8 global batches of T + 1 tokens per sequence (the trainer's
      # samples are windows of T + 1 tokens at multiples of T, in a new order each epoch).
      data=peer-b$((B * NP))-t$T
      random_tokens "$data" $((8 * B * NP * T + 1))
      matched=("${PEER_OPTIMIZER[@]}")
    else
      data=random matched=()
    fi
    rm -rf "$out"
    gpu_sampling_start "$out.gpu"
    mpirun -n "$NP" --bind-to none "$TRAINER" train -c "$ROOT/$cfg" -o Data.train_path="$WORK/$data.h5" \
      "${matched[@]}" -o Global.micro_batch_size="$B" -o Global.global_batch_size=$((B * NP)) \
      -o Engine.max_steps="$STEPS" -o Engine.logging_freq=10 -o Engine.eval_freq=0 \
      -o Engine.save_steps=0 -o Engine.output_dir="$out" -o Checkpoint.resume= -o Global.device=cuda \
      -o Data.val_path= -o Data.val_fraction=0 \
      ${TRAINER_ARGS:-} > "$out.log" 2>&1 || { gpu_sampling_stop "$out.gpu" > /dev/null; tail -30 "$out.log"; continue; }
    trainer_gpu=$(gpu_sampling_stop "$out.gpu")
    # Median tokens/s over the logging windows after the first 10 steps (warm-up, graph builds).
    ours=$(python3 "$ROOT/bench/metrics.py" summary "$out/metrics.jsonl")
    # What trainer plan said rank 0 would need (its memory line), beside the memory measured.
    planned=$(grep -o 'needs ~[0-9.]* [KMGT]iB' "$out.log" | head -1 | sed 's/^needs ~//' || true)
    echo "{\"who\":\"trainer\",\"model\":\"$model\",\"B\":$B,\"gpus\":$NP,\"match_peer\":$MATCH_PEER,\"args\":\"${TRAINER_ARGS:-}\",\"result\":$ours,\"memory_planned\":\"$planned\",\"gpu0\":$trainer_gpu}" |
      tee -a "$RESULTS"
  fi
  if [ "$side" != trainer ] && [ "${SKIP_PEER:-0}" != 1 ] && [ "$NP" = 1 ]; then
    gpu_sampling_start "$out.peer.gpu"
    peer=$(python3 "$PEER" "[{\"V\":50304,$shape,\"B\":$B,\"compile\":true,\"steps\":$STEPS}]" 2>"$out.peer.err" | tail -1) || true
    [ -n "$peer" ] || peer="{\"error\": \"no result line: see $out.peer.err\"}"
    gpu=$(gpu_sampling_stop "$out.peer.gpu")
    echo "{\"who\":\"pytorch\",\"model\":\"$model\",\"B\":$B,\"result\":$peer,\"gpu0\":$gpu}" |
      tee -a "$RESULTS"
    python3 -c "
import json, sys
if 'tok_s' not in json.loads(sys.argv[1]): print(json.dumps({'peer_error': json.loads(sys.argv[1])}))" "$peer"
  fi
done
# The ratios, from the runs above: per model and micro-batch where both sides ran (the n-th
# trainer run against the n-th peer run), with the ratio per SM clock cycle too (at the power
# limit each side runs at its own clock, and the tokens/s ratio is about the square root of this
# one: docs/performance.md); then, for a model run at more than one micro-batch, each side's best
# against the other's (what the targets compare: the peer's best is not always at the trainer's).
python3 - "$RESULTS" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
runs = [r for r in runs if isinstance(r["result"], dict) and "tok_s" in r["result"]
        and r.get("gpus", 1) == 1]
def tok_s(r): return r["result"]["tok_s"]
for model in dict.fromkeys(r["model"] for r in runs):
    mine = [r for r in runs if r["model"] == model]
    for B in dict.fromkeys(r["B"] for r in mine):
        ours = [r for r in mine if r["B"] == B and r["who"] == "trainer"]
        peers = [r for r in mine if r["B"] == B and r["who"] == "pytorch"]
        for a, b in zip(ours, peers):
            line = {"model": model, "B": B, "ratio_trainer_over_pytorch": round(tok_s(a) / tok_s(b), 3)}
            ca, cb = a["gpu0"].get("sm_mhz"), b["gpu0"].get("sm_mhz")
            if ca and cb:
                line["ratio_per_sm_clock"] = round(tok_s(a) / ca / (tok_s(b) / cb), 3)
            print(json.dumps(line))
    best = {who: max((r for r in mine if r["who"] == who), key=tok_s, default=None)
            for who in ("trainer", "pytorch")}
    if len({r["B"] for r in mine}) < 2 or None in best.values():
        continue
    t, p = best["trainer"], best["pytorch"]
    print(json.dumps({"model": model,
                      "trainer_best": {"tok_s": tok_s(t), "B": t["B"]},
                      "pytorch_best": {"tok_s": tok_s(p), "B": p["B"]},
                      "ratio_of_bests": round(tok_s(t) / tok_s(p), 3)}))
PY
rm -f "$RESULTS"
