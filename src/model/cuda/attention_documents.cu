// Packed documents (Data.packing: documents) as the variable-length batch of cuDNN's fused
// attention (attention_cudnn.h), and the attention statistics between the ops' (B,NH,T) layout
// and cuDNN's ragged (B*T,NH) one. CPU twins: cpu/documents.cpp.
// The sequences come from doc_starts on the device in one block: a block-wide scan over tiles of
// rows numbers the document starts in row order, each document's first row writes where it
// starts and its last row how long it is; then cuDNN's ragged offsets (elements) are the first
// rows times each tensor's row length. One block suffices: B*T is at most a few 10^5 rows.
#include <algorithm>
#include <cub/block/block_scan.cuh>

#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kThreads = 512, kItems = 8, kTile = kThreads * kItems;  // rows per tile

// seq_len (capacity), first_row (capacity + 1), offsets (3, capacity + 1) of type O: first_row
// times qkv_row, out_row, stats_row.
template <typename O>
__global__ void __launch_bounds__(kThreads)
    DocumentSequencesKernel(int32_t* seq_len, int32_t* first_row, O* offsets,
                            const int32_t* __restrict__ doc_starts, int B, int T, int capacity,
                            int64_t qkv_row, int64_t out_row, int64_t stats_row) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int rows = B * T;
  for (int i = threadIdx.x; i <= capacity; i += kThreads) {
    first_row[i] = rows;  // empty sequences past the last document
    if (i < capacity) seq_len[i] = 0;
  }
  __syncthreads();
  int before = 0;  // documents starting in earlier tiles
  for (int base = 0; base < rows; base += kTile) {
    int starts[kItems], count[kItems];  // rows base + threadIdx.x * kItems + k (blocked)
    for (int k = 0; k < kItems; ++k) {
      const int r = base + threadIdx.x * kItems + k;
      starts[k] = r < rows && doc_starts[r] == r % T;
    }
    int in_tile = 0;
    Scan(scan).InclusiveSum(starts, count, in_tile);
    for (int k = 0; k < kItems; ++k) {
      const int r = base + threadIdx.x * kItems + k;
      const int doc = before + count[k] - 1;  // row r's document
      if (r >= rows || doc < 0 || doc >= capacity) continue;
      const int t = r % T;
      if (starts[k]) first_row[doc] = r;
      if (t == T - 1 || doc_starts[r + 1] == t + 1) seq_len[doc] = t - doc_starts[r] + 1;
    }
    before += in_tile;
    __syncthreads();  // the scan's storage is reused; the last barrier publishes first_row
  }
  for (int i = threadIdx.x; i <= capacity; i += kThreads) {
    const int64_t r = first_row[i];  // a document's first row, or the fill
    offsets[i] = static_cast<O>(r * qkv_row);
    offsets[capacity + 1 + i] = static_cast<O>(r * out_row);
    offsets[2 * (capacity + 1) + i] = static_cast<O>(r * stats_row);
  }
}

// One thread per element of the destination (coalesced writes).
__global__ void TransposeStatsKernel(float* by_row, float* by_head, int B, int T, int NH,
                                     bool to_rows) {
  const int64_t n = static_cast<int64_t>(B) * T * NH;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (to_rows) {  // i = (b*T + t)*NH + h
      const int64_t h = i % NH, bt = i / NH, b = bt / T, t = bt % T;
      by_row[i] = by_head[(b * NH + h) * T + t];
    } else {  // i = (b*NH + h)*T + t
      const int64_t t = i % T, bh = i / T, b = bh / NH, h = bh % NH;
      by_head[i] = by_row[(b * T + t) * NH + h];
    }
  }
}

}  // namespace

cudaError_t LaunchDocumentSequences(int32_t* seq_len, int32_t* first_row, void* offsets,
                                    bool wide_offsets, const int32_t* doc_starts, int B, int T,
                                    int capacity, int64_t qkv_row, int64_t out_row,
                                    int64_t stats_row, cudaStream_t stream) {
  if (wide_offsets)
    DocumentSequencesKernel<int64_t><<<1, kThreads, 0, stream>>>(
        seq_len, first_row, static_cast<int64_t*>(offsets), doc_starts, B, T, capacity, qkv_row,
        out_row, stats_row);
  else
    DocumentSequencesKernel<int32_t><<<1, kThreads, 0, stream>>>(
        seq_len, first_row, static_cast<int32_t*>(offsets), doc_starts, B, T, capacity, qkv_row,
        out_row, stats_row);
  return cudaGetLastError();
}

cudaError_t LaunchTransposeAttentionStats(float* by_row, float* by_head, int B, int T, int NH,
                                          bool to_rows, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(B) * T * NH;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  TransposeStatsKernel<<<blocks, 256, 0, stream>>>(by_row, by_head, B, T, NH, to_rows);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
