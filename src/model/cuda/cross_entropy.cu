// Vocabulary-parallel softmax cross-entropy in three fused passes over the logits (block per row):
// row max, then (sum of exp, target logit), then losses and dlogits written over the logits
// buffer, so probabilities for the whole vocabulary are never stored anywhere else. Padding
// columns (global index >= vocab_size) are masked: they take no part and get zero gradient.
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kThreads = 512;

// Columns of this rank's slice that are real (not vocabulary padding): [0, RealColumns()).
__device__ __forceinline__ int RealColumns(int vocab_local, int vocab_start, int vocab_size) {
  const int real = vocab_size - vocab_start;
  return real < 0 ? 0 : (real > vocab_local ? vocab_local : real);
}

template <typename T>
__global__ void RowMaxKernel(float* row_max, const T* logits, int vocab_local, int vocab_start,
                             int vocab_size) {
  __shared__ float scratch[kWarpSize];
  const T* row = logits + (int64_t)blockIdx.x * vocab_local;
  const int real = RealColumns(vocab_local, vocab_start, vocab_size);
  float m = -INFINITY;
  for (int c = threadIdx.x; c < real; c += blockDim.x) m = fmaxf(m, ToFloat(row[c]));
  m = BlockMax(m, scratch);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

// sums (2,N): [0][n] = sum of exp(logit - max) over real columns; [1][n] = the target's logit
// when this rank holds it, else 0.
template <typename T>
__global__ void SumsKernel(float* sums, const T* logits, const float* row_max,
                           const int32_t* targets, int64_t N, int vocab_local, int vocab_start,
                           int vocab_size) {
  __shared__ float scratch[kWarpSize];
  const int64_t n = blockIdx.x;
  const T* row = logits + n * vocab_local;
  const int real = RealColumns(vocab_local, vocab_start, vocab_size);
  const float m = row_max[n];
  float sum = 0.f;
  for (int c = threadIdx.x; c < real; c += blockDim.x) sum += expf(ToFloat(row[c]) - m);
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) {
    const int t = targets[n] - vocab_start;
    sums[n] = sum;
    sums[N + n] = (t >= 0 && t < real) ? ToFloat(row[t]) : 0.f;
  }
}

// losses (N) and, when dlogits is given, dlogits = scale * (softmax - onehot) (in place allowed:
// each element is read and then written by the same thread).
template <typename T>
__global__ void BackwardKernel(float* losses, T* dlogits, const T* logits, const float* row_max,
                               const float* sums, const int32_t* targets, int64_t N,
                               int vocab_local, int vocab_start, int vocab_size,
                               float dloss_scale) {
  const int64_t n = blockIdx.x;
  const float m = row_max[n], sum = sums[n];
  if (threadIdx.x == 0) losses[n] = logf(sum) + m - sums[N + n];
  if (dlogits == nullptr) return;
  const T* row = logits + n * vocab_local;
  T* drow = dlogits + n * vocab_local;
  const int real = RealColumns(vocab_local, vocab_start, vocab_size);
  const int t = targets[n] - vocab_start;
  const float inv_sum = 1.f / sum;
  for (int c = threadIdx.x; c < vocab_local; c += blockDim.x) {
    float g = 0.f;
    if (c < real) g = dloss_scale * (expf(ToFloat(row[c]) - m) * inv_sum - (c == t ? 1.f : 0.f));
    drow[c] = FromFloat<T>(g);
  }
}

}  // namespace

cudaError_t LaunchCrossEntropyRowMax(DType dtype, float* row_max, const void* logits, int64_t N,
                                     int vocab_local, int vocab_start, int vocab_size,
                                     cudaStream_t stream) {
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      RowMaxKernel<E><<<static_cast<unsigned>(N), kThreads, 0, stream>>>(
          row_max, static_cast<const E*>(logits), vocab_local, vocab_start, vocab_size));
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropySums(DType dtype, float* sums, const void* logits,
                                   const float* row_max, const int32_t* targets, int64_t N,
                                   int vocab_local, int vocab_start, int vocab_size,
                                   cudaStream_t stream) {
  TRAINER_DISPATCH_FLOAT_TYPE(dtype, E,
                              SumsKernel<E><<<static_cast<unsigned>(N), kThreads, 0, stream>>>(
                                  sums, static_cast<const E*>(logits), row_max, targets, N,
                                  vocab_local, vocab_start, vocab_size));
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropyBackward(DType dtype, float* losses, void* dlogits,
                                       const void* logits, const float* row_max, const float* sums,
                                       const int32_t* targets, int64_t N, int vocab_local,
                                       int vocab_start, int vocab_size, float dloss_scale,
                                       cudaStream_t stream) {
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      BackwardKernel<E><<<static_cast<unsigned>(N), kThreads, 0, stream>>>(
          losses, static_cast<E*>(dlogits), static_cast<const E*>(logits), row_max, sums, targets,
          N, vocab_local, vocab_start, vocab_size, dloss_scale));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
