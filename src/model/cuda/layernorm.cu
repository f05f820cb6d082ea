// LayerNorm forward (optionally fused with the residual add before it) and backward, one warp per
// row with f32 statistics; the weight/bias gradients go through a deterministic two-stage column
// reduction (per-tile partials in scratch, then a fixed-order sum added into the f32 gradients).
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr int kRowsPerBlock = 8;  // one warp per row

// out (N,C), mean (N), rstd (N). With b: residual = a + b first (rounded to T), normalised after.
template <typename T>
__global__ void LayerNormForwardKernel(T* out, float* mean, float* rstd, T* residual, const T* a,
                                       const T* b, const T* weight, const T* bias, int64_t N,
                                       int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
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

// Backward over a tile of kTileRows rows per block, in two phases:
//  1. one warp per row: din (N,C) += rstd * (dn - mean(dn) - n * mean(dn * n)), dn = dout * weight,
//     with 16-byte loads when C allows; the row statistics go to shared memory;
//  2. one thread per column: the tile's sums of dout * n (weight gradient) and dout (bias
//     gradient) in a fixed row order (the tile was just read, so from L1/L2), written to
//     partials [2][tiles][C] and summed over tiles in a fixed order afterwards: deterministic.
constexpr int kTileRows = 32;

// Phase 1 for one row (one warp): sums, then din += dx. kVector: C is a multiple of 16 bytes.
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
  const int tiles = gridDim.x;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float dw = 0.f, db = 0.f;
    for (int r = 0; r < rows; ++r) {
      const int64_t i = (first + r) * C + c;
      const float g = ToFloat(dout[i]);
      dw += g * (ToFloat(in[i]) - tile_mean[r]) * tile_rstd[r];
      db += g;
    }
    partials[(int64_t)blockIdx.x * C + c] = dw;
    partials[((int64_t)tiles + blockIdx.x) * C + c] = db;
  }
}

}  // namespace

cudaError_t LaunchLayerNormForward(DType dtype, void* out, float* mean, float* rstd, void* residual,
                                   const void* a, const void* b, const void* weight,
                                   const void* bias, int64_t N, int C, cudaStream_t stream) {
  const unsigned blocks = CeilDiv(N, kRowsPerBlock);
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      LayerNormForwardKernel<E><<<blocks, kRowsPerBlock * kWarpSize, 0, stream>>>(
          static_cast<E*>(out), mean, rstd, static_cast<E*>(residual), static_cast<const E*>(a),
          static_cast<const E*>(b), static_cast<const E*>(weight), static_cast<const E*>(bias), N,
          C));
  return cudaGetLastError();
}

size_t LayerNormBackwardScratchFloats(int64_t N, int C) {
  return 2 * static_cast<size_t>(CeilDiv(N, kTileRows)) * C;
}

cudaError_t LaunchLayerNormBackward(DType dtype, void* din, float* dweight, float* dbias,
                                    const void* dout, const void* in, const void* weight,
                                    const float* mean, const float* rstd, int64_t N, int C,
                                    float* scratch, cudaStream_t stream) {
  const int tiles = static_cast<int>(CeilDiv(N, kTileRows));
  const int threads = 256;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E, const bool vector = C % (16 / sizeof(E)) == 0;
      auto kernel = vector ? LayerNormBackwardKernel<E, true> : LayerNormBackwardKernel<E, false>;
      kernel<<<tiles, threads, 0, stream>>>(static_cast<E*>(din), scratch,
                                            static_cast<const E*>(dout), static_cast<const E*>(in),
                                            static_cast<const E*>(weight), mean, rstd, N, C));
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  err = LaunchAddPartials(dweight, scratch, tiles, C, stream);
  if (err != cudaSuccess) return err;
  return LaunchAddPartials(dbias, scratch + (size_t)tiles * C, tiles, C, stream);
}

}  // namespace cuda
}  // namespace trainer
