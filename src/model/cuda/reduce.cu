// Reductions: deterministic two-stage column sums (bias gradients), the fixed-order sum of
// per-chunk partials into f32 gradients, and the sum of squares for the global gradient norm.
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kRowLanes = 8;

// Block (32 columns x 8 row lanes) per (column tile, row chunk): partials (chunks, C).
template <typename T>
__global__ void ColumnSumsPartialKernel(float* partials, const T* x, int64_t N, int C, int chunks) {
  __shared__ float shared[kRowLanes][kWarpSize + 1];
  const int c = blockIdx.x * kWarpSize + threadIdx.x;
  const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  const int64_t begin = blockIdx.y * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < N ? begin + rows_per_chunk : N;
  float sum = 0.f;
  if (c < C)
    for (int64_t row = begin + threadIdx.y; row < end; row += kRowLanes)
      sum += ToFloat(x[row * C + c]);
  shared[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int y = 1; y < kRowLanes; ++y) sum += shared[y][threadIdx.x];
    partials[(int64_t)blockIdx.y * C + c] = sum;
  }
}

// out[c] += sum over chunks of partials[r][c]. Block (32 columns x 8 chunk lanes): each lane sums
// every 8th chunk, then the lanes are added in a fixed order (deterministic, many loads in flight).
__global__ void AddPartialsKernel(float* out, const float* partials, int chunks, int count) {
  __shared__ float shared[kRowLanes][kWarpSize + 1];
  const int c = blockIdx.x * kWarpSize + threadIdx.x;
  float sum = 0.f;
  if (c < count) {
#pragma unroll 4
    for (int r = threadIdx.y; r < chunks; r += kRowLanes) sum += partials[(int64_t)r * count + c];
  }
  shared[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < count) {
    for (int y = 1; y < kRowLanes; ++y) sum += shared[y][threadIdx.x];
    out[c] += sum;
  }
}

// Stage 1: each block writes the sum of squares of its grid-stride share as one double.
__global__ void SumSquaresPartialKernel(const float* x, int64_t n, double* partials) {
  __shared__ double shared[1024 / kWarpSize];
  double sum = 0.0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const double v = x[i];
    sum += v * v;
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
__global__ void SumPartialsKernel(const double* partials, int count, double* result) {
  double total = 0.0;
  for (int i = threadIdx.x; i < count; i += kWarpSize) total += partials[i];
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    total += __shfl_xor_sync(0xffffffffu, total, offset);
  if (threadIdx.x == 0) *result = total;
}

}  // namespace

int ColumnReductionChunks(int64_t N) {
  const int64_t chunks = (N + 63) / 64;  // about 64 rows per chunk, at most 256 chunks
  return static_cast<int>(chunks < 1 ? 1 : (chunks > 256 ? 256 : chunks));
}

cudaError_t LaunchColumnSumsPartial(DType dtype, float* partials, const void* x, int64_t N, int C,
                                    int chunks, cudaStream_t stream) {
  const dim3 grid(CeilDiv(C, kWarpSize), chunks), block(kWarpSize, kRowLanes);
  TRAINER_DISPATCH_FLOAT_TYPE(dtype, E,
                              ColumnSumsPartialKernel<E><<<grid, block, 0, stream>>>(
                                  partials, static_cast<const E*>(x), N, C, chunks));
  return cudaGetLastError();
}

cudaError_t LaunchAddPartials(float* out, const float* partials, int chunks, int count,
                              cudaStream_t stream) {
  const dim3 block(kWarpSize, kRowLanes);
  AddPartialsKernel<<<CeilDiv(count, kWarpSize), block, 0, stream>>>(out, partials, chunks, count);
  return cudaGetLastError();
}

cudaError_t LaunchSumSquares(const float* x, int64_t n, double* partials, double* result,
                             cudaStream_t stream) {
  constexpr int kThreads = 512;
  int64_t blocks = (n + kThreads - 1) / kThreads;
  blocks = blocks < 1 ? 1 : (blocks > kSumSquaresPartials ? kSumSquaresPartials : blocks);
  SumSquaresPartialKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, n, partials);
  SumPartialsKernel<<<1, kWarpSize, 0, stream>>>(partials, static_cast<int>(blocks), result);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
