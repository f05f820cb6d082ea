// Device-side helpers shared by the CUDA kernels: element conversion between f32 and bf16, warp
// and block reductions, and launch-size arithmetic. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "common/tensor.h"

namespace trainer {
namespace cuda {

using bf16 = __nv_bfloat16;

// The DType of an element type (float or bf16).
template <typename T>
constexpr DType kDTypeOf = std::is_same<T, float>::value ? DType::kF32 : DType::kBF16;

constexpr int kWarpSize = 32;

__device__ __forceinline__ float ToFloat(float x) {
  return x;
}
__device__ __forceinline__ float ToFloat(bf16 x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 FromFloat<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float Sigmoid(float x) {
  return 1.f / (1.f + expf(-x));
}
// SwiGLU's value silu(gate) * up, silu(x) = x sigmoid(x): one expression for every kernel that
// computes it (swiglu.cu, the grouped GEMM's epilogue in sm90/), so that they round alike.
__device__ __forceinline__ float SwiGluOf(float gate, float up) {
  return gate * Sigmoid(gate) * up;
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum (or max) over the whole block; every thread gets the result. `scratch` holds 32 floats.
// Must be called by all threads of the block (it synchronises).
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int num_warps = (blockDim.x + kWarpSize - 1) / kWarpSize;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < num_warps ? scratch[lane] : 0.f;
  return WarpSum(v);
}
__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int num_warps = (blockDim.x + kWarpSize - 1) / kWarpSize;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < num_warps ? scratch[lane] : -INFINITY;
  return WarpMax(v);
}

// tanh-approximated GELU and its derivative (GPT-2's), in f32.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;
__device__ __forceinline__ float Gelu(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.f + tanhf(u));
}
__device__ __forceinline__ float GeluDerivative(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  const float t = tanhf(u);
  const float du = kGeluScale * (1.f + 3.f * kGeluCubic * x * x);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * du;
}

inline unsigned CeilDiv(int64_t a, int64_t b) {
  return static_cast<unsigned>((a + b - 1) / b);
}

// Grid size for grid-stride loops over n elements: enough blocks to fill the GPU, no more.
inline unsigned GridStrideBlocks(int64_t n, int threads) {
  const int64_t max_blocks = 132 * 16;  // a few waves on the largest GPUs; loops cover the rest
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks));
}

}  // namespace cuda
}  // namespace trainer

// Runs `...` with `T` bound to the element type of a compute tensor (f32 or bf16); other dtypes
// make the enclosing launcher return cudaErrorInvalidValue.
// 16 bytes of T (8 bf16 or 4 f32), for vectorised loads and stores.
template <typename T>
struct Vec16 {
  static constexpr int kCount = 16 / sizeof(T);
  T v[kCount];
};
template <typename T>
__device__ __forceinline__ Vec16<T> Load16(const T* p) {
  Vec16<T> out;
  *reinterpret_cast<int4*>(out.v) = *reinterpret_cast<const int4*>(p);
  return out;
}
template <typename T>
__device__ __forceinline__ void Store16(T* p, const Vec16<T>& x) {
  *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(x.v);
}
// A 16-byte vector (kVector) or one element in v[0] (otherwise) at p: for kernels with a vectorised
// path and a scalar one for any alignment.
template <typename T, bool kVector>
__device__ __forceinline__ Vec16<T> LoadChunk(const T* p) {
  if constexpr (kVector) {
    return Load16(p);
  } else {
    Vec16<T> x;
    x.v[0] = *p;
    return x;
  }
}
template <typename T, bool kVector>
__device__ __forceinline__ void StoreChunk(T* p, const Vec16<T>& x) {
  if constexpr (kVector)
    Store16(p, x);
  else
    *p = x.v[0];
}
// True when every pointer is 16-byte aligned and n fills whole Vec16s.
template <typename T>
inline bool Vectorisable(int64_t n, std::initializer_list<const void*> pointers) {
  if (n % Vec16<T>::kCount != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

#define TRAINER_DISPATCH_FLOAT_TYPE(dtype, T, ...) \
  switch (dtype) {                                 \
    case ::trainer::DType::kF32: {                 \
      using T = float;                             \
      __VA_ARGS__;                                 \
      break;                                       \
    }                                              \
    case ::trainer::DType::kBF16: {                \
      using T = ::trainer::cuda::bf16;             \
      __VA_ARGS__;                                 \
      break;                                       \
    }                                              \
    default:                                       \
      return cudaErrorInvalidValue;                \
  }
