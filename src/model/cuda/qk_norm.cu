// Qwen3's q/k norm: an RMSNorm of each q head (with q_weight) and each k head (with k_weight) of
// qkv (N, (NH+2*NKV)*HD), the v heads copied; f32 statistics, rstd (N, NH+NKV).
//
// One warp per head slot of a row (item = row * (NH+2*NKV) + slot, at item * HD in memory). A
// lane holds kPer elements of the head: contiguous ones (lane * kPer + j, one load of kPer * size
// bytes) when HD is exactly 32 * kPer and the pointers allow, else strided ones (lane + 32 * j).
// The backward's weight gradients are deterministic: a block takes a fixed range of rows (from N
// alone), its warps take the range's items in a fixed interleaving and sum their terms per lane in
// registers; the block adds its warps in order into one partial row (2, HD), and one
// LaunchAddPartials (reduce.cu) adds the blocks' rows in a fixed order.
#include <algorithm>

#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kMaxPerLane = kMaxQkNormHeadSize / kWarpSize;

// kN elements of T, aligned as one load (a power of two bytes, at most 16 used here).
template <typename T, int kN>
struct alignas(sizeof(T) * kN) Pack {
  T v[kN];
};

// Column of element j of this lane within the head.
template <int kPer, bool kContiguous>
__device__ __forceinline__ int HeadColumn(int lane, int j) {
  return kContiguous ? lane * kPer + j : lane + j * kWarpSize;
}

// This lane's elements of the head at p as f32 (0 past HD).
template <typename T, int kPer, bool kContiguous>
__device__ __forceinline__ void LoadHead(float (&x)[kPer], const T* p, int HD, int lane) {
  if constexpr (kContiguous) {
    const Pack<T, kPer> packed = *reinterpret_cast<const Pack<T, kPer>*>(p + lane * kPer);
#pragma unroll
    for (int j = 0; j < kPer; ++j) x[j] = ToFloat(packed.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int d = HeadColumn<kPer, false>(lane, j);
      x[j] = d < HD ? ToFloat(p[d]) : 0.f;
    }
  }
}

template <typename T, int kPer, bool kContiguous>
__device__ __forceinline__ void StoreHead(T* p, const float (&x)[kPer], int HD, int lane) {
  if constexpr (kContiguous) {
    Pack<T, kPer> packed;
#pragma unroll
    for (int j = 0; j < kPer; ++j) packed.v[j] = FromFloat<T>(x[j]);
    *reinterpret_cast<Pack<T, kPer>*>(p + lane * kPer) = packed;
  } else {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int d = HeadColumn<kPer, false>(lane, j);
      if (d < HD) p[d] = FromFloat<T>(x[j]);
    }
  }
}

// out like in; rstd (N, NH+NKV). One warp per item of N * (NH+2*NKV).
template <typename T, int kPer, bool kContiguous>
__global__ void __launch_bounds__(kThreads)
    QkNormForwardKernel(T* out, float* rstd, const T* in, const T* __restrict__ q_weight,
                        const T* __restrict__ k_weight, int64_t N, int NH, int NKV, int HD,
                        float eps) {
  const int lane = threadIdx.x % kWarpSize, slots = NH + 2 * NKV, normed = NH + NKV;
  const int64_t item = (int64_t)blockIdx.x * kWarps + threadIdx.x / kWarpSize;
  if (item >= N * slots) return;
  const int slot = static_cast<int>(item % slots);
  const int64_t offset = item * HD;
  float x[kPer];
  LoadHead<T, kPer, kContiguous>(x, in + offset, HD, lane);
  if (slot < normed) {  // a q or k head (the whole warp takes the same branch)
    float w[kPer];
    LoadHead<T, kPer, kContiguous>(w, slot < NH ? q_weight : k_weight, HD, lane);
    float sq = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) sq += x[j] * x[j];
    const float s = rsqrtf(WarpSum(sq) / HD + eps);
#pragma unroll
    for (int j = 0; j < kPer; ++j) x[j] = x[j] * s * w[j];
    if (lane == 0) rstd[item / slots * normed + slot] = s;
  }
  StoreHead<T, kPer, kContiguous>(out + offset, x, HD, lane);
}

// din (may alias dout) and partials (gridDim.x, 2, HD): the block's dq_weight and dk_weight rows.
// Rows [blockIdx.x * rows_per_block, + rows_per_block) (clipped to N); warp w takes the range's
// items w, w + kWarps, ... Per q/k head, with n = in * rstd and dn = dout * weight:
// din = rstd * (dn - n * mean(dn * n)); the lane adds dout * n to its q or k sums.
template <typename T, int kPer, bool kContiguous>
__global__ void __launch_bounds__(kThreads)
    QkNormBackwardKernel(T* din, float* partials, const T* dout, const T* in,
                         const T* __restrict__ q_weight, const T* __restrict__ k_weight,
                         const float* rstd, int64_t N, int NH, int NKV, int HD,
                         int64_t rows_per_block) {
  __shared__ float warp_sums[kWarps][2][kMaxQkNormHeadSize];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int slots = NH + 2 * NKV, normed = NH + NKV;
  const int64_t first = (int64_t)blockIdx.x * rows_per_block;
  const int64_t end = min(N, first + rows_per_block);
  float wq[kPer], wk[kPer], dq[kPer] = {}, dk[kPer] = {};
  LoadHead<T, kPer, kContiguous>(wq, q_weight, HD, lane);
  LoadHead<T, kPer, kContiguous>(wk, k_weight, HD, lane);
  for (int64_t item = first * slots + warp; item < end * slots; item += kWarps) {
    const int slot = static_cast<int>(item % slots);
    const int64_t offset = item * HD;
    float g[kPer];
    LoadHead<T, kPer, kContiguous>(g, dout + offset, HD, lane);
    if (slot >= normed) {  // a v head: its gradient passes through
      if (din != dout) StoreHead<T, kPer, kContiguous>(din + offset, g, HD, lane);
      continue;
    }
    const bool is_q = slot < NH;  // the same for the whole warp
    float x[kPer], w[kPer];
    LoadHead<T, kPer, kContiguous>(x, in + offset, HD, lane);
#pragma unroll
    for (int j = 0; j < kPer; ++j) w[j] = is_q ? wq[j] : wk[j];
    const float s = rstd[item / slots * normed + slot];
    float dot = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) dot += g[j] * w[j] * x[j];
    const float mean_dn_n = WarpSum(dot) * s / HD;
    float d[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const float n = x[j] * s;
      d[j] = s * (g[j] * w[j] - n * mean_dn_n);
      if (is_q)
        dq[j] += g[j] * n;
      else
        dk[j] += g[j] * n;
    }
    StoreHead<T, kPer, kContiguous>(din + offset, d, HD, lane);
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int c = HeadColumn<kPer, kContiguous>(lane, j);
    if (c < HD) warp_sums[warp][0][c] = dq[j], warp_sums[warp][1][c] = dk[j];
  }
  __syncthreads();
  float* block_partials = partials + (int64_t)blockIdx.x * 2 * HD;
  for (int i = threadIdx.x; i < 2 * HD; i += kThreads) {
    const int which = i / HD, c = i % HD;
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w) total += warp_sums[w][which][c];
    block_partials[i] = total;
  }
}

// Backward blocks for N rows: at most one wave of 8 blocks per SM (H100/H200: 132 SMs). A
// function of N alone, so the summation order is too.
int64_t BackwardRowsPerBlock(int64_t N) {
  const int64_t blocks = std::max<int64_t>(std::min<int64_t>(N, 132 * 8), 1);
  return std::max<int64_t>((N + blocks - 1) / blocks, 1);
}

// Calls launch(kernel-picking functor) with kPer and kContiguous for HD: contiguous when HD is
// 32, 64, 128 or 256 with every pointer aligned to its pack, strided with 8 per lane otherwise;
// false (nothing called) when HD > kMaxQkNormHeadSize.
template <typename T, typename Launch>
bool DispatchHead(int HD, std::initializer_list<const void*> pointers, const Launch& launch) {
  if (HD > kMaxQkNormHeadSize) return false;
  auto aligned = [&](size_t bytes) {
    for (const void* p : pointers)
      if (reinterpret_cast<uintptr_t>(p) % bytes != 0) return false;
    return true;
  };
  // Packs of up to 16 bytes (kPer * sizeof(T)), so f32 heads of 256 take the strided path.
  if (HD == 32 && aligned(sizeof(T))) {
    launch(std::integral_constant<int, 1>(), std::true_type());
  } else if (HD == 64 && aligned(2 * sizeof(T))) {
    launch(std::integral_constant<int, 2>(), std::true_type());
  } else if (HD == 128 && aligned(4 * sizeof(T))) {
    launch(std::integral_constant<int, 4>(), std::true_type());
  } else if (HD == 256 && sizeof(T) == 2 && aligned(8 * sizeof(T))) {
    launch(std::integral_constant<int, 8>(), std::true_type());
  } else {
    launch(std::integral_constant<int, kMaxPerLane>(), std::false_type());
  }
  return true;
}

template <typename T>
cudaError_t ForwardImpl(T* out, float* rstd, const T* in, const T* q_weight, const T* k_weight,
                        int64_t N, int NH, int NKV, int HD, float eps, cudaStream_t stream) {
  const unsigned blocks = CeilDiv(N * (NH + 2 * NKV), kWarps);
  const bool launched =
      DispatchHead<T>(HD, {out, in, q_weight, k_weight}, [&](auto per, auto contiguous) {
        QkNormForwardKernel<T, decltype(per)::value, decltype(contiguous)::value>
            <<<blocks, kThreads, 0, stream>>>(out, rstd, in, q_weight, k_weight, N, NH, NKV, HD,
                                              eps);
      });
  return launched ? cudaGetLastError() : cudaErrorInvalidValue;
}

template <typename T>
cudaError_t BackwardImpl(T* din, float* dq_weight, float* dk_weight, const T* dout, const T* in,
                         const T* q_weight, const T* k_weight, const float* rstd, int64_t N, int NH,
                         int NKV, int HD, float* scratch, cudaStream_t stream) {
  const int64_t rows = BackwardRowsPerBlock(N);
  const int blocks = static_cast<int>(CeilDiv(N, rows));
  const bool launched =
      DispatchHead<T>(HD, {din, dout, in, q_weight, k_weight}, [&](auto per, auto contiguous) {
        QkNormBackwardKernel<T, decltype(per)::value, decltype(contiguous)::value>
            <<<blocks, kThreads, 0, stream>>>(din, scratch, dout, in, q_weight, k_weight, rstd, N,
                                              NH, NKV, HD, rows);
      });
  if (!launched) return cudaErrorInvalidValue;
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return LaunchAddPartials({dq_weight, dk_weight}, scratch, blocks, HD, stream);
}

}  // namespace

cudaError_t LaunchQkNormForward(DType dtype, void* out, float* rstd, const void* in,
                                const void* q_weight, const void* k_weight, int64_t N, int NH,
                                int NKV, int HD, float eps, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      err = ForwardImpl<E>(static_cast<E*>(out), rstd, static_cast<const E*>(in),
                           static_cast<const E*>(q_weight), static_cast<const E*>(k_weight), N, NH,
                           NKV, HD, eps, stream));
  return err;
}

size_t QkNormBackwardScratchFloats(int64_t N, int HD) {
  const int64_t rows = BackwardRowsPerBlock(N);
  return static_cast<size_t>((N + rows - 1) / rows) * 2 * HD;
}

cudaError_t LaunchQkNormBackward(DType dtype, void* din, float* dq_weight, float* dk_weight,
                                 const void* dout, const void* in, const void* q_weight,
                                 const void* k_weight, const float* rstd, int64_t N, int NH,
                                 int NKV, int HD, float* scratch, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      err =
          BackwardImpl<E>(static_cast<E*>(din), dq_weight, dk_weight, static_cast<const E*>(dout),
                          static_cast<const E*>(in), static_cast<const E*>(q_weight),
                          static_cast<const E*>(k_weight), rstd, N, NH, NKV, HD, scratch, stream));
  return err;
}

}  // namespace cuda
}  // namespace trainer
