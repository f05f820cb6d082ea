// Hidden-state dropout, optionally fused with the residual add that follows it: one thread per
// four columns of a row, which is one Philox call (philox.h), the same bits as the CPU twin
// (cpu/dropout.cpp). The mask is never stored: the backward draws it again.
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void DropoutKernel(T* out, const T* in, const T* residual, int64_t N, int C,
                              DropoutKey key, uint32_t threshold, float scale) {
  // Groups of four global columns (key.first_column + c), as the CPU's.
  const int64_t first = key.first_column, first_group = first / 4;
  const int64_t groups_per_row = (first % 4 + C + 3) / 4, n = N * groups_per_row;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / groups_per_row, group = first_group + i % groups_per_row;
    const Philox4 bits = HiddenDropoutWords(key, r, group);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t c = group * 4 + k - first;
      if (c < 0) continue;
      if (c >= C) break;
      const int64_t e = r * C + c;
      const float kept = bits.v[k] >= threshold ? ToFloat(in[e]) * scale : 0.f;
      out[e] = FromFloat<T>(residual ? ToFloat(residual[e]) + kept : kept);
    }
  }
}

__global__ void FillInt64PairKernel(int64_t* dst, int64_t a, int64_t b) {
  dst[0] = a;
  dst[1] = b;
}

}  // namespace

cudaError_t LaunchFillInt64Pair(int64_t* dst, int64_t a, int64_t b, cudaStream_t stream) {
  FillInt64PairKernel<<<1, 1, 0, stream>>>(dst, a, b);
  return cudaGetLastError();
}

cudaError_t LaunchDropout(DType dtype, void* out, const void* in, const void* residual, int64_t N,
                          int C, const DropoutKey& key, cudaStream_t stream) {
  const int64_t n = N * ((key.first_column % 4 + C + 3) / 4);
  const uint32_t threshold = DropoutThreshold(key.p);
  const float scale = DropoutScale(key.p);
  TRAINER_DISPATCH_FLOAT_TYPE(dtype, E,
                              DropoutKernel<E><<<GridStrideBlocks(n, kThreads), kThreads, 0,
                                                 stream>>>(
                                  static_cast<E*>(out), static_cast<const E*>(in),
                                  static_cast<const E*>(residual), N, C, key, threshold, scale));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
