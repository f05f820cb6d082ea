// LayerNorm forward (optionally fused with the residual add before it) and backward, one warp per
// row with f32 statistics (two passes: mean, then the sum of squared deviations).
//
// Two paths per direction:
//  - the register path (rows a whole number of 16-byte vectors, 16-byte aligned pointers, C up to
//    2048 bf16 / 1024 f32): each lane keeps its share of the row as 16-byte vectors in registers,
//    so every tensor is read and written exactly once. The backward also accumulates its rows'
//    weight/bias gradients per warp (in registers up to C = 1024 bf16, in shared memory above)
//    and writes one partial row per block (a fixed range of rows, from N alone);
//  - the generic path (any C, any alignment): scalar or 16-byte loads that re-read the row from
//    L1/L2, and a backward that writes one partial row per tile of kTileRows rows.
// Either way the weight/bias gradients are deterministic: each partial row sums a fixed set of rows
// in a fixed order, and one LaunchAddPartials (reduce.cu) adds the partials in a fixed order
// into the f32 gradients. The backward can also sum din's columns as it reads them (the bias
// gradient of the linear layer that wrote the residual gradient), the same way.
#include <algorithm>
#include <type_traits>

#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;  // one warp per row

// ---- register path ----
// Lane `lane` holds the row's 16-byte vectors k = 0 .. kVecs-1 starting at column
// VecColumn(k, lane), so a warp's k-th load covers 512 contiguous bytes; columns >= C are skipped
// (the vectors are filled in order, so the first missing one ends the row).
template <typename T>
__device__ __forceinline__ int VecColumn(int k, int lane) {
  return (k * kWarpSize + lane) * Vec16<T>::kCount;
}

// The backward's blocks are smaller: its lanes also hold two f32 accumulators per element (or
// the row's three tensors, in the wide kernel), so registers set its occupancy. Blocks per SM to
// aim for, which also sizes its grid (one wave): three up to 24 elements per lane (about 170
// registers, e.g. C = 768 in bf16), two above.
constexpr int kBackwardThreads = 128;
constexpr int kBackwardWarps = kBackwardThreads / kWarpSize;
template <typename T, int kVecs>
constexpr int kBackwardMinBlocks = kVecs <= 24 / Vec16<T>::kCount ? 3 : 2;

// Most vectors per lane of the forward (C <= 2048 bf16 / 1024 f32) and of the backward, which
// also keeps two f32 accumulators per element (32 elements per lane: C <= 1024).
constexpr int kMaxForwardVecs = 8;
template <typename T>
constexpr int kMaxBackwardVecs = 32 / Vec16<T>::kCount;

// Calls launch(std::integral_constant<int, K>()) with the smallest K of {1, 2, 3, 4, 6, 8} that
// holds `vecs` vectors per lane; false (nothing called) when vecs > kMaxVecs.
template <int kMaxVecs, typename Launch>
bool DispatchVecs(int vecs, const Launch& launch) {
  static_assert(kMaxVecs == 4 || kMaxVecs == 8, "vector counts are 1, 2, 3, 4, 6, 8");
  if (vecs > kMaxVecs) return false;
  if (vecs <= 1) {
    launch(std::integral_constant<int, 1>());
  } else if (vecs <= 2) {
    launch(std::integral_constant<int, 2>());
  } else if (vecs <= 3) {
    launch(std::integral_constant<int, 3>());
  } else if (vecs <= 4) {
    launch(std::integral_constant<int, 4>());
  } else if constexpr (kMaxVecs > 4) {
    if (vecs <= 6)
      launch(std::integral_constant<int, 6>());
    else
      launch(std::integral_constant<int, 8>());
  }
  return true;
}

// Vectors per lane that a row of C elements needs (C a multiple of Vec16<T>::kCount).
template <typename T>
int VecsPerLane(int C) {
  return static_cast<int>(CeilDiv(C / Vec16<T>::kCount, kWarpSize));
}

// out (N,C), mean (N), rstd (N). With b: residual = a + b first (rounded to T), normalised after.
// Each lane reads a and b before writing the same columns of residual, so residual may alias them.
template <typename T, int kVecs>
__global__ void __launch_bounds__(kThreads)
    LayerNormForwardRegisterKernel(T* out, float* mean, float* rstd, T* residual, const T* a,
                                   const T* b, const T* __restrict__ weight,
                                   const T* __restrict__ bias, int64_t N, int C) {
  constexpr int V = Vec16<T>::kCount;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = (int64_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const int64_t offset = row * C;
  Vec16<T> x[kVecs];  // the row: (kVecs, V) per lane
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (VecColumn<T>(k, lane) >= C) break;
    x[k] = Load16(a + offset + VecColumn<T>(k, lane));
  }
  if (b != nullptr) {
    Vec16<T> y[kVecs];
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (VecColumn<T>(k, lane) >= C) break;
      y[k] = Load16(b + offset + VecColumn<T>(k, lane));
    }
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (VecColumn<T>(k, lane) >= C) break;
#pragma unroll
      for (int j = 0; j < V; ++j) x[k].v[j] = FromFloat<T>(ToFloat(x[k].v[j]) + ToFloat(y[k].v[j]));
      Store16(residual + offset + VecColumn<T>(k, lane), x[k]);
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (VecColumn<T>(k, lane) >= C) break;
#pragma unroll
    for (int j = 0; j < V; ++j) sum += ToFloat(x[k].v[j]);
  }
  const float m = WarpSum(sum) / C;
  float sq = 0.f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (VecColumn<T>(k, lane) >= C) break;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float d = ToFloat(x[k].v[j]) - m;
      sq += d * d;
    }
  }
  const float s = rsqrtf(WarpSum(sq) / C + kLayerNormEps);
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int c = VecColumn<T>(k, lane);
    if (c >= C) break;
    const Vec16<T> w = Load16(weight + c), bb = Load16(bias + c);
    Vec16<T> o;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float n = (ToFloat(x[k].v[j]) - m) * s;
      o.v[j] = FromFloat<T>(n * ToFloat(w.v[j]) + ToFloat(bb.v[j]));
    }
    Store16(out + offset + c, o);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// Backward rows [first, end) of one warp (rows first, first + kBackwardWarps, ...). Per row, with
// n = (in - mean) * rstd and dn = dout * weight: din (N,C) += rstd * (dn - mean(dn) - n *
// mean(dn * n)), dout, in and din read once into registers; accumulate(k, j, dout * n, dout, din)
// is called for each element the lane holds (vector k, element j; din as it was on entry), for
// the weight/bias sums and din's column sums.
template <typename T, int kVecs, typename Accumulate>
__device__ __forceinline__ void LayerNormBackwardRows(T* din, const T* dout, const T* in,
                                                      const T* __restrict__ weight,
                                                      const float* mean, const float* rstd, int C,
                                                      int64_t first, int64_t end, int lane,
                                                      Accumulate&& accumulate) {
  constexpr int V = Vec16<T>::kCount;
  Vec16<T> w[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k)
    if (VecColumn<T>(k, lane) < C) w[k] = Load16(weight + VecColumn<T>(k, lane));
  for (int64_t row = first; row < end; row += kBackwardWarps) {
    const int64_t offset = row * C;
    const float m = mean[row], s = rstd[row];
    Vec16<T> g[kVecs], x[kVecs], d[kVecs];
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const int64_t i = offset + VecColumn<T>(k, lane);
      if (VecColumn<T>(k, lane) >= C) break;
      g[k] = Load16(dout + i), x[k] = Load16(in + i), d[k] = Load16(din + i);
    }
    float sum_dn = 0.f, sum_dn_n = 0.f;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (VecColumn<T>(k, lane) >= C) break;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float gj = ToFloat(g[k].v[j]), n = (ToFloat(x[k].v[j]) - m) * s;
        const float dn = gj * ToFloat(w[k].v[j]);
        sum_dn += dn;
        sum_dn_n += dn * n;
        accumulate(k, j, gj * n, gj, ToFloat(d[k].v[j]));
      }
    }
    const float mean_dn = WarpSum(sum_dn) / C, mean_dn_n = WarpSum(sum_dn_n) / C;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (VecColumn<T>(k, lane) >= C) break;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float n = (ToFloat(x[k].v[j]) - m) * s;
        const float dn = ToFloat(g[k].v[j]) * ToFloat(w[k].v[j]);
        d[k].v[j] = FromFloat<T>(ToFloat(d[k].v[j]) + s * (dn - mean_dn - n * mean_dn_n));
      }
      Store16(din + offset + VecColumn<T>(k, lane), d[k]);
    }
  }
}

// Per-warp shared-memory accumulators for a row of kVecs 16-byte vectors per lane: element
// (k, j) of lane l at slot (k * V + j) * 32 + l, so a warp's updates hit 32 distinct banks.
template <typename T, int kVecs>
constexpr int WideSlots() {  // accumulators per warp and sum
  return kVecs * Vec16<T>::kCount * kWarpSize;
}
template <typename T>
__device__ __forceinline__ int SlotOfColumn(int c) {
  constexpr int V = Vec16<T>::kCount;
  return (c / (kWarpSize * V) * V + c % V) * kWarpSize + c / V % kWarpSize;
}

// Partial rows per block: dweight, dbias, then (kSums) din's column sums.
template <bool kSums>
constexpr int kPartialRows = kSums ? 3 : 2;

// Backward over rows [blockIdx.x * rows_per_block, + rows_per_block) (clipped to N); warp w takes
// rows w, w + 4, ... of that range (LayerNormBackwardRows). The warp's column sums of dout * n
// (dweight) and dout (dbias) stay in registers; with kSums, its column sums of din (on entry) go
// to per-warp shared-memory slots. The block then adds its warps in a fixed order (warp 0 first)
// and writes partials (gridDim.x, kPartialRows, C): its dweight row, its dbias row, then its din
// row.
template <typename T, int kVecs, bool kSums>
__global__ void __launch_bounds__(kBackwardThreads, kBackwardMinBlocks<T, kVecs>)
    LayerNormBackwardRegisterKernel(T* din, float* partials, const T* dout, const T* in,
                                    const T* __restrict__ weight, const float* mean,
                                    const float* rstd, int64_t N, int C, int64_t rows_per_block) {
  constexpr int V = Vec16<T>::kCount, S = WideSlots<T, kVecs>();
  extern __shared__ float block_sums[];  // (2, C), then with kSums (warps, S)
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t first = (int64_t)blockIdx.x * rows_per_block;
  const int64_t end = min(N, first + rows_per_block);
  float* din_slots = block_sums + 2 * C + warp * S;  // used with kSums only
  if (kSums) {
    for (int i = lane; i < S; i += kWarpSize) din_slots[i] = 0.f;
    __syncwarp();
  }
  float dw[kVecs][V], db[kVecs][V];  // this warp's column sums of dout * n and of dout
#pragma unroll
  for (int k = 0; k < kVecs; ++k)
#pragma unroll
    for (int j = 0; j < V; ++j) dw[k][j] = db[k][j] = 0.f;
  LayerNormBackwardRows<T, kVecs>(din, dout, in, weight, mean, rstd, C, first + warp, end, lane,
                                  [&](int k, int j, float g_n, float g, float d) {
                                    dw[k][j] += g_n;
                                    db[k][j] += g;
                                    if (kSums) din_slots[(k * V + j) * kWarpSize + lane] += d;
                                  });
  for (int turn = 0; turn < kBackwardWarps; ++turn) {
    if (warp == turn) {
#pragma unroll
      for (int k = 0; k < kVecs; ++k) {
        const int c = VecColumn<T>(k, lane);
        if (c >= C) break;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          block_sums[c + j] = (turn == 0 ? 0.f : block_sums[c + j]) + dw[k][j];
          block_sums[C + c + j] = (turn == 0 ? 0.f : block_sums[C + c + j]) + db[k][j];
        }
      }
    }
    __syncthreads();
  }
  float* block_partials = partials + (int64_t)blockIdx.x * kPartialRows<kSums> * C;
  for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) block_partials[i] = block_sums[i];
  if (kSums) {
    const float* slots = block_sums + 2 * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float sum = 0.f;
      for (int w = 0; w < kBackwardWarps; ++w) sum += slots[w * S + SlotOfColumn<T>(c)];
      block_partials[2 * C + c] = sum;
    }
  }
}

template <typename T, int kVecs, bool kSums>
constexpr size_t kRegisterSharedBytes(int C) {
  return sizeof(float) * (2 * C + (kSums ? kBackwardWarps * WideSlots<T, kVecs>() : 0));
}

// The register kernel for rows too wide for its register accumulators (bf16 C up to 2048): the
// same rows, but each warp's column sums live in shared memory, (warps, kPartialRows, S) floats
// laid out as the register kernel's din slots. The warps are then added in the same fixed order
// into the same partials.
template <typename T, int kVecs, bool kSums>
constexpr size_t kWideSharedBytes =
    sizeof(float) * kBackwardWarps* kPartialRows<kSums>* WideSlots<T, kVecs>();

template <typename T, int kVecs, bool kSums>
__global__ void __launch_bounds__(kBackwardThreads, kBackwardMinBlocks<T, kVecs>)
    LayerNormBackwardWideKernel(T* din, float* partials, const T* dout, const T* in,
                                const T* __restrict__ weight, const float* mean, const float* rstd,
                                int64_t N, int C, int64_t rows_per_block) {
  constexpr int V = Vec16<T>::kCount, S = WideSlots<T, kVecs>(), R = kPartialRows<kSums>;
  extern __shared__ float sums[];  // (warps, R, S)
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t first = (int64_t)blockIdx.x * rows_per_block;
  const int64_t end = min(N, first + rows_per_block);
  float* dw = sums + warp * R * S;
  float* db = dw + S;
  float* dd = db + S;  // kSums only
  for (int i = lane; i < R * S; i += kWarpSize) dw[i] = 0.f;
  __syncwarp();
  LayerNormBackwardRows<T, kVecs>(din, dout, in, weight, mean, rstd, C, first + warp, end, lane,
                                  [&](int k, int j, float g_n, float g, float d) {
                                    const int slot = (k * V + j) * kWarpSize + lane;
                                    dw[slot] += g_n;
                                    db[slot] += g;
                                    if (kSums) dd[slot] += d;
                                  });
  __syncthreads();
  float* block_partials = partials + (int64_t)blockIdx.x * R * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const int slot = SlotOfColumn<T>(c);
    for (int r = 0; r < R; ++r) {
      float sum = 0.f;
      for (int w = 0; w < kBackwardWarps; ++w) sum += sums[(w * R + r) * S + slot];
      block_partials[r * C + c] = sum;
    }
  }
}

// Register-path backward grid, from N and the kernel alone (so are the partial sums): at least
// kBackwardMinRows rows per block, at most one wave of `blocks_per_sm` blocks (what the kernel's
// registers allow, kBackwardMinBlocks) on the 132 SMs of an H100/H200: a second, partial wave
// would leave SMs idle for its whole length.
constexpr int kBackwardMinRows = 32;
constexpr int kSms = 132;
int64_t BackwardRowsPerBlock(int64_t N, int blocks_per_sm) {
  const int64_t blocks =
      std::min<int64_t>(CeilDiv(N, kBackwardMinRows), static_cast<int64_t>(blocks_per_sm) * kSms);
  return std::max<int64_t>(CeilDiv(N, std::max<int64_t>(blocks, 1)), 1);
}

// ---- generic path ----

// out (N,C), mean (N), rstd (N) as LayerNormForwardRegisterKernel, for any C and alignment: scalar
// loads, the row re-read from L1/L2 by each pass.
template <typename T>
__global__ void LayerNormForwardKernel(T* out, float* mean, float* rstd, T* residual, const T* a,
                                       const T* b, const T* weight, const T* bias, int64_t N,
                                       int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = (int64_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const int64_t offset = row * C;
  const T* x = a + offset;
  float sum = 0.f;
  if (b != nullptr) {
    // Each lane reads back only the elements it wrote itself, so no synchronisation is needed.
    for (int c = lane; c < C; c += kWarpSize) {
      const T r = FromFloat<T>(ToFloat(a[offset + c]) + ToFloat(b[offset + c]));
      residual[offset + c] = r;
      sum += ToFloat(r);
    }
    x = residual + offset;
  } else {
    for (int c = lane; c < C; c += kWarpSize) sum += ToFloat(x[c]);
  }
  const float m = WarpSum(sum) / C;
  float sq = 0.f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float d = ToFloat(x[c]) - m;
    sq += d * d;
  }
  const float s = rsqrtf(WarpSum(sq) / C + kLayerNormEps);
  for (int c = lane; c < C; c += kWarpSize) {
    const float n = (ToFloat(x[c]) - m) * s;
    out[offset + c] = FromFloat<T>(n * ToFloat(weight[c]) + ToFloat(bias[c]));
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// Generic backward over a tile of kTileRows rows per block, in two phases:
//  1. one warp per row: din += as in the register path, with 16-byte loads when kVector; the
//     row statistics go to shared memory;
//  2. one thread per column: the tile's sums of dout * n (weight gradient) and dout (bias
//     gradient) in a fixed row order (the tile was just read, so from L1/L2), written to
//     partials (tiles, 2, C).
constexpr int kTileRows = 32;

// Phase 1 for one row (one warp): sums, then din += dx. kVector: 16-byte loads.
template <typename T, bool kVector>
__device__ void LayerNormBackwardRow(T* din, const T* dout, const T* in, const T* weight, float m,
                                     float s, int C, int lane) {
  constexpr int V = kVector ? Vec16<T>::kCount : 1;
  float sum_dn = 0.f, sum_dn_n = 0.f;
  for (int c0 = lane * V; c0 < C; c0 += kWarpSize * V) {
    Vec16<T> g, x, w;
    if (kVector) {
      g = Load16(dout + c0), x = Load16(in + c0), w = Load16(weight + c0);
    } else {
      g.v[0] = dout[c0], x.v[0] = in[c0], w.v[0] = weight[c0];
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float dn = ToFloat(g.v[k]) * ToFloat(w.v[k]);
      sum_dn += dn;
      sum_dn_n += dn * (ToFloat(x.v[k]) - m) * s;
    }
  }
  const float mean_dn = WarpSum(sum_dn) / C, mean_dn_n = WarpSum(sum_dn_n) / C;
  for (int c0 = lane * V; c0 < C; c0 += kWarpSize * V) {
    Vec16<T> g, x, w, d;
    if (kVector) {
      g = Load16(dout + c0), x = Load16(in + c0), w = Load16(weight + c0), d = Load16(din + c0);
    } else {
      g.v[0] = dout[c0], x.v[0] = in[c0], w.v[0] = weight[c0], d.v[0] = din[c0];
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float n = (ToFloat(x.v[k]) - m) * s;
      const float dn = ToFloat(g.v[k]) * ToFloat(w.v[k]);
      d.v[k] = FromFloat<T>(ToFloat(d.v[k]) + s * (dn - mean_dn - n * mean_dn_n));
    }
    if (kVector)
      Store16(din + c0, d);
    else
      din[c0] = d.v[0];
  }
}

template <typename T, bool kVector>
__global__ void LayerNormBackwardKernel(T* din, float* partials, const T* dout, const T* in,
                                        const T* weight, const float* mean, const float* rstd,
                                        int64_t N, int C) {
  __shared__ float tile_mean[kTileRows], tile_rstd[kTileRows];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  const int64_t first = (int64_t)blockIdx.x * kTileRows;
  const int rows = (int)min((int64_t)kTileRows, N - first);
  for (int r = warp; r < rows; r += warps) {
    const int64_t row = first + r;
    const float m = mean[row], s = rstd[row];
    if (lane == 0) tile_mean[r] = m, tile_rstd[r] = s;
    LayerNormBackwardRow<T, kVector>(din + row * C, dout + row * C, in + row * C, weight, m, s, C,
                                     lane);
  }
  __syncthreads();
  float* tile_partials = partials + (int64_t)blockIdx.x * 2 * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float dw = 0.f, db = 0.f;
    for (int r = 0; r < rows; ++r) {
      const int64_t i = (first + r) * C + c;
      const float g = ToFloat(dout[i]);
      dw += g * (ToFloat(in[i]) - tile_mean[r]) * tile_rstd[r];
      db += g;
    }
    tile_partials[c] = dw;
    tile_partials[C + c] = db;
  }
}

template <typename T>
void ForwardImpl(T* out, float* mean, float* rstd, T* residual, const T* a, const T* b,
                 const T* weight, const T* bias, int64_t N, int C, cudaStream_t stream) {
  const unsigned blocks = CeilDiv(N, kWarpsPerBlock);
  const bool registers =
      Vectorisable<T>(C, {out, residual, a, b, weight, bias}) &&
      DispatchVecs<kMaxForwardVecs>(VecsPerLane<T>(C), [&](auto vecs) {
        LayerNormForwardRegisterKernel<T, decltype(vecs)::value>
            <<<blocks, kThreads, 0, stream>>>(out, mean, rstd, residual, a, b, weight, bias, N, C);
      });
  if (!registers)
    LayerNormForwardKernel<T>
        <<<blocks, kThreads, 0, stream>>>(out, mean, rstd, residual, a, b, weight, bias, N, C);
}

// Launches the backward's first stage; returns the number of blocks (partial rows of
// kPartialRows<kSums> * C) it writes, or 0 when the register kernels do not fit the row.
template <typename T, bool kSums>
int RegisterBackward(T* din, float* partials, const T* dout, const T* in, const T* weight,
                     const float* mean, const float* rstd, int64_t N, int C, cudaStream_t stream) {
  if (!Vectorisable<T>(C, {din, dout, in, weight})) return 0;
  int launched = 0;  // blocks of the register kernel that ran
  auto grid = [&](int blocks_per_sm, int64_t* rows_per_block) {
    *rows_per_block = BackwardRowsPerBlock(N, blocks_per_sm);
    launched = static_cast<int>(CeilDiv(N, *rows_per_block));
    return static_cast<unsigned>(launched);
  };
  // Over 48 KiB of dynamic shared memory needs opting in, once per kernel (not every step; one
  // GPU per process). A failure shows as the launch's error.
  auto opt_in = [](auto kernel, size_t bytes) {
    if (bytes > 48 * 1024)
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes));
    return 0;
  };
  if (DispatchVecs<kMaxBackwardVecs<T>>(VecsPerLane<T>(C), [&](auto vecs) {
        constexpr int K = decltype(vecs)::value;
        int64_t rows = 0;
        const unsigned blocks = grid(kBackwardMinBlocks<T, K>, &rows);
        LayerNormBackwardRegisterKernel<T, K, kSums>
            <<<blocks, kBackwardThreads, kRegisterSharedBytes<T, K, kSums>(C), stream>>>(
                din, partials, dout, in, weight, mean, rstd, N, C, rows);
      }))
    return launched;
  if (DispatchVecs<kMaxForwardVecs>(VecsPerLane<T>(C), [&](auto vecs) {
        constexpr int K = decltype(vecs)::value;
        constexpr size_t kBytes = kWideSharedBytes<T, K, kSums>;
        int64_t rows = 0;
        const unsigned blocks = grid(kBackwardMinBlocks<T, K>, &rows);
        auto kernel = LayerNormBackwardWideKernel<T, K, kSums>;
        static const int opted_in = opt_in(kernel, kBytes);
        (void)opted_in;
        kernel<<<blocks, kBackwardThreads, kBytes, stream>>>(din, partials, dout, in, weight, mean,
                                                             rstd, N, C, rows);
      }))
    return launched;
  return 0;
}

// The generic path: partials (tiles, 2, C); returns the number of tiles.
template <typename T>
int GenericBackward(T* din, float* partials, const T* dout, const T* in, const T* weight,
                    const float* mean, const float* rstd, int64_t N, int C, cudaStream_t stream) {
  const unsigned tiles = CeilDiv(N, kTileRows);
  auto kernel = Vectorisable<T>(C, {din, dout, in, weight}) ? LayerNormBackwardKernel<T, true>
                                                            : LayerNormBackwardKernel<T, false>;
  kernel<<<tiles, kThreads, 0, stream>>>(din, partials, dout, in, weight, mean, rstd, N, C);
  return static_cast<int>(tiles);
}

// Partial rows of the register path, at most (the generic path's tiles are at least as many).
int64_t MaxBackwardChunks(int64_t N) {
  return std::max<int64_t>(CeilDiv(N, kTileRows), CeilDiv(N, BackwardRowsPerBlock(N, 3)));
}

template <typename T>
cudaError_t BackwardImpl(T* din, float* dweight, float* dbias, float* din_sums, const T* dout,
                         const T* in, const T* weight, const float* mean, const float* rstd,
                         int64_t N, int C, float* scratch, cudaStream_t stream) {
  int chunks =
      din_sums
          ? RegisterBackward<T, true>(din, scratch, dout, in, weight, mean, rstd, N, C, stream)
          : RegisterBackward<T, false>(din, scratch, dout, in, weight, mean, rstd, N, C, stream);
  if (chunks > 0) {
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    return din_sums ? LaunchAddPartials({dweight, dbias, din_sums}, scratch, chunks, C, stream)
                    : LaunchAddPartials({dweight, dbias}, scratch, chunks, C, stream);
  }
  if (din_sums) {  // din's column sums first (on entry), by the two-stage column reduction
    float* sum_partials = scratch + 3 * MaxBackwardChunks(N) * C;
    const int sum_chunks = ColumnReductionChunks(N);
    cudaError_t err =
        LaunchColumnSumsPartial(kDTypeOf<T>, sum_partials, din, N, C, sum_chunks, stream);
    if (err == cudaSuccess)
      err = LaunchAddPartials({din_sums}, sum_partials, sum_chunks, C, stream);
    if (err != cudaSuccess) return err;
  }
  chunks = GenericBackward<T>(din, scratch, dout, in, weight, mean, rstd, N, C, stream);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return LaunchAddPartials({dweight, dbias}, scratch, chunks, C, stream);
}

}  // namespace

cudaError_t LaunchLayerNormForward(DType dtype, void* out, float* mean, float* rstd, void* residual,
                                   const void* a, const void* b, const void* weight,
                                   const void* bias, int64_t N, int C, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      ForwardImpl<E>(static_cast<E*>(out), mean, rstd, static_cast<E*>(residual),
                     static_cast<const E*>(a), static_cast<const E*>(b),
                     static_cast<const E*>(weight), static_cast<const E*>(bias), N, C, stream));
  return cudaGetLastError();
}

size_t LayerNormBackwardScratchFloats(int64_t N, int C) {
  // Partial rows (chunks, 2 or 3, C), then room for the generic path's column-sum partials.
  return (3 * static_cast<size_t>(MaxBackwardChunks(N)) + ColumnReductionChunks(N)) * C;
}

cudaError_t LaunchLayerNormBackward(DType dtype, void* din, float* dweight, float* dbias,
                                    float* din_sums, const void* dout, const void* in,
                                    const void* weight, const float* mean, const float* rstd,
                                    int64_t N, int C, float* scratch, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      err = BackwardImpl<E>(static_cast<E*>(din), dweight, dbias, din_sums,
                            static_cast<const E*>(dout), static_cast<const E*>(in),
                            static_cast<const E*>(weight), mean, rstd, N, C, scratch, stream));
  return err;
}

}  // namespace cuda
}  // namespace trainer
