// Dropout on the CPU: the hidden-state op (CpuBackend::RunDropout) and the row of attention
// probabilities that cpu/attention.cpp drops, both drawing their masks from philox.h. The CUDA
// twins are in cuda/dropout.cu and cuda/attention_fallback.cu.
#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"

namespace trainer {
namespace cpu {

void dropout_forward(float* out, const float* in, const float* residual, int64_t N, int C,
                     const DropoutKey& key) {
  const uint32_t threshold = DropoutThreshold(key.p);
  const float scale = DropoutScale(key.p);
  const int64_t first = key.first_column;  // columns are global: first + c
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t g = first / 4; g * 4 < first + C; ++g) {  // groups of four global columns
      const Philox4 bits = HiddenDropoutWords(key, r, g);
      for (int k = 0; k < 4; ++k) {
        const int64_t c = g * 4 + k - first;
        if (c < 0 || c >= C) continue;
        const int64_t i = r * C + c;
        const float kept = bits.v[k] >= threshold ? in[i] * scale : 0.f;
        out[i] = residual ? residual[i] + kept : kept;
      }
    }
  }
}

void dropout_row(float* x, int len, const DropoutKey& key, int64_t sample, int64_t position,
                 int head) {
  const uint32_t threshold = DropoutThreshold(key.p);
  const float scale = DropoutScale(key.p);
  for (int s0 = 0; s0 < len; s0 += 4) {
    const Philox4 bits = DropoutWords(key.seed, key.step, key.kind, key.layer, head, sample,
                                      position, s0 / 4);
    for (int s = s0; s < len && s < s0 + 4; ++s)
      x[s] = bits.v[s - s0] >= threshold ? x[s] * scale : 0.f;
  }
}

}  // namespace cpu

Status CpuBackend::RunDropout(Tensor out, Tensor in, Tensor residual, const DropoutKey& key) {
  cpu::dropout_forward(out.as<float>(), in.as<float>(),
                       residual.empty() ? nullptr : residual.as<float>(), Rows(in),
                       static_cast<int>(Cols(in)), key);
  return Status::Ok();
}

}  // namespace trainer
