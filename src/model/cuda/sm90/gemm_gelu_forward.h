// The MLP's first GEMM with its bias and GELU as a Hopper kernel of our own
// (sm90/gemm_gelu_forward.cu):
//   pre (M,N) = x (M,K) w (N,K)^T + bias (N),  out (M,N) = GELU(pre)
// bf16 row-major operands and outputs, f32 accumulation, tanh GELU as GPT-2 (out is GELU of pre
// as rounded to bf16, the value the backward reads). It would take the place of cuBLASLt's
// GELU_AUX_BIAS epilogue or cuDNN's fused graph; its CPU twin is cpu::matmul_forward with gelu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace trainer {
namespace cuda {

struct GemmGeluForwardProblem {
  const void* x = nullptr;     // (M,K) bf16
  const void* w = nullptr;     // (N,K) bf16: the weight as stored (out features, in features)
  const void* bias = nullptr;  // (N) bf16
  void* pre = nullptr;         // (M,N) bf16
  void* out = nullptr;         // (M,N) bf16
  int64_t m = 0, n = 0, k = 0;
  // CTAs per cluster, 1 or 2 (M then a multiple of 256): in twos, the CTAs that take two tiles
  // one above the other share w's k-blocks by multicast (each loads half of them for both).
  int cluster = 1;
};

// Whether the kernel runs this problem on the current device: an sm_90 GPU, M a multiple of 128
// (256 in clusters of two), N of 256, K of 64 and at least 192, a bias, 16-byte aligned pointers,
// cluster 1 or 2.
bool GemmGeluForwardSupported(const GemmGeluForwardProblem& problem);

// Enqueues the kernel (one CTA per SM). Returns cudaErrorNotSupported for a problem that
// GemmGeluForwardSupported refuses.
cudaError_t LaunchGemmGeluForward(const GemmGeluForwardProblem& problem, cudaStream_t stream);

}  // namespace cuda
}  // namespace trainer
