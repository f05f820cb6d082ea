// Rotary position embedding in Hugging Face's rotate-half layout, in place on the q and k heads of
// qkv (N, (NH+2*NKV)*HD): for row r (position t = r % T) and i < HD/2, with c = cos_sin[0][t][i]
// and s = cos_sin[1][t][i], (x_i, x_{i+HD/2}) <- (x_i c - x_{i+HD/2} s, x_{i+HD/2} c + x_i s),
// computed in f32 and rounded once. The inverse (the backward pass: the transposed rotation)
// negates s. A block takes rows in a grid-stride loop; its threads take the row's (head, i)
// pairs, consecutive threads consecutive i, so loads of a half-head are coalesced; two pairs per
// thread (bf16x2 / float2 loads) where HD/2 is even and the rows allow. Under Data.packing:
// documents the position is t - doc_starts[r], counted from the row's document start.
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kThreads = 256;

// kPairs adjacent elements of T as one load.
template <typename T, int kPairs>
struct alignas(sizeof(T) * kPairs) Pairs {
  T v[kPairs];
};

// qkv rows (N, slots * HD), slots = NH + 2 * NKV; the first `heads` = NH + NKV heads of a row are
// rotated. cos_sin (2, P, half). sign: 1 forward, -1 inverse. kPairs: adjacent i per thread.
template <typename T, int kPairs>
__global__ void __launch_bounds__(kThreads)
    RopeKernel(T* qkv, const float* __restrict__ cos_sin, int64_t N, int T_, int slots, int heads,
               int half, int P, float sign, const int32_t* __restrict__ doc_starts) {
  const int groups = half / kPairs;  // per head
  const int per_row = heads * groups;
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const int t = static_cast<int>(row % T_) - (doc_starts ? doc_starts[row] : 0);
    const float* cos_t = cos_sin + (int64_t)t * half;
    const float* sin_t = cos_sin + ((int64_t)P + t) * half;
    T* x = qkv + row * slots * 2 * half;
    for (int q = threadIdx.x; q < per_row; q += blockDim.x) {
      const int head = q / groups, i = (q % groups) * kPairs;
      T* lo = x + head * 2 * half + i;
      T* hi = lo + half;
      Pairs<T, kPairs> a = *reinterpret_cast<const Pairs<T, kPairs>*>(lo);
      Pairs<T, kPairs> b = *reinterpret_cast<const Pairs<T, kPairs>*>(hi);
#pragma unroll
      for (int k = 0; k < kPairs; ++k) {
        const float c = cos_t[i + k], s = sign * sin_t[i + k];
        const float x1 = ToFloat(a.v[k]), x2 = ToFloat(b.v[k]);
        a.v[k] = FromFloat<T>(x1 * c - x2 * s);
        b.v[k] = FromFloat<T>(x2 * c + x1 * s);
      }
      *reinterpret_cast<Pairs<T, kPairs>*>(lo) = a;
      *reinterpret_cast<Pairs<T, kPairs>*>(hi) = b;
    }
  }
}

template <typename T>
void RopeImpl(T* qkv, const float* cos_sin, int64_t N, int T_, int NH, int NKV, int HD, int P,
              bool inverse, cudaStream_t stream, const int32_t* doc_starts) {
  const int half = HD / 2, slots = NH + 2 * NKV, heads = NH + NKV;
  const float sign = inverse ? -1.f : 1.f;
  const int64_t max_blocks = 132 * 16;  // a few waves; the row loop covers the rest
  const unsigned blocks = static_cast<unsigned>(N < max_blocks ? N : max_blocks);
  // Pairs of adjacent i where both halves' pairs are aligned: half even, qkv aligned to two T.
  if (half % 2 == 0 && reinterpret_cast<uintptr_t>(qkv) % (2 * sizeof(T)) == 0)
    RopeKernel<T, 2>
        <<<blocks, kThreads, 0, stream>>>(qkv, cos_sin, N, T_, slots, heads, half, P, sign,
                                          doc_starts);
  else
    RopeKernel<T, 1>
        <<<blocks, kThreads, 0, stream>>>(qkv, cos_sin, N, T_, slots, heads, half, P, sign,
                                          doc_starts);
}

}  // namespace

cudaError_t LaunchRope(DType dtype, void* qkv, const float* cos_sin, int64_t N, int T, int NH,
                       int NKV, int HD, int P, bool inverse, cudaStream_t stream,
                       const int32_t* doc_starts) {
  if (N == 0) return cudaSuccess;
  if (HD % 2 != 0 || T <= 0 || P < T) return cudaErrorInvalidValue;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      RopeImpl<E>(static_cast<E*>(qkv), cos_sin, N, T, NH, NKV, HD, P, inverse, stream, doc_starts));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
