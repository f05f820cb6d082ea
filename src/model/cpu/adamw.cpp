// The optimizer kernels: one AdamW step (decoupled weight decay, bias correction, gradient
// pre-scaling for clipping) over a contiguous span, and the sum of squares used by the gradient
// norm; with the CpuBackend AdamW and SumInto ops.
#include <algorithm>
#include <cmath>
#include <utility>

#include "common/gradient_clip.h"
#include "common/log.h"
#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"

namespace trainer {
namespace cpu {

void adamw_update(float* param, float* master, const float* grad, float* m, float* v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int step,
                  float grad_scale) {
  const float bias_correction1 = static_cast<float>(1.0 - std::pow(double{beta1}, step));
  const float bias_correction2 = static_cast<float>(1.0 - std::pow(double{beta2}, step));
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.f - beta1) * g;
    const float vi = beta2 * v[i] + (1.f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / bias_correction1;
    const float v_hat = vi / bias_correction2;
    const float w = master[i] - lr * (m_hat / (std::sqrt(v_hat) + eps) + weight_decay * master[i]);
    master[i] = w;
    param[i] = w;  // param may be master
  }
}

double sum_squares(const float* x, size_t n) {
  // A fixed number of chunks (not one per thread), summed in order: the same result for any
  // number of threads.
  constexpr size_t kChunks = 64;
  double partial[kChunks];
  const size_t chunk = (n + kChunks - 1) / kChunks;
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < kChunks; ++c) {
    const size_t begin = std::min(n, c * chunk), end = std::min(n, begin + chunk);
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (size_t i = begin; i < end; ++i) sum += static_cast<double>(x[i]) * x[i];
    partial[c] = sum;
  }
  double total = 0.0;
  for (size_t c = 0; c < kChunks; ++c) total += partial[c];
  return total;
}

}  // namespace cpu

Status CpuBackend::RunAdamW(Tensor param, Tensor master, Tensor grad, Tensor m, Tensor v,
                            const AdamWParams& p) {
  cpu::adamw_update(param.as<float>(), master.as<float>(), grad.as<float>(), m.as<float>(),
                    v.as<float>(), static_cast<size_t>(master.numel()), p.lr, p.beta1, p.beta2,
                    p.eps, p.weight_decay, p.step,
                    p.grad_sum_squares != nullptr
                        ? GradientClipScale(std::sqrt(*p.grad_sum_squares), p.max_grad_norm)
                        : p.grad_scale);
  return Status::Ok();
}

Status CpuBackend::RunSumInto(Tensor total, Tensor x, SumOf what, bool accumulate) {
  const size_t n = x.empty() ? 0 : static_cast<size_t>(x.numel());
  double sum = 0.0;
  if (what == SumOf::kSquares) {
    sum = n > 0 ? cpu::sum_squares(x.as<float>(), n) : 0.0;
  } else {
    for (size_t i = 0; i < n; ++i) sum += x.as<float>()[i];
  }
  *total.as<double>() = accumulate ? *total.as<double>() + sum : sum;
  return Status::Ok();
}

}  // namespace trainer
