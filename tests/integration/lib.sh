# Shared helpers for the integration scripts: $1 trainer binary, $2 source dir, $3 scratch dir.
set -euo pipefail
TRAINER=$1
SRC=$2
SCRATCH=$3
# Absolute, so that relative arguments still name them after the cd into SCRATCH below; TESTS_DIR
# is this folder (the scripts source their other helpers from it).
[[ $TRAINER != */* ]] || TRAINER="$(cd "$(dirname "$TRAINER")" && pwd)/$(basename "$TRAINER")"
SRC="$(cd "$SRC" && pwd)"
TESTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MPIEXEC=${MPIEXEC:-mpiexec}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export PMIX_MCA_pcompress_base_silence_warning=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
COMPARE_CHECKPOINTS=${COMPARE_CHECKPOINTS:-compare_checkpoints}
CHECKPOINT_CONFIG=${CHECKPOINT_CONFIG:-checkpoint_config}
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH"

fail() { echo "FAIL: $*" >&2; exit 1; }

# mpirun N ARGS...: the trainer under mpiexec, with a hard time limit (a hang fails the test).
run_np() {
  local n=$1; shift
  timeout --kill-after=5 240 "$MPIEXEC" --oversubscribe --bind-to none -n "$n" "$TRAINER" "$@"
}

# word_text FILE: 700 random words of a 16-word vocabulary (seed 7), packed by bytes into
# FILE.h5 beside FILE: text that Python's tokenizer-free checks (hf_llama.py) read back as bytes.
word_text() {
  python3 -c "
import random
random.seed(7)
words = 'the cat sat on a mat while dogs ran in fields of gold and rivers of blue'.split()
open('$1', 'w').write(' '.join(random.choice(words) for _ in range(700)))"
  "$TRAINER" pack --input "$1" --output "${1%.*}.h5" --quiet
}

# A small packed dataset from text every Debian/Ubuntu machine has (the GPL-3 and Apache-2.0
# licence texts, 46 KB); elsewhere from the project's own docs. Not from the docs where the
# licences exist: the tests' data would change with every edit of the documentation.
small_inputs() {  # SMALL_INPUTS: two licenses, or the docs where they are missing
  SMALL_INPUTS=(/usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0)
  [ -f "${SMALL_INPUTS[0]}" ] && [ -f "${SMALL_INPUTS[1]}" ] || SMALL_INPUTS=("$SRC"/docs/*.md)
}
make_small_dataset() {
  small_inputs
  "$TRAINER" pack --input "${SMALL_INPUTS[@]}" --output "$1" >/dev/null
}

# make_small_dataset's text with each non-empty line a document of its own (JSON Lines), so that
# most 32-token windows hold a document boundary or two (Data.packing: documents).
make_document_dataset() {
  local out=$1
  small_inputs
  cat "${SMALL_INPUTS[@]}" | tr -d '\r\t' | awk 'NF { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); print "{\"text\": \"" $0 "\"}" }' \
    > "$out.jsonl"
  "$TRAINER" pack --input-format jsonl --input "$out.jsonl" --output "$out" >/dev/null
}

# The tiny GPT of the layout comparisons (parallel_layouts.sh, checkpoint_layouts.sh) on
# data.h5: 5 layers, which split unevenly over 2 or 4 stages. Adam's eps is 1e-6, not 1e-8: some
# gradient elements are ~1e-9 (in weights as well as biases and LayerNorm parameters), and
# where |g| ~ eps, Adam's g / (sqrt(v) + eps) turns the reduction order's rounding of g
# (~1e-10) into updates that differ by up to ~1e-5. Through the curvature these move the other
# gradients, and after 10 steps two layouts' trajectories could part far beyond rounding: with
# one data set and eps 1e-8, dp2's Adam second moment of h.0.ln_1.weight left the single-rank
# run's by 8e-2, while any one step from the same state agreed to 1e-7; with eps 1e-6, 6e-6.
TINY_LAYOUT_GPT=(-o Data.train_path=data.h5 -o Data.val_fraction=0 -o Global.device=cpu
                 -o Model.hidden_size=64 -o Model.num_layers=5 -o Model.num_heads=4
                 -o Model.max_seq_len=32 -o Global.global_batch_size=8 -o Global.micro_batch_size=2
                 -o Engine.logging_freq=1 -o Engine.eval_freq=0 -o Optimizer.warmup_steps=2
                 -o Optimizer.lr=3e-3 -o Optimizer.eps=1e-6)
# The same run for the llama family: grouped-query attention (4 query heads on 2 kv heads),
# Qwen3's q/k norm, SwiGLU, an untied LM head.
TINY_LAYOUT_LLAMA=("${TINY_LAYOUT_GPT[@]}" -o Model.arch=llama -o Model.num_kv_heads=2
                   -o Model.ffn_hidden_size=96 -o Model.qk_norm=true -o Model.tie_embeddings=false
                   -o Model.norm_eps=1e-6)
# The llama model with mixture-of-experts layers (parallel_layouts_moe.sh, checkpoint_layouts.sh):
# layer 0 dense (moe_first_k_dense), then every second layer MoE (2 and 4, so that two pipeline
# stages each hold dense and MoE layers): 4 experts, top-2, a gated shared expert, load-balancing
# and z losses, and DeepSeek-V3's expert bias (moved by the global batch's load after each step).
TINY_LAYOUT_MOE=("${TINY_LAYOUT_LLAMA[@]}" -o Model.num_experts=4 -o Model.moe_router_topk=2
                 -o Model.moe_ffn_hidden_size=32 -o Model.moe_shared_expert_intermediate_size=24
                 -o Model.moe_first_k_dense=1 -o Model.moe_layer_freq=2
                 -o Model.moe_aux_loss_coeff=0.01 -o Model.moe_z_loss_coeff=0.001
                 -o Model.moe_router_bias_update_rate=0.01)

# run_layout NAME NP OVERRIDES...: `trainer train` of "${COMMON[@]}" on NP ranks into NAME/, its
# log in NAME.log (the layout comparisons: parallel_layouts.sh, sharding_layouts.sh).
run_layout() {
  local name=$1 np=$2; shift 2
  run_np "$np" train "${COMMON[@]}" -o Engine.output_dir="$name" "$@" > "$name.log" 2>&1 ||
    { tail -20 "$name.log"; fail "layout $name exited non-zero"; }
}

# run_check NAME CODE NP ARGS...: runs `trainer check` on NP ranks, expects exit code CODE (a hang
# killed by run_np's time limit fails); output in NAME.out.
run_check() {
  local name=$1 code=$2 np=$3
  shift 3
  local rc=0
  run_np "$np" check "$@" >"$name.out" 2>&1 || rc=$?
  [[ $rc -ne 124 && $rc -ne 137 ]] || fail "$name: hung (killed by the time limit)"
  [[ $rc -eq $code ]] || { cat "$name.out"; fail "$name: exit code $rc, expected $code"; }
}
# expect_line NAME REGEX: a line of NAME.out matches the extended REGEX.
expect_line() {
  grep -qE -- "$2" "$1.out" || { cat "$1.out"; fail "$1: no line matching /$2/"; }
}

# require_gpus N: exit 77 (CTest's skip) unless at least N GPUs are visible; sets GPUS.
require_gpus() {
  GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "${GPUS:-0}" -ge "$1" ] || { echo "skip: fewer than $1 GPU(s) visible"; exit 77; }
}

# expect_error CODE TEXT COMMAND...: exit code CODE and exactly one error line containing TEXT.
expect_error() {
  local code=$1 text=$2 rc=0
  shift 2
  "$@" > out.log 2> err.log || rc=$?
  [ "$rc" = "$code" ] || { cat out.log err.log; fail "$*: exit $rc, expected $code"; }
  if [ "$(grep -c '^error: ' err.log)" != 1 ] || ! grep -q "$text" err.log; then
    cat err.log
    fail "$*: expected one error line with '$text'"
  fi
}

# Losses of metrics.jsonl training records, one per line, as printed (%.8g).
losses() { grep -o '"loss": [^,}]*' "$1" | awk '{print $2}'; }

# The MoE fields of metrics.jsonl's training records, one record per line: the aux loss to 4
# digits (its sum over ranks differs by rounding between layouts) and every layer's dropped tokens.
moe_fields() {
  grep '"moe_aux_loss"' "$1" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print("%.4g" % r["moe_aux_loss"], [v for k, v in sorted(r.items()) if k.startswith("moe_dropped")])'
}

# compare_curves RUN REF EACH MEAN COUNT [FIELD]: RUN's loss (or FIELD) at each of its logged
# steps against REF's at the same step (relative difference): COUNT steps, each within EACH, their
# mean within MEAN (bench/metrics.py compare, as bench/scaling.sh checks layouts on GPUs). Prints
# the figures.
compare_curves() {
  local result
  result=$(python3 "$SRC/bench/metrics.py" compare "$@") || return 1
  echo "$result"
  [[ $result == *'"pass": true'* ]]
}
