// Our own causal self-attention (forward and backward) for builds without the cuDNN frontend or
// shapes it rejects: one warp per query row (forward, dq) or key row (dk, dv), online softmax and
// every accumulation in f32. Correct and simple rather than fast: O(T^2 HS) with no tiling.
// Grouped-query attention: q head h reads kv head h / (NH/NKV); the warp of a kv head's key row
// sums dk and dv over the group's query heads in order (deterministic, no atomics).
// Attention dropout draws the CPU's mask (philox.h, cpu/attention.cpp) for every (query, key).
// Under Data.packing: documents (doc_starts) query i sees keys doc_starts[i] <= j <= i only, and
// key j is seen by the queries of its own document: i from j while doc_starts[i] <= j.
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxPerLane = 8;  // head sizes up to 32 * 8 = 256

// Where q head h, k/v head g of position (b, t) live in qkv (B,T,NH+2*NKV,HS) and q head h in
// out/dout (B,T,NH,HS). group = NH / NKV query heads share a kv head.
struct AttentionLayout {
  int B, T, NH, NKV, HS, group;
  float scale;
  DropoutKey drop;  // p 0: off
  uint32_t drop_threshold;
  float drop_scale;
  const int32_t* doc_starts;  // (B,T), or null: one document per sample
  // The first key that query i of sample b sees.
  __device__ int FirstKey(int b, int i) const {
    return doc_starts == nullptr ? 0 : doc_starts[(int64_t)b * T + i];
  }
  // Whether query i of sample b sees key j <= i.
  __device__ bool Sees(int b, int i, int j) const { return FirstKey(b, i) <= j; }
  // What probability p_ij of local head h of sample b is multiplied by: 1 without dropout.
  __device__ float Keep(int b, int h, int i, int j) const {
    if (drop.p == 0.f) return 1.f;
    const Philox4 w = DropoutWords(drop.seed, drop.step, drop.kind, drop.layer,
                                   drop.first_head + h, drop.first_sample + b, i, j / 4);
    return w.v[j % 4] >= drop_threshold ? drop_scale : 0.f;
  }
  __device__ int64_t Row(int b, int t) const { return ((int64_t)b * T + t) * (NH + 2 * NKV) * HS; }
  __device__ int64_t Q(int b, int t, int h) const { return Row(b, t) + (int64_t)h * HS; }
  __device__ int64_t K(int b, int t, int g) const { return Row(b, t) + (int64_t)(NH + g) * HS; }
  __device__ int64_t V(int b, int t, int g) const {
    return Row(b, t) + (int64_t)(NH + NKV + g) * HS;
  }
  __device__ int64_t O(int b, int t, int h) const {
    return ((int64_t)b * T + t) * NH * HS + (int64_t)h * HS;
  }
  __device__ int64_t Stat(int b, int t, int h) const { return ((int64_t)b * NH + h) * T + t; }
};

// Loads this lane's share (elements lane, lane + 32, ...) of a head vector.
template <typename T>
__device__ __forceinline__ void LoadLane(float (&dst)[kMaxPerLane], const T* src, int HS) {
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int d = lane + j * kWarpSize;
    dst[j] = d < HS ? ToFloat(src[d]) : 0.f;
  }
}

// Dot product of a lane-distributed vector with a head vector in memory; every lane gets it.
template <typename T>
__device__ __forceinline__ float WarpDot(const float (&x)[kMaxPerLane], const T* y, int HS) {
  const int lane = threadIdx.x % kWarpSize;
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int d = lane + j * kWarpSize;
    if (d < HS) sum += x[j] * ToFloat(y[d]);
  }
  return WarpSum(sum);
}

template <typename T>
__device__ __forceinline__ void StoreLane(T* dst, const float (&src)[kMaxPerLane], float scale,
                                          int HS) {
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int d = lane + j * kWarpSize;
    if (d < HS) dst[d] = FromFloat<T>(src[j] * scale);
  }
}

// Warp index over all (b, h, t) rows of `heads` heads: t fastest, so a block's warps share keys
// in cache.
__device__ __forceinline__ bool WarpRow(const AttentionLayout& L, int heads, int* b, int* h,
                                        int* t) {
  const int64_t row = (int64_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= (int64_t)L.B * heads * L.T) return false;
  *t = static_cast<int>(row % L.T);
  *h = static_cast<int>((row / L.T) % heads);
  *b = static_cast<int>(row / ((int64_t)L.T * heads));
  return true;
}

template <typename T>
__global__ void AttentionForwardFallbackKernel(T* out, float* stats, const T* qkv,
                                               AttentionLayout L) {
  int b, h, i;
  if (!WarpRow(L, L.NH, &b, &h, &i)) return;
  const int lane = threadIdx.x % kWarpSize, g = h / L.group;
  float q[kMaxPerLane], acc[kMaxPerLane] = {};
  LoadLane(q, qkv + L.Q(b, i, h), L.HS);
  float running_max = -INFINITY, running_sum = 0.f;
  for (int j = L.FirstKey(b, i); j <= i; ++j) {
    const float s = L.scale * WarpDot(q, qkv + L.K(b, j, g), L.HS);
    const float new_max = fmaxf(running_max, s);
    const float correction = expf(running_max - new_max);
    const float p = expf(s - new_max);
    running_sum = running_sum * correction + p;
    const T* v = qkv + L.V(b, j, g);
    const float pv = p * L.Keep(b, h, i, j);  // dropped after the statistics
#pragma unroll
    for (int k = 0; k < kMaxPerLane; ++k) {
      const int d = lane + k * kWarpSize;
      acc[k] = acc[k] * correction + (d < L.HS ? pv * ToFloat(v[d]) : 0.f);
    }
    running_max = new_max;
  }
  StoreLane(out + L.O(b, i, h), acc, 1.f / running_sum, L.HS);
  if (lane == 0) stats[L.Stat(b, i, h)] = running_max + logf(running_sum);
}

// delta (B,NH,T) = rowwise dot(dout, out), the softmax-backward correction term.
template <typename T>
__global__ void AttentionDeltaFallbackKernel(float* delta, const T* dout, const T* out,
                                             AttentionLayout L) {
  int b, h, i;
  if (!WarpRow(L, L.NH, &b, &h, &i)) return;
  float o[kMaxPerLane];
  LoadLane(o, out + L.O(b, i, h), L.HS);
  const float d = WarpDot(o, dout + L.O(b, i, h), L.HS);
  if (threadIdx.x % kWarpSize == 0) delta[L.Stat(b, i, h)] = d;
}

// dq_i = scale * sum_{j<=i} p_ij (z_ij dout_i . v_j - delta_i) k_j, z the dropout (1 without).
template <typename T>
__global__ void AttentionQueryGradFallbackKernel(T* dqkv, const T* dout, const T* qkv,
                                                 const float* stats, const float* delta,
                                                 AttentionLayout L) {
  int b, h, i;
  if (!WarpRow(L, L.NH, &b, &h, &i)) return;
  const int lane = threadIdx.x % kWarpSize, kv = h / L.group;
  float q[kMaxPerLane], g[kMaxPerLane], acc[kMaxPerLane] = {};
  LoadLane(q, qkv + L.Q(b, i, h), L.HS);
  LoadLane(g, dout + L.O(b, i, h), L.HS);
  const float lse = stats[L.Stat(b, i, h)], di = delta[L.Stat(b, i, h)];
  for (int j = L.FirstKey(b, i); j <= i; ++j) {
    const T* k = qkv + L.K(b, j, kv);
    const float p = expf(L.scale * WarpDot(q, k, L.HS) - lse);
    const float ds = p * (L.Keep(b, h, i, j) * WarpDot(g, qkv + L.V(b, j, kv), L.HS) - di);
#pragma unroll
    for (int m = 0; m < kMaxPerLane; ++m) {
      const int d = lane + m * kWarpSize;
      if (d < L.HS) acc[m] += ds * ToFloat(k[d]);
    }
  }
  StoreLane(dqkv + L.Q(b, i, h), acc, L.scale, L.HS);
}

// dk_j = scale * sum_h sum_{i>=j} ds_hij q_hi and dv_j = sum_h sum_{i>=j} p_hij dout_hi over the
// query heads h of kv head `kv`'s group, h in increasing order (one warp per (b, kv, j)).
template <typename T>
__global__ void AttentionKeyValueGradFallbackKernel(T* dqkv, const T* dout, const T* qkv,
                                                    const float* stats, const float* delta,
                                                    AttentionLayout L) {
  int b, kv, j;
  if (!WarpRow(L, L.NKV, &b, &kv, &j)) return;
  const int lane = threadIdx.x % kWarpSize;
  float k[kMaxPerLane], v[kMaxPerLane], dk[kMaxPerLane] = {}, dv[kMaxPerLane] = {};
  LoadLane(k, qkv + L.K(b, j, kv), L.HS);
  LoadLane(v, qkv + L.V(b, j, kv), L.HS);
  for (int h = kv * L.group; h < (kv + 1) * L.group; ++h) {
    for (int i = j; i < L.T && L.Sees(b, i, j); ++i) {
      const T* q = qkv + L.Q(b, i, h);
      const T* g = dout + L.O(b, i, h);
      const float p = expf(L.scale * WarpDot(k, q, L.HS) - stats[L.Stat(b, i, h)]);
      const float z = L.Keep(b, h, i, j);
      const float ds = p * (z * WarpDot(v, g, L.HS) - delta[L.Stat(b, i, h)]);
#pragma unroll
      for (int m = 0; m < kMaxPerLane; ++m) {
        const int d = lane + m * kWarpSize;
        if (d < L.HS) {
          dk[m] += ds * ToFloat(q[d]);
          dv[m] += p * z * ToFloat(g[d]);
        }
      }
    }
  }
  StoreLane(dqkv + L.K(b, j, kv), dk, L.scale, L.HS);
  StoreLane(dqkv + L.V(b, j, kv), dv, 1.f, L.HS);
}

AttentionLayout MakeLayout(int B, int T, int NH, int NKV, int HS, const DropoutKey& dropout,
                           const int32_t* doc_starts) {
  return AttentionLayout{B,       T,
                         NH,      NKV,
                         HS,      NH / NKV,
                         1.f / sqrtf(static_cast<float>(HS)),
                         dropout, DropoutThreshold(dropout.p),
                         DropoutScale(dropout.p), doc_starts};
}

// Blocks of warps for the B * heads * T rows.
unsigned RowBlocks(int B, int T, int heads) {
  return CeilDiv((int64_t)B * heads * T, kWarpsPerBlock);
}

bool ValidHeads(int NH, int NKV, int HS) {
  return HS <= kMaxPerLane * kWarpSize && NH > 0 && NKV > 0 && NH % NKV == 0;
}

}  // namespace

cudaError_t LaunchAttentionForwardFallback(DType dtype, void* out, float* stats, const void* qkv,
                                           int B, int T, int NH, int NKV, int HS,
                                           const DropoutKey& dropout, cudaStream_t stream,
                                           const int32_t* doc_starts) {
  if (!ValidHeads(NH, NKV, HS)) return cudaErrorInvalidValue;
  const AttentionLayout L = MakeLayout(B, T, NH, NKV, HS, dropout, doc_starts);
  TRAINER_DISPATCH_FLOAT_TYPE(dtype, E,
                              AttentionForwardFallbackKernel<E>
                              <<<RowBlocks(B, T, NH), kWarpsPerBlock * kWarpSize, 0, stream>>>(
                                  static_cast<E*>(out), stats, static_cast<const E*>(qkv), L));
  return cudaGetLastError();
}

size_t AttentionBackwardFallbackScratchFloats(int B, int T, int NH) {
  return static_cast<size_t>(B) * NH * T;
}

cudaError_t LaunchAttentionBackwardFallback(DType dtype, void* dqkv, const void* dout,
                                            const void* qkv, const void* out, const float* stats,
                                            float* scratch, int B, int T, int NH, int NKV, int HS,
                                            const DropoutKey& dropout, cudaStream_t stream,
                                            const int32_t* doc_starts) {
  if (!ValidHeads(NH, NKV, HS)) return cudaErrorInvalidValue;
  const AttentionLayout L = MakeLayout(B, T, NH, NKV, HS, dropout, doc_starts);
  const unsigned blocks = RowBlocks(B, T, NH), kv_blocks = RowBlocks(B, T, NKV),
                 threads = kWarpsPerBlock * kWarpSize;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E, const E* g = static_cast<const E*>(dout); const E* x = static_cast<const E*>(qkv);
      AttentionDeltaFallbackKernel<E>
      <<<blocks, threads, 0, stream>>>(scratch, g, static_cast<const E*>(out), L);
      AttentionQueryGradFallbackKernel<E>
      <<<blocks, threads, 0, stream>>>(static_cast<E*>(dqkv), g, x, stats, scratch, L);
      AttentionKeyValueGradFallbackKernel<E>
      <<<kv_blocks, threads, 0, stream>>>(static_cast<E*>(dqkv), g, x, stats, scratch, L));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
