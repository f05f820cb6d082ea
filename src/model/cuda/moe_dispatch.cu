// The MoE dispatch on the GPU (Backend::MoeDispatchSlots), the twin of cpu::moe_dispatch_slots:
// the stable counting sort of the router's choices by expert, so that the permutation needs no
// copy of the choices to the host. Three launches over chunks of kChunk tokens (a thread a token):
// - counts: each chunk's choices per expert (shared-memory histogram);
// - scan (one block): per expert, the chunks' counts turned into each chunk's first rank in the
//   expert's group, the totals (counts), and the groups' starts from the kept rows (capacity);
// - slots: each choice's rank among its expert's choices in the chunk, in token order, from a
//   bitmap (expert, token of the chunk) and population counts; past the capacity, -1.
// Integer work only: the same slots as the CPU on every run. A choice of no expert (outside
// [0, E), which the routers never make) is dropped and counted nowhere, as on the CPU.
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kChunk = 256;                     // tokens per block (a thread each)
constexpr int kChunkWords = kChunk / kWarpSize;  // bitmap words per expert
constexpr int kScanThreads = 256;

__global__ void __launch_bounds__(kChunk)
    MoeDispatchCountsKernel(int32_t* __restrict__ chunk_counts, const int32_t* __restrict__ experts,
                            int64_t N, int K, int E) {
  extern __shared__ int32_t histogram[];  // (E)
  for (int e = threadIdx.x; e < E; e += blockDim.x) histogram[e] = 0;
  __syncthreads();
  const int64_t t = blockIdx.x * static_cast<int64_t>(kChunk) + threadIdx.x;
  if (t < N)
    for (int k = 0; k < K; ++k) {
      const int e = experts[t * K + k];
      if (e >= 0 && e < E) atomicAdd(&histogram[e], 1);
    }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    chunk_counts[blockIdx.x * static_cast<int64_t>(E) + e] = histogram[e];
}

// chunk_counts (chunks, E) becomes each chunk's first rank in the expert's group; counts (E) the
// totals; group_start (E) the groups' first rows (kept rows of the experts before).
__global__ void __launch_bounds__(kScanThreads)
    MoeDispatchScanKernel(int32_t* __restrict__ chunk_counts, int32_t* __restrict__ counts,
                          int32_t* __restrict__ group_start, int chunks, int E, int64_t capacity) {
  extern __shared__ int32_t kept[];  // (E)
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t total = 0;
    for (int c = 0; c < chunks; ++c) {
      const int32_t n = chunk_counts[static_cast<int64_t>(c) * E + e];
      chunk_counts[static_cast<int64_t>(c) * E + e] = total;
      total += n;
    }
    counts[e] = total;
    kept[e] = capacity > 0 && total > capacity ? static_cast<int32_t>(capacity) : total;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t start = 0;
    for (int e = 0; e < E; ++e) {
      group_start[e] = start;
      start += kept[e];
    }
  }
}

__global__ void __launch_bounds__(kChunk)
    MoeDispatchSlotsKernel(int32_t* __restrict__ slots, const int32_t* __restrict__ chunk_rank,
                           const int32_t* __restrict__ group_start,
                           const int32_t* __restrict__ experts, int64_t N, int K, int K2, int E,
                           int64_t capacity) {
  extern __shared__ uint32_t bits[];  // (E, kChunkWords): token i of the chunk chose expert e
  for (int i = threadIdx.x; i < E * kChunkWords; i += blockDim.x) bits[i] = 0;
  __syncthreads();
  const int64_t t = blockIdx.x * static_cast<int64_t>(kChunk) + threadIdx.x;
  const int word = threadIdx.x / kWarpSize;
  const uint32_t bit = 1u << (threadIdx.x % kWarpSize);
  if (t < N)
    for (int k = 0; k < K; ++k) {
      const int e = experts[t * K + k];
      if (e >= 0 && e < E) atomicOr(&bits[e * kChunkWords + word], bit);
    }
  __syncthreads();
  if (t >= N) return;
  for (int k = 0; k < K; ++k) {
    const int e = experts[t * K + k];
    if (e < 0 || e >= E) {  // no expert: dropped, not a row
      slots[t * K2 + k] = -1;
      continue;
    }
    const uint32_t* row = bits + e * kChunkWords;
    int rank = __popc(row[word] & (bit - 1));  // the chunk's earlier tokens with this expert
    for (int w = 0; w < word; ++w) rank += __popc(row[w]);
    const int64_t r = chunk_rank[blockIdx.x * static_cast<int64_t>(E) + e] + rank;
    const bool dropped = capacity > 0 && r >= capacity;
    slots[t * K2 + k] = dropped ? -1 : static_cast<int32_t>(group_start[e] + r);
  }
  if (K2 > K) slots[t * K2 + K] = static_cast<int32_t>(N * K + t);
}

}  // namespace

size_t MoeDispatchWorkspace(int64_t N, int E) {
  return (static_cast<size_t>(CeilDiv(N, kChunk)) + 1) * E * sizeof(int32_t);
}

bool MoeDispatchSupported(int E) {
  return static_cast<size_t>(E) * kChunkWords * sizeof(uint32_t) <= 48 * 1024;
}

cudaError_t LaunchMoeDispatchSlots(int32_t* slots, int32_t* counts, const int32_t* experts,
                                   int64_t N, int K, int K2, int E, int64_t capacity,
                                   void* workspace, cudaStream_t stream) {
  if (!MoeDispatchSupported(E)) return cudaErrorNotSupported;
  const int chunks = static_cast<int>(CeilDiv(N, kChunk));
  int32_t* chunk_counts = static_cast<int32_t*>(workspace);  // (chunks, E), then group_start (E)
  int32_t* group_start = chunk_counts + static_cast<int64_t>(chunks) * E;
  const size_t histogram_bytes = E * sizeof(int32_t);
  if (chunks > 0)
    MoeDispatchCountsKernel<<<chunks, kChunk, histogram_bytes, stream>>>(chunk_counts, experts, N,
                                                                          K, E);
  MoeDispatchScanKernel<<<1, kScanThreads, histogram_bytes, stream>>>(chunk_counts, counts,
                                                                      group_start, chunks, E,
                                                                      capacity);
  if (chunks > 0)
    MoeDispatchSlotsKernel<<<chunks, kChunk, E * kChunkWords * sizeof(uint32_t), stream>>>(
        slots, chunk_counts, group_start, experts, N, K, K2, E, capacity);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
