// LayerNorm forward (optionally fused with the residual add before it) and backward, one warp per
// row with f32 statistics (two passes: mean, then the sum of squared deviations).
//
// Two paths per direction:
//  - the register path (rows a whole number of 16-byte vectors, 16-byte aligned pointers; C up to
//    2048 bf16 / 1024 f32 forward, 4096 / 2048 backward): each lane keeps its share of the row as
//    16-byte vectors in registers, so every tensor is read and written exactly once. The forward
//    takes a row per warp; the backward shares a row between 1-8 warps (two vectors per lane at
//    most, so that many warps fit on an SM), accumulates its rows' weight/bias gradients per lane
//    in registers and writes one partial row per block (a fixed range of rows, from N alone);
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
// (the vectors are filled in order, so the first missing one ends the row). The backward shares a
// row between kLanes lanes of several warps the same way.
template <typename T, int kLanes = kWarpSize>
__device__ __forceinline__ int VecColumn(int k, int lane) {
  return (k * kLanes + lane) * Vec16<T>::kCount;
}

// Most vectors per lane of the forward (C <= 2048 bf16 / 1024 f32).
constexpr int kMaxForwardVecs = 8;

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

// ---- register path, backward ----
// A row is shared by a group of kWarpsPerRow warps (1, 2, 4 or 8), so that each lane holds at most
// kBackwardVecs 16-byte vectors of each of the row's three tensors (dout, in, din) and f32 sums of
// two of them. That keeps registers per thread low: more warps fit on an SM, and more loads are
// in flight (with one warp per row, C = 1024 bf16 took 225 registers, 8 warps per SM, ~2 TB/s).
// Lane `lane` of the group's warp `member` holds vectors k = 0 .. kVecs-1 at column
// VecColumn<T, kWarpsPerRow * kWarpSize>(k, member * kWarpSize + lane).
constexpr int kBackwardThreads = 256;
constexpr int kBackwardWarps = kBackwardThreads / kWarpSize;
constexpr int kBackwardVecs = 2;
constexpr int kBackwardMinBlocks = 2;  // blocks per SM the launch bounds ask registers for

// Rows of C elements that the register backward takes: kBackwardVecs vectors per lane of 8 warps.
template <typename T>
constexpr int kMaxBackwardColumns = (8 * kWarpSize) * (kBackwardVecs * Vec16<T>::kCount);

// The sum of v (each warp's own sum) over the kWarpsPerRow warps of row group `group`, added in
// member order, so every lane of the group gets the same value. slots: the group's buffer for this
// row, one of two that alternate between rows, so one barrier per row suffices: a warp writes a
// buffer again only after the next row's barrier, which every member reaches after reading it.
template <int kWarpsPerRow>
__device__ __forceinline__ void GroupBarrier(int group) {
  asm volatile("bar.sync %0, %1;" ::"r"(group + 1), "r"(kWarpsPerRow * kWarpSize) : "memory");
}

template <int kWarpsPerRow>
__device__ __forceinline__ float2 GroupSum(float2 v, float2* slots, int group, int member,
                                           int lane) {
  if (kWarpsPerRow == 1) return v;
  if (lane == 0) slots[member] = v;
  GroupBarrier<kWarpsPerRow>(group);
  float2 total = slots[0];
#pragma unroll
  for (int i = 1; i < kWarpsPerRow; ++i) total.x += slots[i].x, total.y += slots[i].y;
  return total;
}

// din-sum slots per warp: element (k, j) of lane l at (k * V + j) * 32 + l, so a warp's updates
// hit 32 distinct banks.
template <typename T, int kVecs>
constexpr int kSlotsPerWarp = (kVecs * Vec16<T>::kCount) * kWarpSize;

// Partial rows per block: dweight, dbias, then (kSums) din's column sums.
template <bool kSums>
constexpr int kPartialRows = kSums ? 3 : 2;

// Backward over rows [blockIdx.x * rows_per_block, + rows_per_block) (clipped to N); row group q
// takes rows q, q + groups, ... of that range. Per row, with n = (in - mean) * rstd and
// dn = dout * weight: din (N,C) += rstd * (dn - mean(dn) - n * mean(dn * n)), each tensor read
// once into registers. Each lane sums dout * n (dweight) and dout (dbias) over its rows in
// registers; with kSums, din's column sums (on entry) go to per-warp shared-memory slots. The
// block then adds its groups in a fixed order (group 0 first) and writes partials
// (gridDim.x, kPartialRows, C): its dweight row, its dbias row, then its din row.
template <typename T, int kVecs, int kWarpsPerRow, bool kSums>
__global__ void __launch_bounds__(kBackwardThreads, kBackwardMinBlocks)
    LayerNormBackwardRegisterKernel(T* din, float* partials, const T* dout, const T* in,
                                    const T* __restrict__ weight, const float* mean,
                                    const float* rstd, int64_t N, int C, int64_t rows_per_block) {
  constexpr int V = Vec16<T>::kCount, S = kSlotsPerWarp<T, kVecs>;
  constexpr int kLanes = kWarpsPerRow * kWarpSize, kGroups = kBackwardWarps / kWarpsPerRow;
  extern __shared__ float block_sums[];  // (2, C), then with kSums (warps, S)
  __shared__ float2 row_sums[2][kGroups][kWarpsPerRow];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int group = warp / kWarpsPerRow, member = warp % kWarpsPerRow;
  const int group_lane = member * kWarpSize + lane;
  const int64_t first = (int64_t)blockIdx.x * rows_per_block;
  const int64_t end = min(N, first + rows_per_block);
  float* din_slots = block_sums + 2 * C + warp * S;  // used with kSums only
  if (kSums) {
    for (int i = lane; i < S; i += kWarpSize) din_slots[i] = 0.f;
    __syncwarp();
  }
  Vec16<T> w[kVecs];
  float dw[kVecs][V], db[kVecs][V];  // this lane's column sums of dout * n and of dout
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (VecColumn<T, kLanes>(k, group_lane) < C)
      w[k] = Load16(weight + VecColumn<T, kLanes>(k, group_lane));
#pragma unroll
    for (int j = 0; j < V; ++j) dw[k][j] = db[k][j] = 0.f;
  }
  int parity = 0;
  for (int64_t row = first + group; row < end; row += kGroups) {
    const int64_t offset = row * C;
    const float m = mean[row], s = rstd[row];
    Vec16<T> g[kVecs], x[kVecs], d[kVecs];
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const int c = VecColumn<T, kLanes>(k, group_lane);
      if (c >= C) break;
      g[k] = Load16(dout + offset + c), x[k] = Load16(in + offset + c),
      d[k] = Load16(din + offset + c);
    }
    float sum_dn = 0.f, sum_dn_n = 0.f;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (VecColumn<T, kLanes>(k, group_lane) >= C) break;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float gj = ToFloat(g[k].v[j]), n = (ToFloat(x[k].v[j]) - m) * s;
        const float dn = gj * ToFloat(w[k].v[j]);
        sum_dn += dn;
        sum_dn_n += dn * n;
        dw[k][j] += gj * n;
        db[k][j] += gj;
        if (kSums) din_slots[(k * V + j) * kWarpSize + lane] += ToFloat(d[k].v[j]);
      }
    }
    const float2 sums = GroupSum<kWarpsPerRow>(make_float2(WarpSum(sum_dn), WarpSum(sum_dn_n)),
                                               row_sums[parity][group], group, member, lane);
    parity ^= 1;
    const float mean_dn = sums.x / C, mean_dn_n = sums.y / C;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const int c = VecColumn<T, kLanes>(k, group_lane);
      if (c >= C) break;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float n = (ToFloat(x[k].v[j]) - m) * s;
        const float dn = ToFloat(g[k].v[j]) * ToFloat(w[k].v[j]);
        d[k].v[j] = FromFloat<T>(ToFloat(d[k].v[j]) + s * (dn - mean_dn - n * mean_dn_n));
      }
      Store16(din + offset + c, d[k]);
    }
  }
  // Groups with a row fewer pass their barrier once more, idle: racecheck misreads the block
  // sums below when groups passed their named barriers unequally often (docs/gpu.md).
  const int64_t leftover = (end - first) % kGroups;  // rows of the block's last, partial turn
  if (kWarpsPerRow > 1 && leftover != 0 && group >= leftover) GroupBarrier<kWarpsPerRow>(group);
  for (int turn = 0; turn < kGroups; ++turn) {
    if (group == turn) {
#pragma unroll
      for (int k = 0; k < kVecs; ++k) {
        const int c = VecColumn<T, kLanes>(k, group_lane);
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
      const int vec = c / V, k = vec / kLanes, owner = vec % kLanes;  // owner: the group lane
      const int slot = (owner / kWarpSize) * S + (k * V + c % V) * kWarpSize + owner % kWarpSize;
      float sum = 0.f;
      for (int q = 0; q < kGroups; ++q) sum += slots[q * kWarpsPerRow * S + slot];
      block_partials[2 * C + c] = sum;
    }
  }
}

template <typename T, int kVecs, bool kSums>
constexpr size_t kRegisterSharedBytes(int C) {
  return sizeof(float) * (2 * C + (kSums ? kBackwardWarps * kSlotsPerWarp<T, kVecs> : 0));
}

// Register-path backward grid, from N alone (so are the partial sums): at least
// kBackwardMinRows rows per block, at most one wave of kBackwardMinBlocks blocks per SM on the 132
// SMs of an H100/H200: a second, partial wave would leave SMs idle for its whole length.
constexpr int kBackwardMinRows = 32;
constexpr int kSms = 132;
int64_t BackwardRowsPerBlock(int64_t N) {
  const int64_t blocks = std::min<int64_t>(CeilDiv(N, kBackwardMinRows),
                                           static_cast<int64_t>(kBackwardMinBlocks) * kSms);
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

// Calls launch(integral_constant<kVecs>, integral_constant<kWarpsPerRow>) with the fewest warps
// per row (1, 2, 4, 8) that hold the row in kBackwardVecs vectors per lane, and the fewest
// vectors per lane for those warps; false (nothing called) when 8 warps cannot hold it.
template <typename T, typename Launch>
bool DispatchBackward(int C, const Launch& launch) {
  static_assert(kBackwardVecs == 2, "vector counts are 1 and 2");
  const int64_t vecs = C / Vec16<T>::kCount;  // per row
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  if (vecs <= kWarpSize)
    launch(One(), One());
  else if (vecs <= 2 * kWarpSize)
    launch(Two(), One());
  else if (vecs <= 4 * kWarpSize)
    launch(Two(), Two());
  else if (vecs <= 8 * kWarpSize)
    launch(Two(), std::integral_constant<int, 4>());
  else if (vecs <= 16 * kWarpSize)
    launch(Two(), std::integral_constant<int, 8>());
  else
    return false;
  return true;
}

// Launches the backward's first stage; returns the number of blocks (partial rows of
// kPartialRows<kSums> * C) it writes, or 0 when the register kernel does not fit the row.
template <typename T, bool kSums>
int RegisterBackward(T* din, float* partials, const T* dout, const T* in, const T* weight,
                     const float* mean, const float* rstd, int64_t N, int C, cudaStream_t stream) {
  if (!Vectorisable<T>(C, {din, dout, in, weight})) return 0;
  const int64_t rows = BackwardRowsPerBlock(N);
  const unsigned blocks = static_cast<unsigned>(CeilDiv(N, rows));
  const bool launched = DispatchBackward<T>(C, [&](auto vecs, auto warps_per_row) {
    constexpr int K = decltype(vecs)::value, G = decltype(warps_per_row)::value;
    auto kernel = LayerNormBackwardRegisterKernel<T, K, G, kSums>;
    // Up to 48 KiB of dynamic shared memory (bf16 rows of 4096 with din's sums) besides the static
    // row sums: opted in once per kernel (not every step; one GPU per process). A failure shows as
    // the launch's error.
    static const cudaError_t opted_in = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(kRegisterSharedBytes<T, K, kSums>(kMaxBackwardColumns<T>)));
    (void)opted_in;
    const size_t bytes = kRegisterSharedBytes<T, K, kSums>(C);
    kernel<<<blocks, kBackwardThreads, bytes, stream>>>(din, partials, dout, in, weight, mean, rstd,
                                                        N, C, rows);
  });
  return launched ? static_cast<int>(blocks) : 0;
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
  return std::max<int64_t>(CeilDiv(N, kTileRows), CeilDiv(N, BackwardRowsPerBlock(N)));
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
    cudaError_t err = LaunchColumnSumsPartial(kDTypeOf<T>, sum_partials, din, N, C, C, nullptr,
                                              sum_chunks, stream);
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
