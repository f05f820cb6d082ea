// Mixture of experts on the GPU, the twins of src/model/cpu/moe.cpp (same order of operations,
// so that ties and dropped slots come out the same):
// - the router: one thread per token over its E logits (f32): the scores (softmax with the
//   logsumexp summed in f64 as on the CPU, or sigmoid), the top K by the scores or the logits
//   (the expert bias added to the keys only; equal keys: the lower expert index first), the K
//   chosen in ascending order, their weights, the shared expert's sigmoid gate;
// - its backward: one thread per token, the row of dlogits doubling as the scores' gradient;
// - scatter / gather of rows by slot (N,K') (-1: dropped): a block per token, threads over C,
//   the gather summing each token's K' rows in ascending k in f32 and rounding once (no atomics,
//   deterministic);
// - slot dots: a warp per (token, slot), a fixed shuffle tree (deterministic);
// - the router's losses: the load-balancing loss's per-expert sums of the scores (f64) and
//   counts of the choices by blocks of 32 experts x a chunk of a group's tokens, each block
//   summing its rows in a fixed order, then one block adding the chunks in order, writing the
//   coefficients and summing the aux loss and the z-loss (sum of lse^2, f64) by a fixed tree: no
//   atomics, the same bits on every run.
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kRouterThreads = 128;
constexpr int kRowThreads = 256;
constexpr int kDotWarps = 8;
constexpr int kLossColumns = 32, kLossRows = 8;  // the aux loss's partial sums: experts x rows
constexpr int kLossThreads = 256;                // its final block

// The logsumexp of z (E), summed in f64 as cpu::Softmax does.
__device__ float LogSumExp(const float* z, int E) {
  float max = z[0];
  for (int e = 1; e < E; ++e) max = fmaxf(max, z[e]);
  double sum = 0;
  for (int e = 0; e < E; ++e) sum += exp(static_cast<double>(z[e] - max));
  return max + static_cast<float>(log(sum));
}

// The key the choice compares for expert e; NaN as -infinity, so that the order stays total (a
// row of NaN scores still chooses K distinct experts, the lowest indices, as the CPU does).
__device__ __forceinline__ float ChoiceKey(const float* by, const float* bias, int e) {
  const float key = bias != nullptr ? by[e] + bias[e] : by[e];
  return isnan(key) ? -INFINITY : key;
}

// a before b in the choice's order: the larger key, equal keys the lower index.
__device__ __forceinline__ bool Before(float ka, int a, float kb, int b) {
  return ka > kb || (ka == kb && a < b);
}

__global__ void __launch_bounds__(kRouterThreads)
    MoeRouterForwardKernel(float* __restrict__ weights, int32_t* __restrict__ experts,
                           float* __restrict__ probs, float* __restrict__ lse,
                           const float* __restrict__ logits, const float* __restrict__ bias,
                           MoeRouterDims d) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= d.N) return;
  const int E = d.E, K = d.K, E2 = E + d.shared_gate, K2 = K + d.shared_gate;
  const float* z = logits + t * E2;
  float* p = probs + t * E;
  float* w = weights + t * K2;
  int32_t* chosen = experts + t * K;
  const float l = LogSumExp(z, E);
  lse[t] = l;
  for (int e = 0; e < E; ++e) p[e] = d.sigmoid ? Sigmoid(z[e]) : expf(z[e] - l);
  const bool by_logits = !d.sigmoid && !d.pre_softmax;
  const float* by = by_logits ? z : p;
  // The k-th choice: the first in the order among those after the (k-1)-th.
  int prev = -1;
  float prev_key = 0.f;
  for (int k = 0; k < K; ++k) {
    int best = -1;
    float best_key = 0.f;
    for (int e = 0; e < E; ++e) {
      const float key = ChoiceKey(by, bias, e);
      if (prev >= 0 && !Before(prev_key, prev, key, e)) continue;
      if (best < 0 || Before(key, e, best_key, best)) best = e, best_key = key;
    }
    chosen[k] = best;
    prev = best, prev_key = best_key;
  }
  for (int i = 1; i < K; ++i)  // insertion sort: K is small
    for (int j = i; j > 0 && chosen[j - 1] > chosen[j]; --j) {
      const int32_t tmp = chosen[j - 1];
      chosen[j - 1] = chosen[j];
      chosen[j] = tmp;
    }
  if (by_logits) {  // softmax over the chosen logits (Mixtral)
    float max = z[chosen[0]];
    for (int k = 1; k < K; ++k) max = fmaxf(max, z[chosen[k]]);
    float sum = 0.f;
    for (int k = 0; k < K; ++k) sum += (w[k] = expf(z[chosen[k]] - max));
    for (int k = 0; k < K; ++k) w[k] /= sum;
  } else {
    float sum = 0.f;
    for (int k = 0; k < K; ++k) sum += (w[k] = p[chosen[k]]);
    if (d.norm_topk_prob)
      for (int k = 0; k < K; ++k) w[k] /= sum;
  }
  if (d.shared_gate) w[K] = Sigmoid(z[E]);
}

__global__ void __launch_bounds__(kRouterThreads)
    MoeRouterBackwardKernel(float* __restrict__ dlogits, const float* __restrict__ dweights,
                            const float* __restrict__ logits, const float* __restrict__ probs,
                            const int32_t* __restrict__ experts, const float* __restrict__ weights,
                            const float* __restrict__ aux_coef, int64_t rows_per_group,
                            float z_scale, MoeRouterDims d) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= d.N) return;
  const int E = d.E, K = d.K, E2 = E + d.shared_gate, K2 = K + d.shared_gate;
  const float* z = logits + t * E2;
  const float* p = probs + t * E;
  const float* w = weights + t * K2;
  const float* dw = dweights + t * K2;
  const int32_t* chosen = experts + t * K;
  float* dz = dlogits + t * E2;
  // dp (the scores' gradient) lives in dz until the scores' backward overwrites it.
  float* dp = dz;
  for (int e = 0; e < E; ++e) dp[e] = 0.f;
  float dot = 0.f, chosen_sum = 0.f;
  for (int k = 0; k < K; ++k) {
    dot += dw[k] * w[k];
    chosen_sum += p[chosen[k]];
  }
  const bool by_logits = !d.sigmoid && !d.pre_softmax;
  if (!by_logits) {
    const float S = d.norm_topk_prob ? chosen_sum : 1.f;
    for (int k = 0; k < K; ++k) dp[chosen[k]] += (dw[k] - (d.norm_topk_prob ? dot : 0.f)) / S;
  }
  if (aux_coef != nullptr) {
    const float* a = aux_coef + (t / rows_per_group) * E;
    if (!d.sigmoid) {
      for (int e = 0; e < E; ++e) dp[e] += a[e];
    } else {
      float total = 0.f, weighted = 0.f;
      for (int e = 0; e < E; ++e) total += p[e];
      for (int e = 0; e < E; ++e) weighted += a[e] * p[e] / total;
      for (int e = 0; e < E; ++e) dp[e] += (a[e] - weighted) / total;
    }
  }
  if (!d.sigmoid) {  // softmax: dz = p (dp - sum dp p)
    float sum = 0.f;
    for (int e = 0; e < E; ++e) sum += dp[e] * p[e];
    for (int e = 0; e < E; ++e) dz[e] = p[e] * (dp[e] - sum);
  } else {
    for (int e = 0; e < E; ++e) dz[e] = dp[e] * p[e] * (1.f - p[e]);
  }
  if (by_logits)  // Mixtral: through the softmax over the chosen logits
    for (int k = 0; k < K; ++k) dz[chosen[k]] += w[k] * (dw[k] - dot);
  if (z_scale != 0.f) {  // z_scale * lse^2: dz += z_scale * 2 lse softmax(z)
    const float l = LogSumExp(z, E);
    for (int e = 0; e < E; ++e) dz[e] += z_scale * 2.f * l * expf(z[e] - l);
  }
  if (d.shared_gate) dz[E] = dw[K] * w[K] * (1.f - w[K]);
}

// Blocks for N rows: a few waves, the row loop covers the rest.
unsigned RowBlocks(int64_t N) {
  const int64_t max_blocks = 132 * 16;
  return static_cast<unsigned>(N < max_blocks ? N : max_blocks);
}

// The row kernels below take a token a block and 16 bytes a thread (kVector, where C and the
// pointers allow; one element otherwise), with the same arithmetic per element either way.

// out[slots[t][k]] = [w[t][k] *] in[t]: each chunk of in's row read once, written K' times.
template <typename T, bool kVector>
__global__ void __launch_bounds__(kRowThreads)
    MoeScatterRowsKernel(T* __restrict__ out, const T* __restrict__ in,
                         const int32_t* __restrict__ slots, const float* __restrict__ w, int64_t N,
                         int K2, int64_t C) {
  constexpr int V = kVector ? Vec16<T>::kCount : 1;
  for (int64_t t = blockIdx.x; t < N; t += gridDim.x) {
    const T* src = in + t * C;
    for (int64_t c = threadIdx.x * V; c < C; c += blockDim.x * V) {
      const Vec16<T> x = LoadChunk<T, kVector>(src + c);
      for (int k = 0; k < K2; ++k) {
        const int32_t slot = slots[t * K2 + k];
        if (slot < 0) continue;
        const float scale = w != nullptr ? w[t * K2 + k] : 1.f;
        Vec16<T> y;
#pragma unroll
        for (int j = 0; j < V; ++j) y.v[j] = FromFloat<T>(scale * ToFloat(x.v[j]));
        StoreChunk<T, kVector>(out + slot * C + c, y);
      }
    }
  }
}

// out[t] = [out[t] +] sum over k ascending of [w[t][k] *] in[slots[t][k]], in f32, rounded once.
// The rows are loaded kGatherBatch at a time before any is added, so that their loads overlap.
constexpr int kGatherBatch = 4;
template <typename T, bool kVector>
__global__ void __launch_bounds__(kRowThreads)
    MoeGatherRowsKernel(T* __restrict__ out, const T* __restrict__ in,
                        const int32_t* __restrict__ slots, const float* __restrict__ w, int64_t N,
                        int K2, int64_t C, bool accumulate) {
  constexpr int V = kVector ? Vec16<T>::kCount : 1;
  for (int64_t t = blockIdx.x; t < N; t += gridDim.x) {
    T* dst = out + t * C;
    for (int64_t c = threadIdx.x * V; c < C; c += blockDim.x * V) {
      float acc[V];
      const Vec16<T> old = accumulate ? LoadChunk<T, kVector>(dst + c) : Vec16<T>{};
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] = accumulate ? ToFloat(old.v[j]) : 0.f;
      for (int k0 = 0; k0 < K2; k0 += kGatherBatch) {
        Vec16<T> x[kGatherBatch];
        int32_t slot[kGatherBatch];
#pragma unroll
        for (int i = 0; i < kGatherBatch; ++i) {
          slot[i] = k0 + i < K2 ? slots[t * K2 + k0 + i] : -1;
          if (slot[i] >= 0) x[i] = LoadChunk<T, kVector>(in + slot[i] * C + c);
        }
#pragma unroll
        for (int i = 0; i < kGatherBatch; ++i) {
          if (slot[i] < 0) continue;
          const float scale = w != nullptr ? w[t * K2 + k0 + i] : 1.f;
#pragma unroll
          for (int j = 0; j < V; ++j) acc[j] += scale * ToFloat(x[i].v[j]);
        }
      }
      Vec16<T> y;
#pragma unroll
      for (int j = 0; j < V; ++j) y.v[j] = FromFloat<T>(acc[j]);
      StoreChunk<T, kVector>(dst + c, y);
    }
  }
}

// dw[t][k] = dout[t] . in[slots[t][k]] (0 where the slot is < 0): a warp per (t, k), its lanes
// over 16-byte chunks (kVector) or elements, then the warp's sum.
template <typename T, bool kVector>
__global__ void __launch_bounds__(kDotWarps* kWarpSize)
    MoeSlotDotsKernel(float* __restrict__ dw, const T* __restrict__ dout, const T* __restrict__ in,
                      const int32_t* __restrict__ slots, int64_t N, int K2, int64_t C) {
  constexpr int V = kVector ? Vec16<T>::kCount : 1;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t pair = blockIdx.x * static_cast<int64_t>(kDotWarps) + threadIdx.x / kWarpSize;
  if (pair >= N * K2) return;
  const int64_t t = pair / K2;
  const int32_t slot = slots[pair];
  float sum = 0.f;
  if (slot >= 0)
    for (int64_t c = lane * V; c < C; c += kWarpSize * V) {
      const Vec16<T> a = LoadChunk<T, kVector>(dout + t * C + c),
                     b = LoadChunk<T, kVector>(in + slot * C + c);
#pragma unroll
      for (int j = 0; j < V; ++j) sum += ToFloat(a.v[j]) * ToFloat(b.v[j]);
    }
  sum = WarpSum(sum);
  if (lane == 0) dw[pair] = sum;
}

// totals (N) f64: each token's sum of its E sigmoid scores, in expert order (as the CPU).
__global__ void __launch_bounds__(kRouterThreads)
    MoeScoreTotalsKernel(double* __restrict__ totals, const float* __restrict__ probs, int64_t N,
                         int E) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= N) return;
  double total = 0;
  for (int e = 0; e < E; ++e) total += probs[t * E + e];
  totals[t] = total;
}

// Block (experts blockIdx.x * 32 + x, rows y) over chunk blockIdx.y of group blockIdx.z: each
// expert's sum of (normalised) scores and count of choices over the chunk's rows, the block's 8
// row sums added in order. Partials (G, chunks, E).
__global__ void __launch_bounds__(kLossColumns* kLossRows)
    MoeAuxPartialsKernel(double* __restrict__ score_part, int32_t* __restrict__ count_part,
                         const int32_t* __restrict__ experts, const float* __restrict__ probs,
                         const double* __restrict__ totals, int64_t n, int64_t chunk_rows, int E,
                         int K) {
  const int e = blockIdx.x * kLossColumns + threadIdx.x;
  const int64_t g = blockIdx.z, chunk = blockIdx.y;
  const int64_t begin = g * n + chunk * chunk_rows;
  const int64_t end = begin + chunk_rows < (g + 1) * n ? begin + chunk_rows : (g + 1) * n;
  double score = 0;
  int32_t count = 0;
  if (e < E)
    for (int64_t t = begin + threadIdx.y; t < end; t += kLossRows) {
      const double total = totals != nullptr ? totals[t] : 1.0;
      score += probs[t * E + e] / total;
      for (int k = 0; k < K; ++k) count += experts[t * K + k] == e;
    }
  __shared__ double scores[kLossRows][kLossColumns];
  __shared__ int32_t counts[kLossRows][kLossColumns];
  scores[threadIdx.y][threadIdx.x] = score;
  counts[threadIdx.y][threadIdx.x] = count;
  __syncthreads();
  if (threadIdx.y != 0 || e >= E) return;
  for (int y = 1; y < kLossRows; ++y) {
    score += scores[y][threadIdx.x];
    count += counts[y][threadIdx.x];
  }
  const int64_t at = (g * gridDim.y + chunk) * E + e;
  score_part[at] = score;
  count_part[at] = count;
}

// One block: coef (G,E) and the aux loss from the partials (chunks in order), the z-loss from
// lse (N); each thread's sums, then a fixed tree. losses = {aux, z}.
__global__ void __launch_bounds__(kLossThreads)
    MoeLossesFinishKernel(float* __restrict__ coef, double* __restrict__ losses,
                          const double* __restrict__ score_part,
                          const int32_t* __restrict__ count_part, const float* __restrict__ lse,
                          MoeLossDims d, int chunks, double c, double z_per_row, float loss_scale) {
  __shared__ double aux_sums[kLossThreads], z_sums[kLossThreads];
  double aux = 0, z = 0;
  if (coef != nullptr)
    for (int64_t i = threadIdx.x; i < d.G * d.E; i += kLossThreads) {
      const int64_t g = i / d.E, e = i % d.E;
      double score = 0;
      int64_t count = 0;
      for (int ch = 0; ch < chunks; ++ch) {
        score += score_part[(g * chunks + ch) * d.E + e];
        count += count_part[(g * chunks + ch) * d.E + e];
      }
      aux += c * score * static_cast<double>(count) / d.G;
      coef[i] = static_cast<float>(loss_scale * c * static_cast<double>(count) / d.G);
    }
  if (z_per_row != 0)
    for (int64_t t = threadIdx.x; t < d.N; t += kLossThreads)
      z += static_cast<double>(lse[t]) * lse[t];
  aux_sums[threadIdx.x] = aux;
  z_sums[threadIdx.x] = z;
  __syncthreads();
  for (int stride = kLossThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      aux_sums[threadIdx.x] += aux_sums[threadIdx.x + stride];
      z_sums[threadIdx.x] += z_sums[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    losses[0] = aux_sums[0];
    losses[1] = z_sums[0] * z_per_row;
  }
}

// Chunks of each group's n rows: up to 8 blocks per SM of 132, each of at least 256 rows (32 a
// thread), so that the final block adds few partials per expert.
int64_t LossChunks(const MoeLossDims& d) {
  const int64_t n = d.N / d.G, blocks = CeilDiv(d.E, kLossColumns) * d.G;
  const int64_t want = CeilDiv(132 * 8, blocks), most = CeilDiv(n, 256);
  return want < 1 ? 1 : want < most ? want : most;
}

size_t Align256(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace

size_t MoeRouterLossesWorkspace(const MoeLossDims& d, bool aux) {
  if (!aux) return 0;
  const size_t parts = static_cast<size_t>(d.G * LossChunks(d) * d.E);
  return Align256(d.sigmoid ? d.N * sizeof(double) : 0) + Align256(parts * sizeof(double)) +
         parts * sizeof(int32_t);
}

cudaError_t LaunchMoeRouterLosses(float* aux_coef, double* losses, const int32_t* experts,
                                  const float* probs, const float* lse, const MoeLossDims& d,
                                  double aux, double z, float loss_scale, void* workspace,
                                  cudaStream_t stream) {
  const int64_t chunks = LossChunks(d), n = d.N / d.G;
  double c = 0;
  const double* score_part = nullptr;
  const int32_t* count_part = nullptr;
  if (aux_coef != nullptr) {
    char* at = static_cast<char*>(workspace);
    double* totals = nullptr;
    if (d.sigmoid) {
      totals = reinterpret_cast<double*>(at);
      at += Align256(d.N * sizeof(double));
      MoeScoreTotalsKernel<<<CeilDiv(d.N, kRouterThreads), kRouterThreads, 0, stream>>>(
          totals, probs, d.N, d.E);
    }
    double* scores = reinterpret_cast<double*>(at);
    int32_t* counts =
        reinterpret_cast<int32_t*>(at + Align256(d.G * chunks * d.E * sizeof(double)));
    const dim3 grid(static_cast<unsigned>(CeilDiv(d.E, kLossColumns)),
                    static_cast<unsigned>(chunks), static_cast<unsigned>(d.G));
    MoeAuxPartialsKernel<<<grid, dim3(kLossColumns, kLossRows), 0, stream>>>(
        scores, counts, experts, probs, totals, n, CeilDiv(n, chunks), d.E, d.K);
    c = aux * d.E / (static_cast<double>(d.K) * n * n);
    score_part = scores;
    count_part = counts;
  }
  MoeLossesFinishKernel<<<1, kLossThreads, 0, stream>>>(aux_coef, losses, score_part, count_part,
                                                        lse, d, static_cast<int>(chunks), c,
                                                        z / d.N, loss_scale);
  return cudaGetLastError();
}

cudaError_t LaunchMoeRouterForward(float* weights, int32_t* experts, float* probs, float* lse,
                                   const float* logits, const float* bias, const MoeRouterDims& d,
                                   cudaStream_t stream) {
  if (d.N == 0) return cudaSuccess;
  MoeRouterForwardKernel<<<CeilDiv(d.N, kRouterThreads), kRouterThreads, 0, stream>>>(
      weights, experts, probs, lse, logits, bias, d);
  return cudaGetLastError();
}

cudaError_t LaunchMoeRouterBackward(float* dlogits, const float* dweights, const float* logits,
                                    const float* probs, const int32_t* experts,
                                    const float* weights, const float* aux_coef, int64_t groups,
                                    float z_scale, const MoeRouterDims& d, cudaStream_t stream) {
  if (d.N == 0) return cudaSuccess;
  const int64_t rows_per_group = groups > 0 ? d.N / groups : d.N;
  MoeRouterBackwardKernel<<<CeilDiv(d.N, kRouterThreads), kRouterThreads, 0, stream>>>(
      dlogits, dweights, logits, probs, experts, weights, aux_coef, rows_per_group, z_scale, d);
  return cudaGetLastError();
}

namespace {

// The row kernels' launches: the vectorised kernel where C and the pointers allow.
template <typename T>
void ScatterRows(T* out, const T* in, const int32_t* slots, const float* w, int64_t N, int K2,
                 int64_t C, cudaStream_t stream) {
  auto kernel = Vectorisable<T>(C, {out, in}) ? MoeScatterRowsKernel<T, true>
                                              : MoeScatterRowsKernel<T, false>;
  kernel<<<RowBlocks(N), kRowThreads, 0, stream>>>(out, in, slots, w, N, K2, C);
}

template <typename T>
void GatherRows(T* out, const T* in, const int32_t* slots, const float* w, int64_t N, int K2,
                int64_t C, bool accumulate, cudaStream_t stream) {
  auto kernel =
      Vectorisable<T>(C, {out, in}) ? MoeGatherRowsKernel<T, true> : MoeGatherRowsKernel<T, false>;
  kernel<<<RowBlocks(N), kRowThreads, 0, stream>>>(out, in, slots, w, N, K2, C, accumulate);
}

template <typename T>
void SlotDots(float* dw, const T* dout, const T* in, const int32_t* slots, int64_t N, int K2,
              int64_t C, cudaStream_t stream) {
  auto kernel =
      Vectorisable<T>(C, {dout, in}) ? MoeSlotDotsKernel<T, true> : MoeSlotDotsKernel<T, false>;
  kernel<<<CeilDiv(N * K2, kDotWarps), kDotWarps * kWarpSize, 0, stream>>>(dw, dout, in, slots, N,
                                                                           K2, C);
}

}  // namespace

cudaError_t LaunchMoeScatterRows(DType dtype, void* out, const void* in, const int32_t* slots,
                                 const float* w, int64_t N, int K2, int64_t C,
                                 cudaStream_t stream) {
  if (N == 0 || C == 0) return cudaSuccess;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, T,
      ScatterRows(static_cast<T*>(out), static_cast<const T*>(in), slots, w, N, K2, C, stream));
  return cudaGetLastError();
}

cudaError_t LaunchMoeGatherRows(DType dtype, void* out, const void* in, const int32_t* slots,
                                const float* w, int64_t N, int K2, int64_t C, bool accumulate,
                                cudaStream_t stream) {
  if (N == 0 || C == 0) return cudaSuccess;
  TRAINER_DISPATCH_FLOAT_TYPE(dtype, T,
                              GatherRows(static_cast<T*>(out), static_cast<const T*>(in), slots, w,
                                         N, K2, C, accumulate, stream));
  return cudaGetLastError();
}

cudaError_t LaunchMoeSlotDots(DType dtype, float* dw, const void* dout, const void* in,
                              const int32_t* slots, int64_t N, int K2, int64_t C,
                              cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  TRAINER_DISPATCH_FLOAT_TYPE(dtype, T,
                              SlotDots(dw, static_cast<const T*>(dout), static_cast<const T*>(in),
                                       slots, N, K2, C, stream));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
