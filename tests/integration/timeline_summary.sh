#!/usr/bin/env bash
# bench/timeline_summary.py on a synthetic timeline whose figures are known in closed form: after
# 2 warm-up steps of 500 us (left out by --skip 2), 8 steps of 110 us, each an embedding kernel
# (0-10 us), a GEMM (12-50), a memset (60-61) and a second GEMM (70-100). Per step: busy
# 10 + 38 + 1 + 30 = 79 us, idle 31 us; gaps of 5 us or more follow the first GEMM (10 us), the
# memset (9 us) and the second GEMM (10 us, up to the next step); the 2 us gap after the embedding
# is below the threshold.
#   timeline_summary.sh TRAINER SOURCE_DIR SCRATCH   (the trainer is not used)
set -euo pipefail
SRC=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK"
python3 - "$WORK/t.csv" <<'PY'
import sys
rows = ["kind,start_ns,end_ns,stream,name"]
t = 0
for step in range(10):
    length = 500_000 if step < 2 else 110_000
    rows += [f"kernel,{t},{t + 10_000},7,void trainer::cuda::EmbeddingForwardKernel<bf16>(int)",
             f"kernel,{t + 12_000},{t + 50_000},7,nvjet_sm90_gemm_a",
             f"memset,{t + 60_000},{t + 61_000},7,4 bytes",
             f"kernel,{t + 70_000},{t + 100_000},7,nvjet_sm90_gemm_b"]
    t += length
rows.append(f"kernel,{t},{t + 10_000},7,void trainer::cuda::EmbeddingForwardKernel<bf16>(int)")
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PY
out=$(python3 "$SRC/bench/timeline_summary.py" "$WORK/t.csv" --skip 2)
echo "$out"
expect() {
  grep -qF -- "$1" <<< "$out" || { echo "FAIL: expected a line with '$1'" >&2; exit 1; }
}
# 11 step starts (10 steps and a closing kernel): steps 3-10 after --skip 2
expect "8 steps: 0.110 ms per step, GPU busy 0.079 ms (71.82%), idle 0.031 ms, 4 kernels and memsets per step"
expect "10.0 us    1.0x  nvjet_sm90_gemm_a"
expect "9.0 us    1.0x  4 bytes"
expect "10.0 us    1.0x  nvjet_sm90_gemm_b"
if grep -q "us .*EmbeddingForwardKernel" <<< "$(sed -n '/gaps of/,/kernels by time/p' <<< "$out")"; then
  echo "FAIL: the 2 us gap after the embedding is below the 5 us threshold" >&2
  exit 1
fi
expect "0.038 ms  34.5%  kernel nvjet_sm90_gemm_a"
echo "timeline summary: all figures as expected"
