// Token + position embedding: forward (gather and add) and backward (scatter-add into the f32
// gradients of wte and wpe).
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

// One thread per output element of out (N,C).
template <typename T>
__global__ void EmbeddingForwardKernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                       int64_t N, int T_len, int C, int vocab_start,
                                       int vocab_local) {
  const int64_t total = N * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t n = i / C;
    const int c = static_cast<int>(i % C);
    const int row = tokens[n] - vocab_start;
    float value = (row >= 0 && row < vocab_local) ? ToFloat(wte[(int64_t)row * C + c]) : 0.f;
    if (wpe != nullptr) value += ToFloat(wpe[(int64_t)(n % T_len) * C + c]);
    out[i] = FromFloat<T>(value);
  }
}

// dwte: one thread per element of dout (N,C), atomically added into its token's row.
template <typename T>
__global__ void EmbeddingBackwardTokenKernel(float* dwte, const T* dout, const int32_t* tokens,
                                             int64_t N, int C, int vocab_start, int vocab_local) {
  const int64_t total = N * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t n = i / C;
    const int row = tokens[n] - vocab_start;
    if (row >= 0 && row < vocab_local) atomicAdd(&dwte[(int64_t)row * C + i % C], ToFloat(dout[i]));
  }
}

// dwpe (T,C): one thread per element, summing over the batch in a fixed order.
template <typename T>
__global__ void EmbeddingBackwardPositionKernel(float* dwpe, const T* dout, int B, int T_len,
                                                int C) {
  const int64_t total = (int64_t)T_len * C;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    float sum = 0.f;
    for (int b = 0; b < B; ++b) sum += ToFloat(dout[(int64_t)b * total + i]);
    dwpe[i] += sum;
  }
}

}  // namespace

cudaError_t LaunchEmbeddingForward(DType dtype, void* out, const int32_t* tokens, const void* wte,
                                   const void* wpe, int64_t N, int T, int C, int vocab_start,
                                   int vocab_local, cudaStream_t stream) {
  constexpr int kThreads = 256;
  TRAINER_DISPATCH_FLOAT_TYPE(dtype, E,
                              EmbeddingForwardKernel<E>
                              <<<GridStrideBlocks(N * C, kThreads), kThreads, 0, stream>>>(
                                  static_cast<E*>(out), tokens, static_cast<const E*>(wte),
                                  static_cast<const E*>(wpe), N, T, C, vocab_start, vocab_local));
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingBackward(DType dtype, float* dwte, float* dwpe, const void* dout,
                                    const int32_t* tokens, int B, int T, int C, int vocab_start,
                                    int vocab_local, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t N = (int64_t)B * T;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      EmbeddingBackwardTokenKernel<E><<<GridStrideBlocks(N * C, kThreads), kThreads, 0, stream>>>(
          dwte, static_cast<const E*>(dout), tokens, N, C, vocab_start, vocab_local);
      if (dwpe != nullptr) {
        EmbeddingBackwardPositionKernel<E>
            <<<GridStrideBlocks((int64_t)T * C, kThreads), kThreads, 0, stream>>>(
                dwpe, static_cast<const E*>(dout), B, T, C);
      });
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
