// AdamW over one contiguous span in one launch: fp32 master weights and moments, decoupled weight
// decay, and the compute-dtype copy of the parameters written from the updated master.
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

template <typename T>
__global__ void AdamWKernel(T* param, float* master, const float* grad, float* m, float* v,
                            int64_t n, AdamWStep s) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float g = grad[i] * s.grad_scale;
    const float m_new = s.beta1 * m[i] + (1.f - s.beta1) * g;
    const float v_new = s.beta2 * v[i] + (1.f - s.beta2) * g * g;
    const float m_hat = m_new / s.bias_correction1;
    const float v_hat = v_new / s.bias_correction2;
    float w = master[i];
    w -= s.lr * (m_hat / (sqrtf(v_hat) + s.eps) + s.weight_decay * w);
    m[i] = m_new;
    v[i] = v_new;
    master[i] = w;
    param[i] = FromFloat<T>(w);
  }
}

}  // namespace

cudaError_t LaunchAdamW(DType dtype, void* param, float* master, const float* grad, float* m,
                        float* v, int64_t n, const AdamWStep& step, cudaStream_t stream) {
  constexpr int kThreads = 256;
  TRAINER_DISPATCH_FLOAT_TYPE(dtype, E,
                              AdamWKernel<E>
                              <<<GridStrideBlocks(n, kThreads), kThreads, 0, stream>>>(
                                  static_cast<E*>(param), master, grad, m, v, n, step));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
