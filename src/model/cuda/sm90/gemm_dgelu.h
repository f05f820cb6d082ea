// The MLP's GELU-gradient GEMM as a Hopper kernel of our own (sm90/gemm_dgelu.cu):
//   din (M,N) = GELU'(pre (M,N)) * (dout (M,K) w (K,N))
// bf16 row-major operands and output, f32 accumulation, tanh GELU as GPT-2. It takes the place of
// cuBLASLt's DGELU epilogue where it is faster; its CPU twin is cpu::matmul_forward (on w's
// transpose) followed by cpu::gelu_backward.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainer {
namespace cuda {

struct GemmDgeluProblem {
  const void* dout = nullptr;  // (M,K) bf16
  const void* w = nullptr;     // (K,N) bf16: the down projection's weight as stored
  const void* pre = nullptr;   // (M,N) bf16: the GELU's input from the forward
  void* din = nullptr;         // (M,N) bf16; may be pre itself (written in place)
  // (M/128, N) f32, or null: row i gets the column sums of din's rows 128 i .. 128 i + 127 (of din
  // as stored, in bf16), so that the bias gradient of the linear that made pre is one short pass
  // over these partial sums instead of one over din.
  void* column_partials = nullptr;
  int64_t m = 0, n = 0, k = 0;
  // How many of a tile's four 64-column boxes (the last ones) get their GELU'(pre) in the
  // multipliers' epilogue instead of from the spare warps (0-4; din is the same either way). The
  // spare warps' slopes must be ready when a tile's k loop ends; where that loop is short (small
  // K), moving boxes to the epilogue shortens their work at the cost of a longer epilogue.
  int epilogue_slope_boxes = 0;
  // With column_partials: whether the multipliers sum din's columns as they form it (their two
  // rows per thread in registers, then across the lanes of each warp; the spare warps add the 8
  // warps' rows) instead of the spare warps summing the tile from shared memory afterwards. That
  // shortens the spare warps' work per tile, which bounds the kernel where K is small, at the
  // cost of a longer epilogue. The sums differ only by the f32 rounding of their other order.
  bool sums_in_epilogue = false;
  // CTAs per cluster, 1 or 2 (M then a multiple of 256): in twos, the CTAs that take two tiles
  // one above the other share w's k-blocks by multicast (each loads half of them for both).
  int cluster = 1;
};

// Whether the kernel runs this problem on the current device: an sm_90 GPU, M a multiple of 128
// (256 in clusters of two), N of 256, K of 64, 16-byte aligned pointers, epilogue_slope_boxes in
// 0-4, cluster 1 or 2. Callers take cuBLASLt's
// route otherwise.
bool GemmDgeluSupported(const GemmDgeluProblem& problem);

// The CTAs its launch would take (0 where it would not launch): for benchmarks' reports.
int GemmDgeluGridSize(const GemmDgeluProblem& problem);

// Enqueues the kernel (one CTA per SM, 216 KB of shared memory each, 222 KB with the sums in the
// epilogue; in clusters, as many as fit).
// Returns cudaErrorNotSupported for a problem that GemmDgeluSupported refuses.
cudaError_t LaunchGemmDgelu(const GemmDgeluProblem& problem, cudaStream_t stream);

}  // namespace cuda
}  // namespace trainer
