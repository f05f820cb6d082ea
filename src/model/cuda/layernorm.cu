// LayerNorm forward (optionally fused with the residual add before it) and backward, one warp per
// row with f32 statistics; the weight/bias gradients go through a deterministic two-stage column
// reduction (per-chunk partials in scratch, then a fixed-order sum added into the f32 gradients).
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

// din (N,C) += dx, where dx = rstd * (dn - mean(dn) - n * mean(dn * n)), dn = dout * weight.
template <typename T>
__global__ void LayerNormBackwardInputKernel(T* din, const T* dout, const T* in, const T* weight,
                                             const float* mean, const float* rstd, int64_t N,
                                             int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const int64_t offset = row * C;
  const float m = mean[row], s = rstd[row];
  float sum_dn = 0.f, sum_dn_n = 0.f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float n = (ToFloat(in[offset + c]) - m) * s;
    const float dn = ToFloat(dout[offset + c]) * ToFloat(weight[c]);
    sum_dn += dn;
    sum_dn_n += dn * n;
  }
  const float mean_dn = WarpSum(sum_dn) / C, mean_dn_n = WarpSum(sum_dn_n) / C;
  for (int c = lane; c < C; c += kWarpSize) {
    const float n = (ToFloat(in[offset + c]) - m) * s;
    const float dn = ToFloat(dout[offset + c]) * ToFloat(weight[c]);
    const float dx = s * (dn - mean_dn - n * mean_dn_n);
    din[offset + c] = FromFloat<T>(ToFloat(din[offset + c]) + dx);
  }
}

// Block (32 columns x 8 row lanes) per (column tile, row chunk): partial sums of dout * n (the
// weight gradient) and dout (the bias gradient) into partials [2][chunks][C].
template <typename T>
__global__ void LayerNormBackwardParamsKernel(float* partials, const T* dout, const T* in,
                                              const float* mean, const float* rstd, int64_t N,
                                              int C, int chunks) {
  __shared__ float dw_shared[kRowsPerBlock][kWarpSize + 1];
  __shared__ float db_shared[kRowsPerBlock][kWarpSize + 1];
  const int c = blockIdx.x * kWarpSize + threadIdx.x;
  const int chunk = blockIdx.y;
  const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  const int64_t begin = chunk * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < N ? begin + rows_per_chunk : N;
  float dw = 0.f, db = 0.f;
  if (c < C) {
    for (int64_t row = begin + threadIdx.y; row < end; row += kRowsPerBlock) {
      const float g = ToFloat(dout[row * C + c]);
      dw += g * (ToFloat(in[row * C + c]) - mean[row]) * rstd[row];
      db += g;
    }
  }
  dw_shared[threadIdx.y][threadIdx.x] = dw;
  db_shared[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int y = 1; y < kRowsPerBlock; ++y) {
      dw += dw_shared[y][threadIdx.x];
      db += db_shared[y][threadIdx.x];
    }
    partials[(int64_t)chunk * C + c] = dw;
    partials[((int64_t)chunks + chunk) * C + c] = db;
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
  return 2 * static_cast<size_t>(ColumnReductionChunks(N)) * C;
}

cudaError_t LaunchLayerNormBackward(DType dtype, void* din, float* dweight, float* dbias,
                                    const void* dout, const void* in, const void* weight,
                                    const float* mean, const float* rstd, int64_t N, int C,
                                    float* scratch, cudaStream_t stream) {
  const int chunks = ColumnReductionChunks(N);
  const dim3 param_grid(CeilDiv(C, kWarpSize), chunks);
  const dim3 param_block(kWarpSize, kRowsPerBlock);
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      LayerNormBackwardInputKernel<E>
      <<<CeilDiv(N, kRowsPerBlock), kRowsPerBlock * kWarpSize, 0, stream>>>(
          static_cast<E*>(din), static_cast<const E*>(dout), static_cast<const E*>(in),
          static_cast<const E*>(weight), mean, rstd, N, C);
      LayerNormBackwardParamsKernel<E><<<param_grid, param_block, 0, stream>>>(
          scratch, static_cast<const E*>(dout), static_cast<const E*>(in), mean, rstd, N, C,
          chunks));
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  err = LaunchAddPartials(dweight, scratch, chunks, C, stream);
  if (err != cudaSuccess) return err;
  return LaunchAddPartials(dbias, scratch + (size_t)chunks * C, chunks, C, stream);
}

}  // namespace cuda
}  // namespace trainer
