// Reductions: deterministic two-stage column sums (bias gradients), the fixed-order sum of
// per-chunk partials into f32 gradients, and the sum of squares for the global gradient norm.
#include <algorithm>

#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kRowLanes = 8;

// Block (32 lanes x 8 row lanes) per (column tile, row chunk): partials (chunks, C). Each lane
// owns kCount adjacent columns (one 16-byte load per row when the rows allow it, else one column),
// so a warp reads 512 contiguous bytes per row; the 8 row lanes are added in a fixed order. Rows
// are ld elements apart; with kWeighted, row r counts row_weights[r] times.
template <typename T, int kCount, bool kWeighted>
__global__ void ColumnSumsPartialKernel(float* partials, const T* x, int64_t N, int C, int64_t ld,
                                        const float* row_weights, int chunks) {
  __shared__ float shared[kRowLanes][kWarpSize * kCount];
  const int c0 = (blockIdx.x * kWarpSize + threadIdx.x) * kCount;
  const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  const int64_t begin = blockIdx.y * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < N ? begin + rows_per_chunk : N;
  float sum[kCount] = {};
  if (c0 < C) {
    for (int64_t row = begin + threadIdx.y; row < end; row += kRowLanes) {
      float v[kCount];
      if constexpr (kCount == 1) {
        v[0] = ToFloat(x[row * ld + c0]);
      } else {
        const Vec16<T> packed = Load16(x + row * ld + c0);
#pragma unroll
        for (int k = 0; k < kCount; ++k) v[k] = ToFloat(packed.v[k]);
      }
      if constexpr (kWeighted) {
        const float w = row_weights[row];
#pragma unroll
        for (int k = 0; k < kCount; ++k) sum[k] = fmaf(w, v[k], sum[k]);
      } else {
#pragma unroll
        for (int k = 0; k < kCount; ++k) sum[k] += v[k];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kCount; ++k) shared[threadIdx.y][threadIdx.x * kCount + k] = sum[k];
  __syncthreads();
  // The block's kCount * 32 columns, one thread each: add the row lanes in order.
  const int flat = threadIdx.y * kWarpSize + threadIdx.x;
  for (int j = flat; j < kWarpSize * kCount; j += kWarpSize * kRowLanes) {
    const int c = blockIdx.x * kWarpSize * kCount + j;
    if (c >= C) continue;
    float total = shared[0][j];
    for (int y = 1; y < kRowLanes; ++y) total += shared[y][j];
    partials[(int64_t)blockIdx.y * C + c] = total;
  }
}

// Up to three f32 outputs of `count` columns each; column c of a partial row goes to
// out[c / count][c % count].
struct PartialOutputs {
  float* out[kMaxPartialOutputs] = {};
  int count = 0;
};

// outs[c] += sum over r < chunks of partials[r * width + c] (width = outputs * count). Block (32
// columns x `lanes` chunk lanes, lanes a power of two that depends on chunks only): lane y sums
// chunks y, y + lanes, ... in order, kBatch loads in flight at a time (past the last chunk it adds
// zeros), then the lanes are added by a fixed tree. The summation order depends only on
// (chunks, width): deterministic.
constexpr int kMaxChunkLanes = 32;
__global__ void AddPartialsKernel(PartialOutputs outs, const float* partials, int chunks,
                                  int width) {
  constexpr int kBatch = 8;
  __shared__ float shared[kMaxChunkLanes][kWarpSize + 1];
  const int c = blockIdx.x * kWarpSize + threadIdx.x, y = threadIdx.y, lanes = blockDim.y;
  float sum = 0.f;
  if (c < width) {
    for (int r0 = y; r0 < chunks; r0 += kBatch * lanes) {
      float v[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int r = r0 + i * lanes;
        v[i] = r < chunks ? partials[(int64_t)r * width + c] : 0.f;
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) sum += v[i];
    }
  }
  shared[y][threadIdx.x] = sum;
  for (int half = lanes / 2; half > 0; half /= 2) {
    __syncthreads();
    if (y < half) {
      sum += shared[y + half][threadIdx.x];
      shared[y][threadIdx.x] = sum;
    }
  }
  if (y == 0 && c < width) outs.out[c / outs.count][c % outs.count] += sum;
}

// Chunk lanes per column for AddPartialsKernel: enough to keep every lane's sum short.
int ChunkLanes(int chunks) {
  int lanes = 1;
  while (lanes < chunks && lanes < kMaxChunkLanes) lanes *= 2;
  return lanes;
}

// Stage 1: each block writes the sum (of squares with kSquares) of its grid-stride share as one
// double.
template <bool kSquares>
__global__ void SumPartialKernel(const float* x, int64_t n, double* partials) {
  __shared__ double shared[1024 / kWarpSize];
  double sum = 0.0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const double v = x[i];
    sum += kSquares ? v * v : v;
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % kWarpSize == 0) shared[threadIdx.x / kWarpSize] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < blockDim.x / kWarpSize; ++w) total += shared[w];
    partials[blockIdx.x] = total;
  }
}

// Stage 2: one warp adds the partials (at most kSumSquaresPartials), lane-strided then by a
// fixed shuffle tree, so the result does not depend on timing.
__global__ void SumPartialsKernel(const double* partials, int count, double* result,
                                  bool accumulate) {
  double total = 0.0;
  for (int i = threadIdx.x; i < count; i += kWarpSize) total += partials[i];
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    total += __shfl_xor_sync(0xffffffffu, total, offset);
  if (threadIdx.x == 0) *result = accumulate ? *result + total : total;
}

// LaunchSumPartials' kernel: one block of kSumThreads adds n doubles, thread-strided, then each
// warp's by a fixed shuffle tree, then thread 0 the warps' in order.
constexpr int kSumThreads = 1024;
__global__ void __launch_bounds__(kSumThreads)
    SumManyPartialsKernel(const double* partials, int64_t n, double* result, bool accumulate) {
  __shared__ double warps[kSumThreads / kWarpSize];
  double total = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kSumThreads) total += partials[i];
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    total += __shfl_xor_sync(0xffffffffu, total, offset);
  if (threadIdx.x % kWarpSize == 0) warps[threadIdx.x / kWarpSize] = total;
  __syncthreads();
  if (threadIdx.x != 0) return;
  total = 0.0;
  for (int w = 0; w < kSumThreads / kWarpSize; ++w) total += warps[w];
  *result = accumulate ? *result + total : total;
}

// The kernel for the rows' alignment (16-byte loads where they allow) and weighting, one block
// per (column tile, row chunk).
template <typename T>
void ColumnSumsPartialTyped(float* partials, const T* x, int64_t N, int C, int64_t ld,
                            const float* row_weights, int chunks, cudaStream_t stream) {
  constexpr int kVector = Vec16<T>::kCount;
  const bool vector = Vectorisable<T>(C, {x}) && ld % kVector == 0;
  const dim3 grid(CeilDiv(C, kWarpSize * (vector ? kVector : 1)), chunks),
      block(kWarpSize, kRowLanes);
  if (vector && row_weights)
    ColumnSumsPartialKernel<T, kVector, true>
        <<<grid, block, 0, stream>>>(partials, x, N, C, ld, row_weights, chunks);
  else if (vector)
    ColumnSumsPartialKernel<T, kVector, false>
        <<<grid, block, 0, stream>>>(partials, x, N, C, ld, nullptr, chunks);
  else if (row_weights)
    ColumnSumsPartialKernel<T, 1, true>
        <<<grid, block, 0, stream>>>(partials, x, N, C, ld, row_weights, chunks);
  else
    ColumnSumsPartialKernel<T, 1, false>
        <<<grid, block, 0, stream>>>(partials, x, N, C, ld, nullptr, chunks);
}

}  // namespace

int ColumnReductionChunks(int64_t N) {
  const int64_t chunks = (N + 63) / 64;  // about 64 rows per chunk, at most 256 chunks
  return static_cast<int>(chunks < 1 ? 1 : (chunks > 256 ? 256 : chunks));
}

cudaError_t LaunchColumnSumsPartial(DType dtype, float* partials, const void* x, int64_t N, int C,
                                    int64_t ld, const float* row_weights, int chunks,
                                    cudaStream_t stream) {
  TRAINER_DISPATCH_FLOAT_TYPE(dtype, E,
                              ColumnSumsPartialTyped(partials, static_cast<const E*>(x), N, C, ld,
                                                     row_weights, chunks, stream));
  return cudaGetLastError();
}

cudaError_t LaunchAddPartials(std::initializer_list<float*> outs, const float* partials, int chunks,
                              int count, cudaStream_t stream) {
  const int n = static_cast<int>(outs.size());
  if (count == 0 || n == 0) return cudaSuccess;
  if (n > kMaxPartialOutputs) return cudaErrorInvalidValue;
  PartialOutputs o;
  o.count = count;
  std::copy(outs.begin(), outs.end(), o.out);
  const int width = n * count;
  const dim3 block(kWarpSize, ChunkLanes(chunks));
  AddPartialsKernel<<<CeilDiv(width, kWarpSize), block, 0, stream>>>(o, partials, chunks, width);
  return cudaGetLastError();
}

cudaError_t LaunchSum(const float* x, int64_t n, bool squares, bool accumulate, double* partials,
                      double* result, cudaStream_t stream) {
  constexpr int kThreads = 512;
  int64_t blocks = (n + kThreads - 1) / kThreads;
  blocks = blocks < 1 ? 1 : (blocks > kSumSquaresPartials ? kSumSquaresPartials : blocks);
  auto partial = squares ? SumPartialKernel<true> : SumPartialKernel<false>;
  partial<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, n, partials);
  SumPartialsKernel<<<1, kWarpSize, 0, stream>>>(partials, static_cast<int>(blocks), result,
                                                 accumulate);
  return cudaGetLastError();
}

cudaError_t LaunchSumPartials(const double* partials, int64_t n, bool accumulate, double* result,
                              cudaStream_t stream) {
  SumManyPartialsKernel<<<1, kSumThreads, 0, stream>>>(partials, n, result, accumulate);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
