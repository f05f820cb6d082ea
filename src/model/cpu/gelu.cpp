// GELU, tanh approximation (as GPT-2): the forward kernel (used by matmul_forward's fused
// activation), its derivative, and the CpuBackend GeluBackward op. Written through the identity
// 0.5 (1 + tanh(u)) = sigmoid(2u), so that it needs only SimdExp and vectorizes.
#include <algorithm>

#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"
#include "model/cpu/simd.h"

namespace trainer {
namespace cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr size_t kSpan = 4096;  // elements per parallel task

// gelu(x) = 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
TRAINER_CPU_CLONES
void GeluForwardSpan(float* out, const float* in, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    const float x = in[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = x / (1.f + SimdExp(-2.f * u));
  }
}

// gelu'(x) = sigma + 0.5 x (1 - tanh(u)^2) u' = sigma + 2 x sigma (1 - sigma) u', sigma =
// sigmoid(2u).
TRAINER_CPU_CLONES
void GeluBackwardSpan(float* dx, const float* dy, const float* pre_act, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    const float x = pre_act[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float du_dx = kSqrt2OverPi * (1.f + 3.f * kCubic * x * x);
    const float sigma = 1.f / (1.f + SimdExp(-2.f * u));
    dx[i] = dy[i] * (sigma + 2.f * x * sigma * (1.f - sigma) * du_dx);
  }
}

}  // namespace

void gelu_forward(float* out, const float* in, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t begin = 0; begin < n; begin += kSpan)
    GeluForwardSpan(out + begin, in + begin, std::min(kSpan, n - begin));
}

void gelu_backward(float* dx, const float* dy, const float* pre_act, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t begin = 0; begin < n; begin += kSpan)
    GeluBackwardSpan(dx + begin, dy + begin, pre_act + begin, std::min(kSpan, n - begin));
}

}  // namespace cpu

Status CpuBackend::RunGeluForward(Tensor out, Tensor in) {
  cpu::gelu_forward(out.as<float>(), in.as<float>(), static_cast<size_t>(out.numel()));
  return Status::Ok();
}

Status CpuBackend::RunGeluBackward(Tensor dx, Tensor dy, Tensor pre_act) {
  cpu::gelu_backward(dx.as<float>(), dy.as<float>(), pre_act.as<float>(),
                     static_cast<size_t>(dx.numel()));
  return Status::Ok();
}

}  // namespace trainer
