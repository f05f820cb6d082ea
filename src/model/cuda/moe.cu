// Mixture of experts on the GPU, the twins of src/model/cpu/moe.cpp (same order of operations,
// so that ties and dropped slots come out the same):
// - the router: one thread per token over its E logits (f32): the scores (softmax with the
//   logsumexp summed in f64 as on the CPU, or sigmoid), the top K by the scores or the logits
//   (the expert bias added to the keys only; equal keys: the lower expert index first), the K
//   chosen in ascending order, their weights, the shared expert's sigmoid gate;
// - its backward: one thread per token, the row of dlogits doubling as the scores' gradient;
// - scatter / gather of rows by slot (N,K') (-1: dropped): a block per token, threads over C,
//   the gather summing each token's K' rows in ascending k in f32 and rounding once (no atomics,
//   deterministic);
// - slot dots: a warp per (token, slot), a fixed shuffle tree (deterministic).
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kRouterThreads = 128;
constexpr int kRowThreads = 256;
constexpr int kDotWarps = 8;

__device__ __forceinline__ float Sigmoid(float x) {
  return 1.f / (1.f + expf(-x));
}

// The logsumexp of z (E), summed in f64 as cpu::Softmax does.
__device__ float LogSumExp(const float* z, int E) {
  float max = z[0];
  for (int e = 1; e < E; ++e) max = fmaxf(max, z[e]);
  double sum = 0;
  for (int e = 0; e < E; ++e) sum += exp(static_cast<double>(z[e] - max));
  return max + static_cast<float>(log(sum));
}

// The key the choice compares for expert e.
__device__ __forceinline__ float ChoiceKey(const float* by, const float* bias, int e) {
  return bias != nullptr ? by[e] + bias[e] : by[e];
}

// a before b in the choice's order: the larger key, equal keys the lower index.
__device__ __forceinline__ bool Before(float ka, int a, float kb, int b) {
  return ka > kb || (ka == kb && a < b);
}

__global__ void __launch_bounds__(kRouterThreads)
    MoeRouterForwardKernel(float* __restrict__ weights, int32_t* __restrict__ experts,
                           float* __restrict__ probs, float* __restrict__ lse,
                           const float* __restrict__ logits, const float* __restrict__ bias,
                           MoeRouterDims d) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= d.N) return;
  const int E = d.E, K = d.K, E2 = E + d.shared_gate, K2 = K + d.shared_gate;
  const float* z = logits + t * E2;
  float* p = probs + t * E;
  float* w = weights + t * K2;
  int32_t* chosen = experts + t * K;
  const float l = LogSumExp(z, E);
  lse[t] = l;
  for (int e = 0; e < E; ++e) p[e] = d.sigmoid ? Sigmoid(z[e]) : expf(z[e] - l);
  const bool by_logits = !d.sigmoid && !d.pre_softmax;
  const float* by = by_logits ? z : p;
  // The k-th choice: the first in the order among those after the (k-1)-th.
  int prev = -1;
  float prev_key = 0.f;
  for (int k = 0; k < K; ++k) {
    int best = -1;
    float best_key = 0.f;
    for (int e = 0; e < E; ++e) {
      const float key = ChoiceKey(by, bias, e);
      if (prev >= 0 && !Before(prev_key, prev, key, e)) continue;
      if (best < 0 || Before(key, e, best_key, best)) best = e, best_key = key;
    }
    chosen[k] = best;
    prev = best, prev_key = best_key;
  }
  for (int i = 1; i < K; ++i)  // insertion sort: K is small
    for (int j = i; j > 0 && chosen[j - 1] > chosen[j]; --j) {
      const int32_t tmp = chosen[j - 1];
      chosen[j - 1] = chosen[j];
      chosen[j] = tmp;
    }
  if (by_logits) {  // softmax over the chosen logits (Mixtral)
    float max = z[chosen[0]];
    for (int k = 1; k < K; ++k) max = fmaxf(max, z[chosen[k]]);
    float sum = 0.f;
    for (int k = 0; k < K; ++k) sum += (w[k] = expf(z[chosen[k]] - max));
    for (int k = 0; k < K; ++k) w[k] /= sum;
  } else {
    float sum = 0.f;
    for (int k = 0; k < K; ++k) sum += (w[k] = p[chosen[k]]);
    if (d.norm_topk_prob)
      for (int k = 0; k < K; ++k) w[k] /= sum;
  }
  if (d.shared_gate) w[K] = Sigmoid(z[E]);
}

__global__ void __launch_bounds__(kRouterThreads)
    MoeRouterBackwardKernel(float* __restrict__ dlogits, const float* __restrict__ dweights,
                            const float* __restrict__ logits, const float* __restrict__ probs,
                            const int32_t* __restrict__ experts, const float* __restrict__ weights,
                            const float* __restrict__ aux_coef, int64_t rows_per_group,
                            float z_scale, MoeRouterDims d) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= d.N) return;
  const int E = d.E, K = d.K, E2 = E + d.shared_gate, K2 = K + d.shared_gate;
  const float* z = logits + t * E2;
  const float* p = probs + t * E;
  const float* w = weights + t * K2;
  const float* dw = dweights + t * K2;
  const int32_t* chosen = experts + t * K;
  float* dz = dlogits + t * E2;
  // dp (the scores' gradient) lives in dz until the scores' backward overwrites it.
  float* dp = dz;
  for (int e = 0; e < E; ++e) dp[e] = 0.f;
  float dot = 0.f, chosen_sum = 0.f;
  for (int k = 0; k < K; ++k) {
    dot += dw[k] * w[k];
    chosen_sum += p[chosen[k]];
  }
  const bool by_logits = !d.sigmoid && !d.pre_softmax;
  if (!by_logits) {
    const float S = d.norm_topk_prob ? chosen_sum : 1.f;
    for (int k = 0; k < K; ++k) dp[chosen[k]] += (dw[k] - (d.norm_topk_prob ? dot : 0.f)) / S;
  }
  if (aux_coef != nullptr) {
    const float* a = aux_coef + (t / rows_per_group) * E;
    if (!d.sigmoid) {
      for (int e = 0; e < E; ++e) dp[e] += a[e];
    } else {
      float total = 0.f, weighted = 0.f;
      for (int e = 0; e < E; ++e) total += p[e];
      for (int e = 0; e < E; ++e) weighted += a[e] * p[e] / total;
      for (int e = 0; e < E; ++e) dp[e] += (a[e] - weighted) / total;
    }
  }
  if (!d.sigmoid) {  // softmax: dz = p (dp - sum dp p)
    float sum = 0.f;
    for (int e = 0; e < E; ++e) sum += dp[e] * p[e];
    for (int e = 0; e < E; ++e) dz[e] = p[e] * (dp[e] - sum);
  } else {
    for (int e = 0; e < E; ++e) dz[e] = dp[e] * p[e] * (1.f - p[e]);
  }
  if (by_logits)  // Mixtral: through the softmax over the chosen logits
    for (int k = 0; k < K; ++k) dz[chosen[k]] += w[k] * (dw[k] - dot);
  if (z_scale != 0.f) {  // z_scale * lse^2: dz += z_scale * 2 lse softmax(z)
    const float l = LogSumExp(z, E);
    for (int e = 0; e < E; ++e) dz[e] += z_scale * 2.f * l * expf(z[e] - l);
  }
  if (d.shared_gate) dz[E] = dw[K] * w[K] * (1.f - w[K]);
}

// Blocks for N rows: a few waves, the row loop covers the rest.
unsigned RowBlocks(int64_t N) {
  const int64_t max_blocks = 132 * 16;
  return static_cast<unsigned>(N < max_blocks ? N : max_blocks);
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    MoeScatterRowsKernel(T* __restrict__ out, const T* __restrict__ in,
                         const int32_t* __restrict__ slots, const float* __restrict__ w, int64_t N,
                         int K2, int64_t C) {
  for (int64_t t = blockIdx.x; t < N; t += gridDim.x)
    for (int k = 0; k < K2; ++k) {
      const int32_t slot = slots[t * K2 + k];
      if (slot < 0) continue;
      const float scale = w != nullptr ? w[t * K2 + k] : 1.f;
      T* dst = out + slot * C;
      const T* src = in + t * C;
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        dst[c] = FromFloat<T>(scale * ToFloat(src[c]));
    }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    MoeGatherRowsKernel(T* __restrict__ out, const T* __restrict__ in,
                        const int32_t* __restrict__ slots, const float* __restrict__ w, int64_t N,
                        int K2, int64_t C, bool accumulate) {
  for (int64_t t = blockIdx.x; t < N; t += gridDim.x) {
    T* dst = out + t * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = accumulate ? ToFloat(dst[c]) : 0.f;
      for (int k = 0; k < K2; ++k) {
        const int32_t slot = slots[t * K2 + k];
        if (slot < 0) continue;
        const float scale = w != nullptr ? w[t * K2 + k] : 1.f;
        acc += scale * ToFloat(in[slot * C + c]);
      }
      dst[c] = FromFloat<T>(acc);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kDotWarps* kWarpSize)
    MoeSlotDotsKernel(float* __restrict__ dw, const T* __restrict__ dout, const T* __restrict__ in,
                      const int32_t* __restrict__ slots, int64_t N, int K2, int64_t C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t pair = blockIdx.x * static_cast<int64_t>(kDotWarps) + threadIdx.x / kWarpSize;
  if (pair >= N * K2) return;
  const int64_t t = pair / K2;
  const int32_t slot = slots[pair];
  float sum = 0.f;
  if (slot >= 0)
    for (int64_t c = lane; c < C; c += kWarpSize)
      sum += ToFloat(dout[t * C + c]) * ToFloat(in[slot * C + c]);
  sum = WarpSum(sum);
  if (lane == 0) dw[pair] = sum;
}

}  // namespace

cudaError_t LaunchMoeRouterForward(float* weights, int32_t* experts, float* probs, float* lse,
                                   const float* logits, const float* bias, const MoeRouterDims& d,
                                   cudaStream_t stream) {
  if (d.N == 0) return cudaSuccess;
  MoeRouterForwardKernel<<<CeilDiv(d.N, kRouterThreads), kRouterThreads, 0, stream>>>(
      weights, experts, probs, lse, logits, bias, d);
  return cudaGetLastError();
}

cudaError_t LaunchMoeRouterBackward(float* dlogits, const float* dweights, const float* logits,
                                    const float* probs, const int32_t* experts,
                                    const float* weights, const float* aux_coef, int64_t groups,
                                    float z_scale, const MoeRouterDims& d, cudaStream_t stream) {
  if (d.N == 0) return cudaSuccess;
  const int64_t rows_per_group = groups > 0 ? d.N / groups : d.N;
  MoeRouterBackwardKernel<<<CeilDiv(d.N, kRouterThreads), kRouterThreads, 0, stream>>>(
      dlogits, dweights, logits, probs, experts, weights, aux_coef, rows_per_group, z_scale, d);
  return cudaGetLastError();
}

cudaError_t LaunchMoeScatterRows(DType dtype, void* out, const void* in, const int32_t* slots,
                                 const float* w, int64_t N, int K2, int64_t C,
                                 cudaStream_t stream) {
  if (N == 0 || C == 0) return cudaSuccess;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, T,
      MoeScatterRowsKernel<T><<<RowBlocks(N), kRowThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(in), slots, w, N, K2, C));
  return cudaGetLastError();
}

cudaError_t LaunchMoeGatherRows(DType dtype, void* out, const void* in, const int32_t* slots,
                                const float* w, int64_t N, int K2, int64_t C, bool accumulate,
                                cudaStream_t stream) {
  if (N == 0 || C == 0) return cudaSuccess;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, T,
      MoeGatherRowsKernel<T><<<RowBlocks(N), kRowThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(in), slots, w, N, K2, C, accumulate));
  return cudaGetLastError();
}

cudaError_t LaunchMoeSlotDots(DType dtype, float* dw, const void* dout, const void* in,
                              const int32_t* slots, int64_t N, int K2, int64_t C,
                              cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, T,
      MoeSlotDotsKernel<T><<<CeilDiv(N * K2, kDotWarps), kDotWarps * kWarpSize, 0, stream>>>(
          dw, static_cast<const T*>(dout), static_cast<const T*>(in), slots, N, K2, C));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
