// Matrix transposition, out (cols, rows) = in (rows, cols)^T, for f32 and bf16: 32 x 32 tiles
// through shared memory, so that both the reads and the writes are row segments. The CPU twin
// is cpu::transpose. Used for the sm90 GELU-gradient GEMM, which wants W_proj^T as its K-major
// operand (cuda_backend_gelu_gemm.cpp).
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kTile = 32, kTileRowsPerPass = 8;  // blocks of (32, 8) threads

template <typename T>
__global__ void TransposeKernel(T* out, const T* in, int64_t rows, int64_t cols) {
  __shared__ T tile[kTile][kTile + 1];  // +1: a column of the tile spreads over all banks
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile; r0 < rows;
       r0 += static_cast<int64_t>(gridDim.y) * kTile) {
    for (int i = threadIdx.y; i < kTile; i += kTileRowsPerPass) {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[i][threadIdx.x] = in[r * cols + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kTileRowsPerPass) {
      const int64_t c = c0 + i, r = r0 + threadIdx.x;
      if (c < cols && r < rows) out[c * rows + r] = tile[threadIdx.x][i];
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t LaunchTranspose(DType dtype, void* out, const void* in, int64_t rows, int64_t cols,
                            cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int64_t col_tiles = (cols + kTile - 1) / kTile, row_tiles = (rows + kTile - 1) / kTile;
  if (col_tiles > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(col_tiles),
                  static_cast<unsigned>(row_tiles < 65535 ? row_tiles : 65535));
  const dim3 block(kTile, kTileRowsPerPass);
  if (dtype == DType::kBF16) {
    TransposeKernel<<<grid, block, 0, stream>>>(static_cast<bf16*>(out),
                                                static_cast<const bf16*>(in), rows, cols);
  } else if (dtype == DType::kF32) {
    TransposeKernel<<<grid, block, 0, stream>>>(static_cast<float*>(out),
                                                static_cast<const float*>(in), rows, cols);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
