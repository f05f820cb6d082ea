#!/usr/bin/env bash
# The llama family side by side on one GPU, in one call: the trainer and a PyTorch peer script
# (RMSNorm, RoPE, grouped-query attention through SDPA, SwiGLU, fused AdamW, torch.compile) on
# the same shapes, the same optimizer settings and the same kind of random tokens. Prints one
# JSON line per run (tokens/s, MFU, memory) and the ratio trainer / peer.
#
#   bench/llama_vs_pytorch.sh TRAINER PEER_SCRIPT MODEL:B...
#   MODEL: llama-1b (configs/llama-3.2-1b.yaml) | qwen3-0.6b (configs/qwen3-0.6b.yaml)
#   env: STEPS (default 30), SKIP_PEER=1, WORK (default /tmp/bench)
set -euo pipefail
TRAINER=$1 PEER=$2; shift 2
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS=${STEPS:-30}
WORK=${WORK:-/tmp/bench}
mkdir -p "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The peer's optimizer (AdamW lr 3e-4 from the first step, betas 0.9/0.999, weight decay 0.1,
# clipping at 1.0) and its data pattern (8 global batches of random tokens, repeated).
PEER_OPTIMIZER=(-o Optimizer.lr=3e-4 -o Optimizer.min_lr=3e-4 -o Optimizer.warmup_steps=0
                -o Optimizer.decay_style=constant -o Optimizer.beta1=0.9 -o Optimizer.beta2=0.999
                -o Optimizer.eps=1e-8 -o Optimizer.weight_decay=0.1 -o Optimizer.grad_clip=1.0)
# random_u32 NAME COUNT VOCAB -> $WORK/NAME.h5: COUNT uniform token ids below VOCAB.
random_u32() {
  [ -f "$WORK/$1.h5" ] && return 0
  python3 -c "
import array, random, sys
rng = random.Random(0)
v = int(sys.argv[3])
array.array('I', (rng.randrange(v) for _ in range(int(sys.argv[2])))).tofile(open(sys.argv[1], 'wb'))" \
    "$WORK/$1.u32" "$2" "$3"
  "$TRAINER" pack --tokenizer u32 --vocab-size "$3" --input "$WORK/$1.u32" --output "$WORK/$1.h5" --quiet
  rm -f "$WORK/$1.u32"
}
for spec in "$@"; do
  IFS=: read -r model B <<< "$spec"
  case $model in
    llama-1b) cfg=configs/llama-3.2-1b.yaml V=128256
      shape='"V":128256,"T":2048,"L":16,"D":2048,"H":32,"KV":8,"F":8192,"tie":true,"theta":500000' ;;
    qwen3-0.6b) cfg=configs/qwen3-0.6b.yaml V=151936
      shape='"V":151936,"T":2048,"L":28,"D":1024,"H":16,"KV":8,"HD":128,"F":3072,"tie":true,"qk_norm":true,"theta":1000000' ;;
    *) echo "unknown model $model: llama-1b or qwen3-0.6b" >&2; exit 2 ;;
  esac
  T=2048 out="$WORK/$model-b$B"
  data=$model-b$B
  random_u32 "$data" $((8 * B * T + 1)) "$V"
  rm -rf "$out"
  if "$TRAINER" train -c "$ROOT/$cfg" -o Data.train_path="$WORK/$data.h5" "${PEER_OPTIMIZER[@]}" \
      -o Global.micro_batch_size="$B" -o Global.global_batch_size="$B" -o Engine.max_steps="$STEPS" \
      -o Engine.logging_freq=5 -o Engine.eval_freq=0 -o Engine.save_steps=0 \
      -o Engine.output_dir="$out" -o Checkpoint.resume= -o Data.val_path= -o Data.val_fraction=0 \
      ${TRAINER_ARGS:-} > "$out.log" 2>&1; then
    ours=$(python3 "$ROOT/bench/metrics.py" summary "$out/metrics.jsonl")
  else
    tail -20 "$out.log" >&2
    ours='{"error": "trainer failed"}'
  fi
  echo "{\"who\":\"trainer\",\"model\":\"$model\",\"B\":$B,\"result\":$ours}"
  [ "${SKIP_PEER:-0}" = 1 ] && continue
  peer=$(python3 "$PEER" "[{$shape,\"B\":$B,\"compile\":true,\"steps\":$STEPS}]" 2> "$out.peer.err" | tail -1) || true
  [ -n "$peer" ] || peer='{"error": "no result line"}'
  echo "{\"who\":\"pytorch\",\"model\":\"$model\",\"B\":$B,\"result\":$peer}"
  python3 -c "
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
if 'tok_s' in a and 'tok_s' in b:
    print(json.dumps({'model': sys.argv[3], 'B': int(sys.argv[4]), 'ratio': round(a['tok_s'] / b['tok_s'], 3),
                      'trainer_mem_gib': a.get('mem_gib'), 'peer_mem_gib': b.get('mem_gib')}))" "$ours" "$peer" "$model" "$B"
done
