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
# by kind: the two GEMMs 68 us, the embedding and the memset 11 us, idle 31 us of 110
expect "0.068 ms  61.8%  GEMMs (cuBLASLt, cuDNN matmul graphs)"
expect "0.011 ms  10.0%  embedding, partial sums, elementwise, memsets"
expect "0.031 ms  28.2%  GPU idle between kernels"

# Every kind once, under the names the libraries and our kernels really have: steps of 100 us,
# 3 of them after 1 warm-up step (--skip 1); per step attention 10 + 1 + 2 us, GEMMs 30 + 10,
# LayerNorm 5, cross-entropy 4, column sums 3, AdamW 8 + the norm's squares 2, other 5 + 1, idle 19.
python3 - "$WORK/kinds.csv" <<'PY'
import sys
step = [(0, 5, "kernel", "void trainer::cuda::(anonymous namespace)::EmbeddingForwardKernel<__nv_bfloat16>(int)"),
        (5, 15, "kernel", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7"),
        (15, 45, "kernel", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"),
        (45, 55, "kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_aux_bf16_dg"),
        (55, 60, "kernel", "void trainer::cuda::(anonymous namespace)::LayerNormForwardRegisterKernel<__nv_bfloat16, 8>(int)"),
        (60, 64, "kernel", "void trainer::cuda::(anonymous namespace)::CrossEntropyFusedKernel<__nv_bfloat16>(int)"),
        (64, 67, "kernel", "void trainer::cuda::(anonymous namespace)::ColumnSumsPartialKernel<__nv_bfloat16, 8, false>(int)"),
        (67, 75, "kernel", "void trainer::cuda::(anonymous namespace)::AdamWQuadKernel<__nv_bfloat16>(int)"),
        (75, 77, "kernel", "void trainer::cuda::(anonymous namespace)::SumPartialKernel<true>(int)"),
        (77, 78, "kernel", "void cudnn::fusion::convert_dq_to_16bits<true>(int)"),
        (78, 79, "memset", "4 bytes"),
        (79, 81, "kernel", "void trainer::cuda::(anonymous namespace)::AttentionForwardFallbackKernel<__nv_bfloat16>(int)")]
rows = ["kind,start_ns,end_ns,stream,name"]
for i in range(5):
    t = i * 100_000
    rows += [f'{k},{t + s * 1000},{t + e * 1000},7,"{name}"' for s, e, k, name in step]
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PY
out=$(python3 "$SRC/bench/timeline_summary.py" "$WORK/kinds.csv" --skip 1)
echo "$out"
expect "3 steps: 0.100 ms per step, GPU busy 0.081 ms (81.00%)"
expect "0.040 ms  40.0%  GEMMs (cuBLASLt, cuDNN matmul graphs)"
expect "0.013 ms  13.0%  attention (cuDNN, or our fallback kernels)"
expect "0.010 ms  10.0%  AdamW and the gradient norm"
expect "0.006 ms   6.0%  embedding, partial sums, elementwise, memsets"
expect "0.005 ms   5.0%  LayerNorm / RMSNorm forward and backward"
expect "0.004 ms   4.0%  cross-entropy"
expect "0.003 ms   3.0%  bias gradients (column sums)"
expect "0.019 ms  19.0%  GPU idle between kernels"

# A MoE layer's phases: steps of 50 us, 3 after 1 warm-up step; per step the router 2 + 1 us,
# the dispatch 3, the grouped GEMMs 20 + 5 (the weight gradients), SwiGLU 4, the combine 3 + 1,
# the embedding 2, idle 9.
python3 - "$WORK/moe.csv" <<'PY'
import sys
k = "void trainer::cuda::(anonymous namespace)::"
step = [(0, 2, k + "EmbeddingForwardKernel<__nv_bfloat16>(int)"),
        (2, 4, k + "MoeRouterForwardKernel(int)"), (4, 5, k + "MoeAuxPartialsKernel(int)"),
        (5, 8, k + "MoeGatherRowsKernel<__nv_bfloat16>(int)"),
        (8, 28, "void trainer::cuda::sm90::GroupedGemmKernel<128, 128, 64>(int)"),
        (28, 33, "void trainer::cuda::sm90::GroupedWeightGradientKernel<128>(int)"),
        (33, 37, k + "SwiGluForwardKernel<__nv_bfloat16>(int)"),
        (37, 40, k + "MoeScatterRowsKernel<__nv_bfloat16>(int)"),
        (40, 41, k + "MoeSlotDotsKernel<__nv_bfloat16>(int)")]
rows = ["kind,start_ns,end_ns,stream,name"]
for i in range(5):
    t = i * 50_000
    rows += [f'kernel,{t + s * 1000},{t + e * 1000},7,"{name}"' for s, e, name in step]
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PY
out=$(python3 "$SRC/bench/timeline_summary.py" "$WORK/moe.csv" --skip 1)
echo "$out"
expect "3 steps: 0.050 ms per step, GPU busy 0.041 ms (82.00%)"
expect "0.025 ms  50.0%  MoE experts: grouped GEMMs"
expect "0.004 ms   8.0%  SwiGLU forward and backward"
expect "0.004 ms   8.0%  MoE combine (weighted scatter back, weight gradients)"
expect "0.003 ms   6.0%  MoE router (scores, top-k, aux and z losses)"
expect "0.003 ms   6.0%  MoE dispatch (rows gathered into expert order)"
expect "0.002 ms   4.0%  embedding, partial sums, elementwise, memsets"
echo "timeline summary: all figures as expected"
