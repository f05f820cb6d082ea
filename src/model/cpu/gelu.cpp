// GELU, tanh approximation (as GPT-2): the forward kernel (used by matmul_forward's fused
// activation), its derivative, and the CpuBackend GeluBackward op.
#include <cmath>

#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"
#include "model/cpu/op_checks.h"

namespace trainer {
namespace cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

}  // namespace

// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void gelu_forward(float* out, const float* in, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float x = in[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = 0.5f * x * (1.f + std::tanh(u));
  }
}

void gelu_backward(float* dx, const float* dy, const float* pre_act, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float x = pre_act[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float th = std::tanh(u);
    const float du_dx = kSqrt2OverPi * (1.f + 3.f * kCubic * x * x);
    const float grad = 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * du_dx;
    dx[i] = dy[i] * grad;
  }
}

}  // namespace cpu

Status CpuBackend::GeluBackward(Tensor dx, Tensor dy, Tensor pre_act) {
  const char* op = "GeluBackward";
  TRAINER_RETURN_IF_ERROR(cpu::CheckTensor(op, "dx", dx, DType::kF32));
  TRAINER_RETURN_IF_ERROR(cpu::CheckTensor(op, "dy", dy, DType::kF32));
  TRAINER_RETURN_IF_ERROR(cpu::CheckTensor(op, "pre_act", pre_act, DType::kF32));
  TRAINER_RETURN_IF_ERROR(cpu::CheckSameShape(op, "dx", dx, "dy", dy));
  TRAINER_RETURN_IF_ERROR(cpu::CheckSameShape(op, "dx", dx, "pre_act", pre_act));
  cpu::gelu_backward(dx.as<float>(), dy.as<float>(), pre_act.as<float>(),
                     static_cast<size_t>(dx.numel()));
  return Status::Ok();
}

}  // namespace trainer
