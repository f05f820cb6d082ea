#!/usr/bin/env bash
# Scaling runs on one multi-GPU node:
#  layouts  every parallel layout of NP GPUs against one GPU on the same global batch: the loss
#           curve over STEPS steps (each step within 5%, the mean within 1%, as tests/integration/
#           gpu_training.sh asks of two GPUs), tokens/s, MFU and memory;
#  scaling  DP from 1 GPU to NP (powers of two), B per GPU: tokens/s and the efficiency against
#           n times one GPU;
#  resume   a checkpoint saved at step STEPS/2 on tp2-pp2 (with the rest of the GPUs as DP)
#           resumed on dpNP and on one GPU: steps STEPS/2+1.. against the uninterrupted run
#           (each step within 1%, the mean within 0.2%).
# The data are a learnable token stream (each token is followed by one of 4 fixed successors, so
# the loss falls from ln V toward ln 4) written by this script, so the curves say something.
#
#   bench/scaling.sh TRAINER MODEL:B...
#   MODEL: 124m | 350m | 1.3b (configs/gpt2-124m.yaml, gpt2-350m.yaml, gpt-1.3b.yaml) | tiny
#          (configs/tiny-cpu.yaml, for DEVICE=cpu); B: the micro-batch of one GPU
#   env: NP (GPUs; default: all that nvidia-smi lists), STEPS (50), SCALING_STEPS (30), PARTS
#        ("layouts scaling resume"), LAYOUTS (default by NP, e.g. "dp8 tp2-dp4 tp4-dp2 pp2-dp4
#        tp2-pp2-dp2"; an entry NAME[:KEY=VALUE,...] takes its degrees from tpN/ppN in NAME and
#        adds the overrides, e.g. "tp2-dp4-sp:Model.sequence_parallel=true"), DEVICE (cuda), OUT
#        (/tmp/scaling), MPIEXEC (mpirun; or e.g. "srun --mpi=pmix" inside an allocation),
#        MPI_ARGS (--bind-to none; "" for srun), TOKENS (4000000; runs go round it).
# Runs whose metrics already reach their last step are kept, so a part cut off by a time limit
# goes on in the next invocation. Prints one JSON line per run and check (also appended to
# $OUT/results.jsonl); exits 1 when a check fails.
set -uo pipefail
TRAINER=$1; shift
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS=${STEPS:-50}
PARTS=${PARTS:-layouts scaling resume}
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-/tmp/scaling}
MPIEXEC=${MPIEXEC:-mpirun}
MPI_ARGS=${MPI_ARGS---bind-to none}
NP=${NP:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
[ "${NP:-0}" -ge 2 ] || { echo "scaling.sh: NP=${NP:-0}: needs at least 2 GPUs (or set NP)" >&2; exit 2; }
[ $((STEPS % 2)) = 0 ] || { echo "scaling.sh: STEPS=$STEPS must be even (resume at STEPS/2)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
FAILED=0

default_layouts() {  # the layouts of NP GPUs measured by default, for 2, 4 and 8
  case $NP in
    2) echo "dp2 tp2 pp2" ;;
    4) echo "dp4 tp2-dp2 tp4 pp2-dp2 tp2-pp2" ;;
    *) local h=$((NP / 2)) q=$((NP / 4))
       echo "dp$NP tp2-dp$h tp4-dp$q pp2-dp$h tp2-pp2-dp$q" ;;
  esac
}
LAYOUTS=${LAYOUTS:-$(default_layouts)}

# The token stream: a first-order chain over the vocabulary with 4 successors per token.
make_data() {  # vocab file.h5
  [ -f "$2" ] && return 0
  python3 - "$1" "${TOKENS:-4000000}" "$2.u16" <<'PY'
import array, random, sys
vocab, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(0)
successors = [[rng.randrange(vocab) for _ in range(4)] for _ in range(vocab)]
tokens, t = array.array("H"), 0
for _ in range(n):
    t = successors[t][rng.getrandbits(2)]
    tokens.append(t)
with open(path, "wb") as f:
    tokens.tofile(f)
PY
  "$TRAINER" pack --tokenizer u16 --vocab-size "$1" --input "$2.u16" --output "$2" --force --quiet
}

# report JSON: print it and keep it.
report() { echo "$1" | tee -a "$OUT/results.jsonl"; }

# train NAME NP STEPS OVERRIDES...: one run under $OUT/NAME unless a finished one is there.
train() {
  local name=$1 np=$2 steps=$3; shift 3
  if ! grep -q "\"step\": $steps," "$OUT/$name/metrics.jsonl" 2> /dev/null; then
    rm -rf "${OUT:?}/$name"
    local rc=0
    # shellcheck disable=SC2086  # MPIEXEC and MPI_ARGS are words
    $MPIEXEC -n "$np" $MPI_ARGS "$TRAINER" train -c "$ROOT/$CONFIG" \
      -o Data.train_path="$DATA" -o Data.val_path= -o Data.val_fraction=0 \
      -o Global.micro_batch_size="$B" -o Global.global_batch_size="$GLOBAL" \
      -o Global.device="$DEVICE" -o Engine.max_steps="$steps" -o Engine.logging_freq=1 \
      -o Engine.eval_freq=0 -o Engine.save_steps=0 -o Engine.output_dir="$OUT/$name" \
      -o Checkpoint.resume= "$@" > "$OUT/$name.log" 2>&1 || rc=$?
    if [ $rc != 0 ]; then
      tail -5 "$OUT/$name.log" >&2
      report "{\"run\":\"$name\",\"error\":\"exit $rc\",\"log\":\"$OUT/$name.log\"}"
      FAILED=1
      return 1
    fi
  fi
  # tokens/s after the first 10 steps (warm-up, graph builds, tuning), or half of a short run
  SUMMARY=$(python3 "$ROOT/bench/metrics.py" summary "$OUT/$name/metrics.jsonl" $((steps >= 20 ? 10 : steps / 2)))
  report "{\"run\":\"$name\",\"gpus\":$np,\"global_batch\":$GLOBAL,\"result\":$SUMMARY}"
}

# check NAME RUN REF EACH MEAN STEPS: RUN's loss curve against REF's.
check() {
  local result
  result=$(python3 "$ROOT/bench/metrics.py" compare "$OUT/$2/metrics.jsonl" "$OUT/$3/metrics.jsonl" "$4" "$5" "$6")
  report "{\"check\":\"$1\",\"run\":\"$2\",\"against\":\"$3\",\"result\":$result}"
  case $result in *'"pass": true'*) ;; *) FAILED=1 ;; esac
}

degree() {  # degree tp|pp NAME: N from "tpN" / "ppN" in the layout's name, 1 without
  local d
  d=$(echo "$2" | grep -o "$1[0-9][0-9]*" | head -1)
  d=${d#"$1"}
  echo "${d:-1}"
}

for spec in "$@"; do
  model=${spec%%:*} B=${spec##*:}
  case $model in
    124m) CONFIG=configs/gpt2-124m.yaml V=50257 ;;
    350m) CONFIG=configs/gpt2-350m.yaml V=50257 ;;
    1.3b) CONFIG=configs/gpt-1.3b.yaml V=50257 ;;
    tiny) CONFIG=configs/tiny-cpu.yaml V=257 ;;
    *) echo "scaling.sh: unknown model $model" >&2; exit 2 ;;
  esac
  DATA=$OUT/chain-v$V.h5
  make_data "$V" "$DATA" || exit 1
  GLOBAL=$((B * NP))
  for part in $PARTS; do
    case $part in
      layouts)
        train "$model-gpu1" 1 "$STEPS"
        for entry in $LAYOUTS; do
          name=${entry%%:*} extra=()
          if [ "$name" != "$entry" ]; then
            IFS=, read -ra pairs <<< "${entry#*:}"
            for pair in "${pairs[@]}"; do extra+=(-o "$pair"); done
          fi
          train "$model-$name" "$NP" "$STEPS" -o Distributed.tp_degree="$(degree tp "$name")" \
            -o Distributed.pp_degree="$(degree pp "$name")" "${extra[@]}" &&
            check layout "$model-$name" "$model-gpu1" 0.05 0.01 "$STEPS"
        done ;;
      scaling)
        one=
        for ((n = 1; n <= NP; n *= 2)); do
          GLOBAL=$((B * n))
          train "$model-scaling-dp$n" "$n" "${SCALING_STEPS:-30}" || continue
          tok=$(echo "$SUMMARY" | python3 -c "import json, sys; print(json.load(sys.stdin).get('tok_s', 0))")
          [ $n = 1 ] && one=$tok
          [ -n "$one" ] && [ "$one" != 0 ] &&
            report "{\"check\":\"dp_scaling\",\"model\":\"$model\",\"gpus\":$n,\"tok_s\":$tok,\"efficiency\":$(python3 -c "print(round($tok / ($n * $one), 3))")}"
        done
        GLOBAL=$((B * NP)) ;;
      resume)
        half=$((STEPS / 2)) dp=$((NP / 4)) saver="$model-tp2-pp2-save"
        [ "$dp" -ge 1 ] || { echo "scaling.sh: resume needs NP >= 4" >&2; continue; }
        train "$saver" "$NP" "$STEPS" -o Distributed.tp_degree=2 -o Distributed.pp_degree=2 \
          -o Engine.save_steps="$half" -o Checkpoint.keep_last=0 || continue
        step_dir=$OUT/$saver/checkpoints/$(printf 'step-%08d' "$half")
        for target in "dp$NP:$NP" "gpu1:1"; do
          train "$model-resume-${target%:*}" "${target#*:}" "$STEPS" -o Checkpoint.resume="$step_dir" &&
            check resume "$model-resume-${target%:*}" "$saver" 0.01 0.002 "$half"
        done ;;
      *) echo "scaling.sh: unknown part $part" >&2; exit 2 ;;
    esac
  done
done
exit $FAILED
