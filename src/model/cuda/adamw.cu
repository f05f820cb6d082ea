// AdamW over one contiguous span (four elements per thread where the span is aligned, one for the
// rest): fp32 master weights and moments, decoupled weight decay, and the compute-dtype copy of
// the parameters written from the updated master.
#include "common/gradient_clip.h"
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

// Elements [first, n), one per thread and grid-stride step.
template <typename T>
__global__ void AdamWKernel(T* param, float* master, const float* grad, float* m, float* v,
                            int64_t first, int64_t n, AdamWStep step) {
  const AdamWStep s = Resolved(step);
  for (int64_t i = first + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float mi = m[i], vi = v[i];
    const float w = AdamWUpdate(grad[i], mi, vi, master[i], s);
    m[i] = mi;
    v[i] = vi;
    master[i] = w;
    param[i] = FromFloat<T>(w);
  }
}

// Elements [0, 4 * quads), four per thread and grid-stride step: 16-byte loads and stores of the
// f32 arrays (every pointer 16-byte aligned, param 8-byte aligned in bf16), so that more bytes are
// in flight per instruction. The same arithmetic per element as AdamWKernel.
template <typename T>
__global__ void AdamWQuadKernel(T* param, float* master, const float* grad, float* m, float* v,
                                int64_t quads, AdamWStep step) {
  const AdamWStep s = Resolved(step);
  struct alignas(4 * sizeof(T)) Quad {
    T x[4];
  };
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < quads;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float4 g = reinterpret_cast<const float4*>(grad)[i];
    float4 mi = reinterpret_cast<const float4*>(m)[i], vi = reinterpret_cast<const float4*>(v)[i];
    float4 w = reinterpret_cast<const float4*>(master)[i];
    w.x = AdamWUpdate(g.x, mi.x, vi.x, w.x, s);
    w.y = AdamWUpdate(g.y, mi.y, vi.y, w.y, s);
    w.z = AdamWUpdate(g.z, mi.z, vi.z, w.z, s);
    w.w = AdamWUpdate(g.w, mi.w, vi.w, w.w, s);
    reinterpret_cast<float4*>(m)[i] = mi;
    reinterpret_cast<float4*>(v)[i] = vi;
    reinterpret_cast<float4*>(master)[i] = w;
    reinterpret_cast<Quad*>(param)[i] =
        Quad{{FromFloat<T>(w.x), FromFloat<T>(w.y), FromFloat<T>(w.z), FromFloat<T>(w.w)}};
  }
}

// The four-element kernel over what its alignment allows, the one-element kernel over the rest.
template <typename T>
void AdamWImpl(T* param, float* master, const float* grad, float* m, float* v, int64_t n,
               const AdamWStep& step, cudaStream_t stream) {
  constexpr int kThreads = 256;
  auto aligned = [](const void* p, size_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  const bool quad = aligned(master, 16) && aligned(grad, 16) && aligned(m, 16) && aligned(v, 16) &&
                    aligned(param, 4 * sizeof(T));
  const int64_t quads = quad ? n / 4 : 0;
  if (quads > 0)
    AdamWQuadKernel<T><<<GridStrideBlocks(quads, kThreads), kThreads, 0, stream>>>(
        param, master, grad, m, v, quads, step);
  if (4 * quads < n)
    AdamWKernel<T><<<GridStrideBlocks(n - 4 * quads, kThreads), kThreads, 0, stream>>>(
        param, master, grad, m, v, 4 * quads, n, step);
}

}  // namespace

cudaError_t LaunchAdamW(DType dtype, void* param, float* master, const float* grad, float* m,
                        float* v, int64_t n, const AdamWStep& step, cudaStream_t stream) {
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E, AdamWImpl(static_cast<E*>(param), master, grad, m, v, n, step, stream));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
