// Vocabulary-parallel softmax cross-entropy in three fused passes over the logits (block per row):
// row max, then (sum of exp, target logit), then losses and dlogits written over the logits
// buffer, so probabilities for the whole vocabulary are never stored anywhere else. Padding
// columns (global index >= vocab_size) are masked: they take no part and get zero gradient.
#include <cuda_pipeline.h>

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

// Logits move in 16-byte packs (8 bf16 or 4 f32) where the row is aligned, the rest one by one.
template <typename T>
constexpr int kPack = 16 / sizeof(T);

__device__ __forceinline__ bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Calls f(c, logit) for every column c < count of `row` (this thread's share).
template <typename T, typename F>
__device__ __forceinline__ void ForEachColumn(const T* row, int count, F&& f) {
  int begin = 0;
  if (Aligned16(row)) {
    const int packs = count / kPack<T>;
    for (int i = threadIdx.x; i < packs; i += blockDim.x) {
      int4 raw = reinterpret_cast<const int4*>(row)[i];
      const T* values = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) f(i * kPack<T> + k, ToFloat(values[k]));
    }
    begin = packs * kPack<T>;
  }
  for (int c = begin + threadIdx.x; c < count; c += blockDim.x) f(c, ToFloat(row[c]));
}

template <typename T>
__global__ void CrossEntropyRowMaxKernel(float* row_max, const T* logits, int vocab_local,
                                         int vocab_start, int vocab_size) {
  __shared__ float scratch[kWarpSize];
  const T* row = logits + (int64_t)blockIdx.x * vocab_local;
  float m = -INFINITY;
  ForEachColumn(row, RealColumns(vocab_local, vocab_start, vocab_size),
                [&](int, float x) { m = fmaxf(m, x); });
  m = BlockMax(m, scratch);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

// sums (2,N): [0][n] = sum of exp(logit - max) over real columns; [1][n] = the target's logit
// when this rank holds it, else 0.
template <typename T>
__global__ void CrossEntropySumsKernel(float* sums, const T* logits, const float* row_max,
                                       const int32_t* targets, int64_t N, int vocab_local,
                                       int vocab_start, int vocab_size) {
  __shared__ float scratch[kWarpSize];
  const int64_t n = blockIdx.x;
  const T* row = logits + n * vocab_local;
  const int real = RealColumns(vocab_local, vocab_start, vocab_size);
  const float m = row_max[n];
  float sum = 0.f;
  ForEachColumn(row, real, [&](int, float x) { sum += expf(x - m); });
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
__global__ void CrossEntropyBackwardKernel(float* losses, T* dlogits, const T* logits,
                                           const float* row_max, const float* sums,
                                           const int32_t* targets, int64_t N, int vocab_local,
                                           int vocab_start, int vocab_size, float dloss_scale) {
  const int64_t n = blockIdx.x;
  if (targets[n] < 0) {  // an ignored target (loss mask 0): no loss, a zero gradient row
    if (threadIdx.x == 0) losses[n] = 0.f;
    if (dlogits != nullptr)
      for (int c = threadIdx.x; c < vocab_local; c += blockDim.x)
        dlogits[n * vocab_local + c] = FromFloat<T>(0.f);
    return;
  }
  const float m = row_max[n], sum = sums[n];
  if (threadIdx.x == 0) losses[n] = logf(sum) + m - sums[N + n];
  if (dlogits == nullptr) return;
  const T* row = logits + n * vocab_local;
  T* drow = dlogits + n * vocab_local;
  const int real = RealColumns(vocab_local, vocab_start, vocab_size);
  const int t = targets[n] - vocab_start;
  const float inv_sum = 1.f / sum;
  auto grad = [&](int c, float x) {
    return c < real ? dloss_scale * (expf(x - m) * inv_sum - (c == t ? 1.f : 0.f)) : 0.f;
  };
  int begin = 0;
  if (Aligned16(row) && Aligned16(drow)) {
    const int packs = vocab_local / kPack<T>;
    for (int i = threadIdx.x; i < packs; i += blockDim.x) {
      int4 raw = reinterpret_cast<const int4*>(row)[i];
      T* values = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k)
        values[k] = FromFloat<T>(grad(i * kPack<T> + k, ToFloat(values[k])));
      reinterpret_cast<int4*>(drow)[i] = raw;
    }
    begin = packs * kPack<T>;
  }
  for (int c = begin + threadIdx.x; c < vocab_local; c += blockDim.x)
    drow[c] = FromFloat<T>(grad(c, ToFloat(row[c])));
}

// The whole row in one block (one pass over global memory). Each thread stages its own 16-byte
// packs of the row (packs t, t + blockDim.x, ...) in shared memory with asynchronous copies, issued
// in kStages groups, and only ever reads back the packs it copied itself, so no barrier guards the
// data. While later groups are still in flight it folds the arrived ones into a running maximum
// and sum of exp (online softmax); the block then combines the threads' (max, sum) pairs, and each
// thread writes the loss gradient of its packs. For ranks holding the whole vocabulary (no TP)
// when the row fits in shared memory. exp(x - m) is computed as exp2(x log2e - m log2e), one FMA
// and one ex2 per element.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    CrossEntropyFusedKernel(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                            int vocab_local, int vocab_size, float dloss_scale) {
  constexpr int kStages = 4;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ int4 staged[];
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  if (targets[r] < 0) {  // an ignored target (loss mask 0), the same for the whole block: no
    if (threadIdx.x == 0) losses[r] = 0.f;  // loss and a zero gradient row, before any barrier
    if (dlogits != nullptr)
      for (int c = threadIdx.x; c < vocab_local; c += blockDim.x)
        dlogits[r * vocab_local + c] = FromFloat<T>(0.f);
    return;
  }
  const int4* row = reinterpret_cast<const int4*>(logits + r * vocab_local);
  const int real = vocab_size < vocab_local ? vocab_size : vocab_local;
  const int packs = vocab_local / kPack<T>;  // vocab_local is a multiple of the pack (launcher)
  const int full_packs = real / kPack<T>;    // packs with no padding column
  const int per_thread = (packs + blockDim.x - 1) / blockDim.x;
  const int per_stage = (per_thread + kStages - 1) / kStages;
  // This thread's j-th pack, or -1 past the row's end.
  auto pack = [&](int j) {
    const int i = threadIdx.x + j * blockDim.x;
    return i < packs ? i : -1;
  };
#pragma unroll
  for (int stage = 0; stage < kStages; ++stage) {
    for (int j = stage * per_stage; j < min(per_thread, (stage + 1) * per_stage); ++j)
      if (const int i = pack(j); i >= 0) __pipeline_memcpy_async(&staged[i], &row[i], sizeof(int4));
    __pipeline_commit();
  }
  float m = -INFINITY, s = 0.f;  // running max of the real logits and sum of exp(x - m)
#pragma unroll
  for (int stage = 0; stage < kStages; ++stage) {
    __pipeline_wait_prior(kStages - 1 - stage);
    for (int j = stage * per_stage; j < min(per_thread, (stage + 1) * per_stage); ++j) {
      const int i = pack(j);
      if (i < 0) break;
      int4 raw = staged[i];
      const T* values = reinterpret_cast<const T*>(&raw);
      float x[kPack<T>], pack_max = -INFINITY;
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) x[k] = ToFloat(values[k]);
      if (i >= full_packs) {  // the row's last packs: padding takes no part (exp = 0)
#pragma unroll
        for (int k = 0; k < kPack<T>; ++k)
          if (i * kPack<T> + k >= real) x[k] = -INFINITY;
      }
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) pack_max = fmaxf(pack_max, x[k]);
      if (pack_max == -INFINITY) continue;  // all padding
      if (pack_max > m) {  // rescale the sum to the new maximum (exp2(-inf) = 0 at the start)
        s *= exp2f((m - pack_max) * kLog2e);
        m = pack_max;
      }
      const float m_log2 = m * kLog2e;
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) s += exp2f(fmaf(x[k], kLog2e, -m_log2));
    }
  }
  // The target's logit is read before the block's first barrier: with dlogits == logits (in place,
  // as in training) the threads past BlockSum below overwrite the row, the target's pack included.
  const int t = targets[r];
  const float target_logit = threadIdx.x == 0 ? ToFloat(logits[r * vocab_local + t]) : 0.f;
  const float row_max = BlockMax(m, scratch);
  const float sum = BlockSum(m == -INFINITY ? 0.f : s * exp2f((m - row_max) * kLog2e), scratch);
  if (threadIdx.x == 0) losses[r] = logf(sum) + row_max - target_logit;
  if (dlogits == nullptr) return;
  const float m_log2 = row_max * kLog2e, scale_over_sum = dloss_scale / sum;
  const int t_pack = t < real ? t / kPack<T> : -1;  // the pack holding a real target
  int4* drow = reinterpret_cast<int4*>(dlogits + r * vocab_local);
  for (int j = 0; j < per_thread; ++j) {
    const int i = pack(j);
    if (i < 0) break;
    int4 raw = staged[i];
    T* values = reinterpret_cast<T*>(&raw);
    float g[kPack<T>];
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k)
      g[k] = exp2f(fmaf(ToFloat(values[k]), kLog2e, -m_log2)) * scale_over_sum;
    // Per pack, not per element: the padding (zero gradient) and the target's one-hot.
    if (i >= full_packs) {
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k)
        if (i * kPack<T> + k >= real) g[k] = 0.f;
    }
    if (i == t_pack) {
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k)
        if (i * kPack<T> + k == t) g[k] -= dloss_scale;
    }
#pragma unroll
    for (int k = 0; k < kPack<T>; ++k) values[k] = FromFloat<T>(g[k]);
    drow[i] = raw;
  }
}

}  // namespace

bool LaunchCrossEntropyFused(DType dtype, float* losses, void* dlogits, const void* logits,
                             const int32_t* targets, int64_t N, int vocab_local, int vocab_size,
                             float dloss_scale, cudaStream_t stream, cudaError_t* error) {
  const size_t element = DTypeSize(dtype);
  const size_t bytes = static_cast<size_t>(vocab_local) * element;
  int device = 0, max_shared = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  const bool fits = bytes % 16 == 0 && bytes + 1024 <= static_cast<size_t>(max_shared) &&
                    reinterpret_cast<uintptr_t>(logits) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(dlogits) % 16 == 0;
  if (!fits) return false;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      *error = cudaFuncSetAttribute(CrossEntropyFusedKernel<E>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes));
      if (*error == cudaSuccess)
          CrossEntropyFusedKernel<E><<<static_cast<unsigned>(N), kThreads, bytes, stream>>>(
              losses, static_cast<E*>(dlogits), static_cast<const E*>(logits), targets, vocab_local,
              vocab_size, dloss_scale));
  if (*error == cudaSuccess) *error = cudaGetLastError();
  return true;
}

cudaError_t LaunchCrossEntropyRowMax(DType dtype, float* row_max, const void* logits, int64_t N,
                                     int vocab_local, int vocab_start, int vocab_size,
                                     cudaStream_t stream) {
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      CrossEntropyRowMaxKernel<E><<<static_cast<unsigned>(N), kThreads, 0, stream>>>(
          row_max, static_cast<const E*>(logits), vocab_local, vocab_start, vocab_size));
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropySums(DType dtype, float* sums, const void* logits,
                                   const float* row_max, const int32_t* targets, int64_t N,
                                   int vocab_local, int vocab_start, int vocab_size,
                                   cudaStream_t stream) {
  TRAINER_DISPATCH_FLOAT_TYPE(dtype, E,
                              CrossEntropySumsKernel<E>
                              <<<static_cast<unsigned>(N), kThreads, 0, stream>>>(
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
      CrossEntropyBackwardKernel<E><<<static_cast<unsigned>(N), kThreads, 0, stream>>>(
          losses, static_cast<E*>(dlogits), static_cast<const E*>(logits), row_max, sums, targets,
          N, vocab_local, vocab_start, vocab_size, dloss_scale));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
