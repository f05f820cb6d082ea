// SwiGLU, the gated MLP activation of the Llama family: out = silu(gate) * up with
// silu(x) = x * sigmoid(x), over gate_up (N,2F) = [gate | up] per row; the forward and backward
// kernels and the CpuBackend hooks. sigmoid is formed with SimdExp so that the loops vectorize and
// give the same bits in every lane. Rows are independent and split over threads.
#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"
#include "model/cpu/simd.h"

namespace trainer {
namespace cpu {
namespace {

// One row: out (F) = silu(gate (F)) * up (F).
TRAINER_CPU_CLONES
void SwiGluRow(float* out, const float* gate, const float* up, int F) {
#pragma omp simd
  for (int f = 0; f < F; ++f) {
    const float x = gate[f];
    const float sig = 1.f / (1.f + SimdExp(-x));
    out[f] = (x * sig) * up[f];
  }
}

// One row: dgate = dout * up * silu'(gate), dup = dout * silu(gate), with
// silu'(x) = sig(x) (1 + x (1 - sig(x))).
TRAINER_CPU_CLONES
void SwiGluBackwardRow(float* dgate, float* dup, const float* dout, const float* gate,
                       const float* up, int F) {
#pragma omp simd
  for (int f = 0; f < F; ++f) {
    const float x = gate[f];
    const float sig = 1.f / (1.f + SimdExp(-x));
    dgate[f] = dout[f] * up[f] * (sig * (1.f + x * (1.f - sig)));
    dup[f] = dout[f] * (x * sig);
  }
}

}  // namespace

void swiglu_forward(float* out, const float* gate_up, int64_t N, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* gu = gate_up + n * 2 * F;  // (2F) = [gate | up]
    SwiGluRow(out + n * F, gu, gu + F, F);
  }
}

void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int64_t N, int F,
                     float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* gu = gate_up + n * 2 * F;  // (2F)
    float* d = dgate_up + n * 2 * F;        // (2F)
    SwiGluBackwardRow(d, d + F, dout + n * F, gu, gu + F, F);
    if (out != nullptr) SwiGluRow(out + n * F, gu, gu + F, F);  // the forward's row, as it ran
  }
}

}  // namespace cpu

// The shapes were checked by Backend (backend.cpp).
Status CpuBackend::RunSwiGluForward(Tensor out, Tensor gate_up) {
  cpu::swiglu_forward(out.as<float>(), gate_up.as<float>(), Rows(gate_up),
                      static_cast<int>(Cols(gate_up) / 2));
  return Status::Ok();
}

Status CpuBackend::RunSwiGluBackward(Tensor dgate_up, Tensor dout, Tensor gate_up, Tensor act) {
  cpu::swiglu_backward(dgate_up.as<float>(), dout.as<float>(), gate_up.as<float>(), Rows(gate_up),
                       static_cast<int>(Cols(gate_up) / 2),
                       act.empty() ? nullptr : act.as<float>());
  return Status::Ok();
}

}  // namespace trainer
