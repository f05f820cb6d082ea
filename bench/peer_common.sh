# Sourced by the scripts that run the trainer beside a PyTorch peer script (gpu_vs_pytorch.sh,
# llama_vs_pytorch.sh, moe_vs_pytorch.sh); needs $TRAINER and $WORK. trainer_side and peer_side
# append their JSON lines to $RESULTS where it is set, for record_comparisons.
# The peer's optimizer (AdamW lr 3e-4 from the first step, betas 0.9/0.999, weight decay 0.1,
# clipping at 1.0) as trainer overrides; its data pattern is 8 global batches of random tokens,
# repeated.
PEER_OPTIMIZER=(-o Optimizer.lr=3e-4 -o Optimizer.min_lr=3e-4 -o Optimizer.warmup_steps=0
                -o Optimizer.decay_style=constant -o Optimizer.beta1=0.9 -o Optimizer.beta2=0.999
                -o Optimizer.eps=1e-8 -o Optimizer.weight_decay=0.1 -o Optimizer.grad_clip=1.0)
# random_u32 NAME COUNT VOCAB -> $WORK/NAME.h5 (once): COUNT uniform token ids below VOCAB.
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
# GPU 0 sampled every 200 ms while a run goes. gpu_sampling_start FILE; ...; gpu_sampling_stop
# FILE prints {"sm_mhz":..,"power_w":..,"used_gib":..}: the clock's and the power's medians over
# the samples with the GPU busy (utilization >= 90%; an H200 at its 700 W limit runs well below
# its 1980 MHz boost clock, so both sides of a ratio should show similar figures), and the peak of
# the memory in use (nvidia-smi's memory.used: all the process holds on the GPU, its CUDA context
# and library workspaces included). That peak is the one memory figure both sides report alike:
# the trainer's mem_gib is cudaMemGetInfo's used memory, the peer's torch.cuda's
# max_memory_allocated (its tensors only).
gpu_sampling_start() {
  SAMPLER=
  command -v nvidia-smi > /dev/null || return 0
  nvidia-smi -i 0 --query-gpu=utilization.gpu,clocks.sm,power.draw,memory.used \
    --format=csv,noheader,nounits -lms 200 > "$1" 2> /dev/null &
  SAMPLER=$!
}
gpu_sampling_stop() {
  [ -n "$SAMPLER" ] && kill "$SAMPLER" 2> /dev/null && wait "$SAMPLER" 2> /dev/null
  python3 - "$1" <<'PY'
import os, statistics, sys
rows = []
for line in open(sys.argv[1]) if os.path.exists(sys.argv[1]) else []:
    try: rows.append([float(x) for x in line.split(",")])
    except ValueError: pass
busy = [r for r in rows if r[0] >= 90]
used = [r[3] for r in rows if len(r) > 3]
print('{"sm_mhz": %s, "power_w": %s, "used_gib": %s}' % (
    round(statistics.median(r[1] for r in busy)) if busy else "null",
    round(statistics.median(r[2] for r in busy)) if busy else "null",
    round(max(used) / 1024, 2) if used else "null"))
PY
}
# peer_ratio TRAINER_JSON PEER_JSON MODEL B [TRAINER_GPU PEER_GPU]: one JSON line, tokens/s
# trainer / peer with both sides' MFU and memory, and (from gpu_sampling_stop) both sides' peak
# GPU memory in use (nothing when either side has no tokens/s).
peer_ratio() {
  python3 -c "
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ga, gb = (json.loads(x or '{}') or {} for x in (sys.argv[5:7] + ['', ''])[:2])
if 'tok_s' in a and 'tok_s' in b:
    print(json.dumps({'model': sys.argv[3], 'B': int(sys.argv[4]), 'ratio': round(a['tok_s'] / b['tok_s'], 3),
                      'trainer_mfu': a.get('mfu'), 'peer_mfu': b.get('mfu'),
                      'trainer_mem_gib': a.get('mem_gib'), 'peer_mem_gib': b.get('mem_gib'),
                      'trainer_gpu_used_gib': ga.get('used_gib'), 'peer_gpu_used_gib': gb.get('used_gib')}))" "$@"
}
# trainer_side MODEL B OUT DATA ARGS...: one trainer run (ARGS: -c CONFIG and overrides) with the
# peer's optimizer on $WORK/DATA.h5 at micro-batch B, logged to OUT.log; prints its JSON line
# and keeps it in $OURS. TRAINER_ARGS adds overrides.
trainer_side() {
  local model=$1 B=$2 out=$3 data=$4
  shift 4
  rm -rf "$out"
  gpu_sampling_start "$out.gpu"
  # shellcheck disable=SC2086  # TRAINER_ARGS are words
  if "$TRAINER" train "$@" -o Data.train_path="$WORK/$data.h5" "${PEER_OPTIMIZER[@]}" \
      -o Global.micro_batch_size="$B" -o Global.global_batch_size="$B" -o Engine.max_steps="$STEPS" \
      -o Engine.logging_freq=5 -o Engine.eval_freq=0 -o Engine.save_steps=0 \
      -o Engine.output_dir="$out" -o Checkpoint.resume= -o Data.val_path= -o Data.val_fraction=0 \
      ${TRAINER_ARGS:-} > "$out.log" 2>&1; then
    OURS=$(python3 "$ROOT/bench/metrics.py" summary "$out/metrics.jsonl")
  else
    tail -20 "$out.log" >&2
    OURS='{"error": "trainer failed"}'
  fi
  OURS_GPU=$(gpu_sampling_stop "$out.gpu")
  # What trainer plan said rank 0 would need (its memory line), beside the memory measured.
  local planned
  planned=$(grep -o 'needs ~[0-9.]* [KMGT]iB' "$out.log" | head -1 | sed 's/^needs ~//' || true)
  echo "{\"who\":\"trainer\",\"model\":\"$model\",\"B\":$B,\"args\":\"${TRAINER_ARGS:-}\",\"result\":$OURS,\"memory_planned\":\"$planned\",\"gpu0\":$OURS_GPU}" |
    tee -a "${RESULTS:-/dev/null}"
}
# peer_side MODEL B SHAPE OUT: the peer script $PEER on the JSON keys SHAPE at micro-batch B with
# torch.compile, then its ratio to $OURS (nothing with SKIP_PEER=1).
peer_side() {
  local model=$1 B=$2 shape=$3 out=$4 peer gpu
  [ "${SKIP_PEER:-0}" = 1 ] && return 0
  gpu_sampling_start "$out.peer.gpu"
  peer=$(python3 "$PEER" "[{$shape,\"B\":$B,\"compile\":true,\"steps\":$STEPS}]" 2> "$out.peer.err" | tail -1) || true
  [ -n "$peer" ] || peer="{\"error\": \"no result line: see $out.peer.err\"}"
  gpu=$(gpu_sampling_stop "$out.peer.gpu")
  echo "{\"who\":\"pytorch\",\"model\":\"$model\",\"B\":$B,\"result\":$peer,\"gpu0\":$gpu}" |
    tee -a "${RESULTS:-/dev/null}"
  peer_ratio "$OURS" "$peer" "$model" "$B" "$OURS_GPU" "$gpu"
}
# record_comparisons RESULTS COMMAND: the comparisons of RESULTS' runs (bench/compare_runs.py);
# with RECORD=1 also one record each in RECORD_FILE (default bench/results/gpu.jsonl) with the
# date, the build (COMMIT, else git describe), the GPU and driver, $STEPS, $TRAINER_ARGS, $PEER,
# $MATCH_PEER (default 1) and COMMAND, the command line that measured them.
record_comparisons() {
  local results=$1 command=$2 record=() gpu_name driver commit peer_name meta
  if [ "${RECORD:-0}" = 1 ]; then
    gpu_name=$(timeout 10 nvidia-smi -i 0 --query-gpu=name --format=csv,noheader 2> /dev/null | head -1 || true)
    case $gpu_name in  # nvidia-smi names the SXM boards without their form factor
      "NVIDIA H200") gpu_name="NVIDIA H200 SXM" ;;
      "NVIDIA H100 80GB HBM3") gpu_name="NVIDIA H100 SXM" ;;
    esac
    driver=$(timeout 10 nvidia-smi -i 0 --query-gpu=driver_version --format=csv,noheader 2> /dev/null | head -1 || true)
    commit=${COMMIT:-$(git -C "$ROOT" describe --always --dirty --abbrev=7 2> /dev/null || echo unknown)}
    peer_name=$PEER
    [[ $PEER == "$ROOT"/* ]] && peer_name=${PEER#"$ROOT"/}
    meta=$(python3 - "$commit" "$gpu_name" "$driver" "$peer_name" "${MATCH_PEER:-1}" "$STEPS" \
      "${TRAINER_ARGS:-}" "$command" <<'PY'
import datetime, json, sys
commit, gpu, driver, peer, match, steps, args, command = sys.argv[1:]
print(json.dumps({"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                  "commit": commit, "gpu": gpu or None, "driver": driver or None, "peer": peer,
                  "match_peer": match == "1", "steps": int(steps), "trainer_args": args,
                  "command": command}))
PY
)
    record=(--record "${RECORD_FILE:-$ROOT/bench/results/gpu.jsonl}" --meta "$meta")
  fi
  python3 "$ROOT/bench/compare_runs.py" "$results" "${record[@]}"
}
