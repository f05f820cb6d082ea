// The optimizer kernels: one AdamW step (decoupled weight decay, bias correction, gradient
// pre-scaling for clipping) over a contiguous span, with f32 master weights or their two 16-bit
// halves, and the sum of squares used by the gradient norm; with the CpuBackend AdamW,
// MasterHalves and SumInto ops.
#include <algorithm>
#include <cmath>
#include <utility>

#include "common/gradient_clip.h"
#include "common/log.h"
#include "common/master_remainder.h"
#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"

namespace trainer {
namespace cpu {

namespace {

// The moments updated in place from the gradient g; returns the new master weight.
inline float AdamWElement(float g, float& m, float& v, float w, const AdamWStepConstants& s) {
  g *= s.grad_scale;
  m = s.beta1 * m + (1.f - s.beta1) * g;
  v = s.beta2 * v + (1.f - s.beta2) * g * g;
  const float m_hat = m / s.bias_correction1;
  const float v_hat = v / s.bias_correction2;
  return w - s.lr * (m_hat / (std::sqrt(v_hat) + s.eps) + s.weight_decay * w);
}

}  // namespace

AdamWStepConstants::AdamWStepConstants(float lr, float beta1, float beta2, float eps,
                                       float weight_decay, int step, float grad_scale)
    : lr(lr),
      beta1(beta1),
      beta2(beta2),
      eps(eps),
      weight_decay(weight_decay),
      grad_scale(grad_scale),
      bias_correction1(static_cast<float>(1.0 - std::pow(double{beta1}, step))),
      bias_correction2(static_cast<float>(1.0 - std::pow(double{beta2}, step))) {}

void adamw_update(float* param, float* master, const float* grad, float* m, float* v, size_t n,
                  const AdamWStepConstants& s) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float w = AdamWElement(grad[i], m[i], v[i], master[i], s);
    master[i] = w;
    param[i] = w;  // param may be master
  }
}

void adamw_update_halves(uint16_t* param, uint16_t* remainder, const float* grad, float* m,
                         float* v, size_t n, const AdamWStepConstants& s) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float w = AdamWElement(grad[i], m[i], v[i], JoinMaster(param[i], remainder[i]), s);
    param[i] = MasterHigh(w);
    remainder[i] = MasterRemainder(w);
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
  const cpu::AdamWStepConstants s(
      p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.step,
      p.grad_sum_squares != nullptr
          ? GradientClipScale(std::sqrt(*p.grad_sum_squares), p.max_grad_norm)
          : p.grad_scale);
  const size_t n = static_cast<size_t>(master.numel());
  if (master.dtype == DType::kU16)
    cpu::adamw_update_halves(param.as<uint16_t>(), master.as<uint16_t>(), grad.as<float>(),
                             m.as<float>(), v.as<float>(), n, s);
  else
    cpu::adamw_update(param.as<float>(), master.as<float>(), grad.as<float>(), m.as<float>(),
                      v.as<float>(), n, s);
  return Status::Ok();
}

Status CpuBackend::RunMasterHalves(Tensor master, Tensor param, Tensor remainder, bool join) {
  float* w = master.as<float>();
  uint16_t* high = param.as<uint16_t>();
  uint16_t* low = remainder.as<uint16_t>();
  const int64_t n = master.numel();
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i) {
    if (join) {
      w[i] = JoinMaster(high[i], low[i]);
    } else {
      high[i] = MasterHigh(w[i]);
      low[i] = MasterRemainder(w[i]);
    }
  }
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
