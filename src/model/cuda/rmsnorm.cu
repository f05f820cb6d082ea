// RMSNorm (Llama family) forward, optionally fused with the residual add before it, and backward,
// with f32 statistics: rstd = 1 / sqrt(mean(x^2) + eps), out = x * rstd * weight.
//
// Forward: one warp per row, two passes over the row (the sum of squares, then the output; the
// second re-reads the row from L1/L2), 16-byte loads where the row and pointers allow, scalar ones
// otherwise. With the add, each lane writes the rounded residual and reads back only what it wrote
// itself, so residual may alias a or b.
//
// Backward: a block takes a fixed range of rows (from N alone), one row at a time shared by all
// its threads: each thread owns the same columns in every row (16-byte vectors where possible), so
// it adds its columns' dweight terms into its own slots of a shared-memory row without atomics.
// Per row, sum(dout * weight * in) is added warp by warp in a fixed order. Each block then writes
// its dweight row to scratch, and one LaunchAddPartials (reduce.cu) adds the rows in a fixed order
// into dweight: deterministic, and the order depends only on (N, C).
#include <algorithm>

#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kForwardThreads = 256;
constexpr int kForwardWarps = kForwardThreads / kWarpSize;  // one warp per row

// Elements per chunk.
template <typename T, bool kVector>
constexpr int kChunk = kVector ? Vec16<T>::kCount : 1;

// out (N,C), rstd (N). With b: residual = a + b (rounded to T) first, normalised after.
template <typename T, bool kVector>
__global__ void __launch_bounds__(kForwardThreads)
    RmsNormForwardKernel(T* out, float* rstd, T* residual, const T* a, const T* b,
                         const T* __restrict__ weight, int64_t N, int C, float eps) {
  constexpr int V = kChunk<T, kVector>;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = (int64_t)blockIdx.x * kForwardWarps + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const int64_t offset = row * C;
  const T* x = a + offset;
  float sq = 0.f;
  if (b != nullptr) {
    for (int c = lane * V; c < C; c += kWarpSize * V) {
      Vec16<T> u = LoadChunk<T, kVector>(a + offset + c);
      const Vec16<T> y = LoadChunk<T, kVector>(b + offset + c);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        u.v[j] = FromFloat<T>(ToFloat(u.v[j]) + ToFloat(y.v[j]));
        const float r = ToFloat(u.v[j]);
        sq += r * r;
      }
      StoreChunk<T, kVector>(residual + offset + c, u);
    }
    x = residual + offset;
  } else {
    for (int c = lane * V; c < C; c += kWarpSize * V) {
      const Vec16<T> u = LoadChunk<T, kVector>(x + c);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float r = ToFloat(u.v[j]);
        sq += r * r;
      }
    }
  }
  const float s = rsqrtf(WarpSum(sq) / C + eps);
  for (int c = lane * V; c < C; c += kWarpSize * V) {
    const Vec16<T> u = LoadChunk<T, kVector>(x + c), w = LoadChunk<T, kVector>(weight + c);
    Vec16<T> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = FromFloat<T>(ToFloat(u.v[j]) * s * ToFloat(w.v[j]));
    StoreChunk<T, kVector>(out + offset + c, o);
  }
  if (lane == 0) rstd[row] = s;
}

// ---- backward ----
constexpr int kMaxBackwardThreads = 256;
constexpr int kMaxBackwardWarps = kMaxBackwardThreads / kWarpSize;
constexpr int kSms = 132;               // H100/H200
constexpr int kBackwardMinRows = 8;     // rows per block at least
constexpr int kResidentThreads = 2048;  // per SM
constexpr int kResidentBlocks = 32;     // per SM
// Dynamic shared memory (the block's dweight slots) at most: C up to 40960.
constexpr int kMaxBackwardSharedBytes = 160 * 1024;

// Threads per backward block for rows of C: one chunk per thread where that takes at most
// kMaxBackwardThreads, a multiple of the warp size.
template <typename T>
int BackwardThreads(int C, bool vector) {
  const int64_t chunks = vector ? C / Vec16<T>::kCount : C;
  const int64_t threads = (chunks + kWarpSize - 1) / kWarpSize * kWarpSize;
  return static_cast<int>(
      std::min<int64_t>(std::max<int64_t>(threads, kWarpSize), kMaxBackwardThreads));
}

// Blocks of the backward for N rows with `threads` per block: one wave at most, kBackwardMinRows
// rows per block at least. A function of (N, threads) alone, so the summation order is too.
int64_t BackwardRowsPerBlock(int64_t N, int threads) {
  const int64_t wave =
      static_cast<int64_t>(kSms) * std::min(kResidentBlocks, kResidentThreads / threads);
  const int64_t blocks =
      std::max<int64_t>(std::min<int64_t>((N + kBackwardMinRows - 1) / kBackwardMinRows, wave), 1);
  return std::max<int64_t>((N + blocks - 1) / blocks, 1);
}

// Floats of the backward's shared dweight slots: (chunks per thread, V, threads).
int BackwardSlots(int C, int threads, int V) {
  const int stride = threads * V;
  return (C + stride - 1) / stride * stride;
}

// Rows [blockIdx.x * rows_per_block, + rows_per_block) (clipped to N), one after the other, each
// shared by the block's threads: thread i owns the chunks (16-byte vectors or elements) k at
// columns (i + k * blockDim.x) * V. Per row, with n = in * rstd and dn = dout * weight:
// din += rstd * (dn - n * mean(dn * n)); the thread adds dout * n of element j of its chunk k
// into its own slot (k * V + j) * blockDim.x + i of dw_sums (so a warp's updates hit 32 distinct
// banks). partials (gridDim.x, C): the block's dweight row.
template <typename T, bool kVector>
__global__ void __launch_bounds__(kMaxBackwardThreads)
    RmsNormBackwardKernel(T* din, float* partials, const T* dout, const T* in,
                          const T* __restrict__ weight, const float* rstd, int64_t N, int C,
                          int64_t rows_per_block) {
  constexpr int V = kChunk<T, kVector>;
  extern __shared__ float dw_sums[];  // BackwardSlots(C, blockDim.x, V), each owned by a thread
  __shared__ float warp_sums[2][kMaxBackwardWarps];  // per row, alternating between rows
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int warps = blockDim.x / kWarpSize, stride = blockDim.x * V;
  float* slots = dw_sums + threadIdx.x;  // this thread's: slots[(k * V + j) * blockDim.x]
  for (int c = threadIdx.x * V, k = 0; c < C; c += stride, ++k)
#pragma unroll
    for (int j = 0; j < V; ++j) slots[(k * V + j) * blockDim.x] = 0.f;
  const int64_t first = (int64_t)blockIdx.x * rows_per_block;
  const int64_t end = min(N, first + rows_per_block);
  int parity = 0;
  for (int64_t row = first; row < end; ++row) {
    const int64_t offset = row * C;
    const float s = rstd[row];
    float dot = 0.f;  // sum of dout * weight * in over this thread's columns
    for (int c = threadIdx.x * V; c < C; c += stride) {
      const Vec16<T> g = LoadChunk<T, kVector>(dout + offset + c),
                     x = LoadChunk<T, kVector>(in + offset + c),
                     w = LoadChunk<T, kVector>(weight + c);
#pragma unroll
      for (int j = 0; j < V; ++j) dot += ToFloat(g.v[j]) * ToFloat(w.v[j]) * ToFloat(x.v[j]);
    }
    // The block's sum, warps added in order. A warp writes warp_sums[parity] again two rows on,
    // after the next row's barrier, which every warp passes only after reading this row's sums.
    dot = WarpSum(dot);
    if (lane == 0) warp_sums[parity][warp] = dot;
    __syncthreads();
    float total = 0.f;
    for (int i = 0; i < warps; ++i) total += warp_sums[parity][i];
    parity ^= 1;
    const float mean_dn_n = total * s / C;
    for (int c = threadIdx.x * V, k = 0; c < C; c += stride, ++k) {
      const Vec16<T> g = LoadChunk<T, kVector>(dout + offset + c),
                     x = LoadChunk<T, kVector>(in + offset + c),
                     w = LoadChunk<T, kVector>(weight + c);
      Vec16<T> d = LoadChunk<T, kVector>(din + offset + c);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float gj = ToFloat(g.v[j]), n = ToFloat(x.v[j]) * s;
        const float dn = gj * ToFloat(w.v[j]);
        d.v[j] = FromFloat<T>(ToFloat(d.v[j]) + s * (dn - n * mean_dn_n));
        slots[(k * V + j) * blockDim.x] += gj * n;
      }
      StoreChunk<T, kVector>(din + offset + c, d);
    }
  }
  float* block_partials = partials + (int64_t)blockIdx.x * C;
  for (int c = threadIdx.x * V, k = 0; c < C; c += stride, ++k)  // its own slots: no barrier
#pragma unroll
    for (int j = 0; j < V; ++j) block_partials[c + j] = slots[(k * V + j) * blockDim.x];
}

template <typename T>
void ForwardImpl(T* out, float* rstd, T* residual, const T* a, const T* b, const T* weight,
                 int64_t N, int C, float eps, cudaStream_t stream) {
  const unsigned blocks = CeilDiv(N, kForwardWarps);
  auto kernel = Vectorisable<T>(C, {out, residual, a, b, weight}) ? RmsNormForwardKernel<T, true>
                                                                  : RmsNormForwardKernel<T, false>;
  kernel<<<blocks, kForwardThreads, 0, stream>>>(out, rstd, residual, a, b, weight, N, C, eps);
}

template <typename T>
cudaError_t BackwardImpl(T* din, float* dweight, const T* dout, const T* in, const T* weight,
                         const float* rstd, int64_t N, int C, float* scratch, cudaStream_t stream) {
  const bool vector = Vectorisable<T>(C, {din, dout, in, weight});
  const int threads = BackwardThreads<T>(C, vector);
  const size_t bytes = sizeof(float) * BackwardSlots(C, threads, vector ? Vec16<T>::kCount : 1);
  if (bytes > static_cast<size_t>(kMaxBackwardSharedBytes)) return cudaErrorInvalidValue;
  const int64_t rows = BackwardRowsPerBlock(N, threads);
  const int blocks = static_cast<int>(CeilDiv(N, rows));
  auto kernel = vector ? RmsNormBackwardKernel<T, true> : RmsNormBackwardKernel<T, false>;
  // Rows over 48 KiB of f32 (C > 12288) need the opt-in (only those: a GPU with less shared
  // memory is not asked for more than the shape needs).
  if (bytes > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (err != cudaSuccess) return err;
  }
  kernel<<<blocks, threads, bytes, stream>>>(din, scratch, dout, in, weight, rstd, N, C, rows);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return LaunchAddPartials({dweight}, scratch, blocks, C, stream);
}

}  // namespace

cudaError_t LaunchRmsNormForward(DType dtype, void* out, float* rstd, void* residual, const void* a,
                                 const void* b, const void* weight, int64_t N, int C, float eps,
                                 cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  TRAINER_DISPATCH_FLOAT_TYPE(dtype, E,
                              ForwardImpl<E>(static_cast<E*>(out), rstd, static_cast<E*>(residual),
                                             static_cast<const E*>(a), static_cast<const E*>(b),
                                             static_cast<const E*>(weight), N, C, eps, stream));
  return cudaGetLastError();
}

size_t RmsNormBackwardScratchFloats(DType dtype, int64_t N, int C) {
  // Blocks with 16-byte chunks or with elements, whichever the pointers allow: the larger count.
  const bool is_bf16 = dtype == DType::kBF16;
  int64_t blocks = 0;
  for (const bool vector : {false, true}) {
    const int threads =
        is_bf16 ? BackwardThreads<bf16>(C, vector) : BackwardThreads<float>(C, vector);
    const int64_t rows = BackwardRowsPerBlock(N, threads);
    blocks = std::max<int64_t>(blocks, (N + rows - 1) / rows);
  }
  return static_cast<size_t>(blocks) * C;
}

cudaError_t LaunchRmsNormBackward(DType dtype, void* din, float* dweight, const void* dout,
                                  const void* in, const void* weight, const float* rstd, int64_t N,
                                  int C, float* scratch, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      err = BackwardImpl<E>(static_cast<E*>(din), dweight, static_cast<const E*>(dout),
                            static_cast<const E*>(in), static_cast<const E*>(weight), rstd, N, C,
                            scratch, stream));
  return err;
}

}  // namespace cuda
}  // namespace trainer
