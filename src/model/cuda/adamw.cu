// AdamW over one contiguous span (four elements per thread where the span is aligned, one for the
// rest): fp32 master weights and moments, decoupled weight decay, and the compute-dtype copy of
// the parameters written from the updated master. The master weights are f32 beside the copy, or
// the copy's bf16 and a 16-bit remainder (master_remainder.h): two accessors, one update.
#include "common/gradient_clip.h"
#include "common/master_remainder.h"
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

// One element: the moments and the master weight in place; returns the new master weight.
__device__ __forceinline__ float AdamWUpdate(float g, float& m, float& v, float w,
                                             const AdamWStep& s) {
  g *= s.grad_scale;
  m = s.beta1 * m + (1.f - s.beta1) * g;
  v = s.beta2 * v + (1.f - s.beta2) * g * g;
  const float m_hat = m / s.bias_correction1;
  const float v_hat = v / s.bias_correction2;
  return w - s.lr * (m_hat / (sqrtf(v_hat) + s.eps) + s.weight_decay * w);
}

// The step with its gradient scale taken from the device's sum of squares, where it is given.
__device__ __forceinline__ AdamWStep Resolved(AdamWStep s) {
  if (s.grad_sum_squares != nullptr)
    s.grad_scale = GradientClipScale(sqrt(*s.grad_sum_squares), s.max_grad_norm);
  return s;
}

// f32 master weights and their compute-dtype copy `param`, element i or quad i (elements
// 4i .. 4i + 3: 16-byte master loads, param 4 * sizeof(T)-byte aligned).
template <typename T>
struct F32Master {
  float* master;
  T* param;
  struct alignas(4 * sizeof(T)) Quad {
    T x[4];
  };
  __device__ float Load(int64_t i) const { return master[i]; }
  __device__ void Store(int64_t i, float w) const {
    master[i] = w;
    param[i] = FromFloat<T>(w);
  }
  __device__ float4 Load4(int64_t i) const { return reinterpret_cast<const float4*>(master)[i]; }
  __device__ void Store4(int64_t i, float4 w) const {
    reinterpret_cast<float4*>(master)[i] = w;
    reinterpret_cast<Quad*>(param)[i] =
        Quad{{FromFloat<T>(w.x), FromFloat<T>(w.y), FromFloat<T>(w.z), FromFloat<T>(w.w)}};
  }
};

// The master weights as two halves: the bf16 parameters and the remainders (quads 8-byte
// aligned).
struct HalvesMaster {
  uint16_t* param;
  uint16_t* remainder;
  __device__ float Load(int64_t i) const { return JoinMaster(param[i], remainder[i]); }
  __device__ void Store(int64_t i, float w) const {
    param[i] = MasterHigh(w);
    remainder[i] = MasterRemainder(w);
  }
  __device__ float4 Load4(int64_t i) const {
    const ushort4 h = reinterpret_cast<const ushort4*>(param)[i],
                  r = reinterpret_cast<const ushort4*>(remainder)[i];
    return make_float4(JoinMaster(h.x, r.x), JoinMaster(h.y, r.y), JoinMaster(h.z, r.z),
                       JoinMaster(h.w, r.w));
  }
  __device__ void Store4(int64_t i, float4 w) const {
    reinterpret_cast<ushort4*>(param)[i] =
        make_ushort4(MasterHigh(w.x), MasterHigh(w.y), MasterHigh(w.z), MasterHigh(w.w));
    reinterpret_cast<ushort4*>(remainder)[i] = make_ushort4(
        MasterRemainder(w.x), MasterRemainder(w.y), MasterRemainder(w.z), MasterRemainder(w.w));
  }
};

// Elements [first, n), one per thread and grid-stride step.
template <typename Master>
__global__ void AdamWKernel(Master master, const float* grad, float* m, float* v, int64_t first,
                            int64_t n, AdamWStep step) {
  const AdamWStep s = Resolved(step);
  for (int64_t i = first + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float mi = m[i], vi = v[i];
    const float w = AdamWUpdate(grad[i], mi, vi, master.Load(i), s);
    m[i] = mi;
    v[i] = vi;
    master.Store(i, w);
  }
}

// Elements [0, 4 * quads), four per thread and grid-stride step: 16-byte loads and stores of the
// f32 arrays, so that more bytes are in flight per instruction. The same arithmetic per element
// as AdamWKernel.
template <typename Master>
__global__ void AdamWQuadKernel(Master master, const float* grad, float* m, float* v, int64_t quads,
                                AdamWStep step) {
  const AdamWStep s = Resolved(step);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < quads;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float4 g = reinterpret_cast<const float4*>(grad)[i];
    float4 mi = reinterpret_cast<const float4*>(m)[i], vi = reinterpret_cast<const float4*>(v)[i];
    float4 w = master.Load4(i);
    w.x = AdamWUpdate(g.x, mi.x, vi.x, w.x, s);
    w.y = AdamWUpdate(g.y, mi.y, vi.y, w.y, s);
    w.z = AdamWUpdate(g.z, mi.z, vi.z, w.z, s);
    w.w = AdamWUpdate(g.w, mi.w, vi.w, w.w, s);
    reinterpret_cast<float4*>(m)[i] = mi;
    reinterpret_cast<float4*>(v)[i] = vi;
    master.Store4(i, w);
  }
}

bool Aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The four-element kernel over what its alignment allows (quad_aligned: the master's arrays
// allow it), the one-element kernel over the rest.
template <typename Master>
void AdamWImpl(Master master, bool quad_aligned, const float* grad, float* m, float* v, int64_t n,
               const AdamWStep& step, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const bool quad = quad_aligned && Aligned(grad, 16) && Aligned(m, 16) && Aligned(v, 16);
  const int64_t quads = quad ? n / 4 : 0;
  if (quads > 0)
    AdamWQuadKernel<Master><<<GridStrideBlocks(quads, kThreads), kThreads, 0, stream>>>(
        master, grad, m, v, quads, step);
  if (4 * quads < n)
    AdamWKernel<Master><<<GridStrideBlocks(n - 4 * quads, kThreads), kThreads, 0, stream>>>(
        master, grad, m, v, 4 * quads, n, step);
}

template <typename T>
void AdamWF32Master(T* param, float* master, const float* grad, float* m, float* v, int64_t n,
                    const AdamWStep& step, cudaStream_t stream) {
  AdamWImpl(F32Master<T>{master, param}, Aligned(master, 16) && Aligned(param, 4 * sizeof(T)), grad,
            m, v, n, step, stream);
}

__global__ void MasterHalvesKernel(float* master, uint16_t* param, uint16_t* remainder, int64_t n,
                                   bool join) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    if (join) {
      master[i] = JoinMaster(param[i], remainder[i]);
    } else {
      const float w = master[i];
      param[i] = MasterHigh(w);
      remainder[i] = MasterRemainder(w);
    }
  }
}

}  // namespace

cudaError_t LaunchAdamW(DType dtype, void* param, float* master, const float* grad, float* m,
                        float* v, int64_t n, const AdamWStep& step, cudaStream_t stream) {
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E, AdamWF32Master(static_cast<E*>(param), master, grad, m, v, n, step, stream));
  return cudaGetLastError();
}

cudaError_t LaunchAdamWHalves(uint16_t* param, uint16_t* remainder, const float* grad, float* m,
                              float* v, int64_t n, const AdamWStep& step, cudaStream_t stream) {
  AdamWImpl(HalvesMaster{param, remainder}, Aligned(param, 8) && Aligned(remainder, 8), grad, m, v,
            n, step, stream);
  return cudaGetLastError();
}

cudaError_t LaunchMasterHalves(float* master, uint16_t* param, uint16_t* remainder, int64_t n,
                               bool join, cudaStream_t stream) {
  constexpr int kThreads = 256;
  MasterHalvesKernel<<<GridStrideBlocks(n, kThreads), kThreads, 0, stream>>>(master, param,
                                                                             remainder, n, join);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
